#include "launcher/report/lagging_tensors.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <numeric>

#include "core/error.hpp"
#include "launcher/report/jsonl_tail.hpp"

namespace geotrain::launcher {

namespace fs = std::filesystem;

namespace {

// The last tensor_motion event of one leader's metrics file; empty when there is none.
nlohmann::json last_motion_event(const fs::path& file) {
  nlohmann::json found;
  for (auto& e : JsonlTail(file).read_new())
    if (e.value("event", "") == "tensor_motion") found = std::move(e);
  return found;
}

}  // namespace

std::vector<TensorMotionRow> read_tensor_motion(const fs::path& run_dir) {
  GT_REQUIRE(fs::is_directory(run_dir), "critical: {} is not a run folder", run_dir.string());
  std::vector<fs::path> leaders;
  for (const auto& e : fs::directory_iterator(run_dir)) {
    const auto name = e.path().filename().string();
    if (name.starts_with("worker-") && name.ends_with("-0.metrics.jsonl"))
      leaders.push_back(e.path());
  }
  std::sort(leaders.begin(), leaders.end());
  std::vector<TensorMotionRow> rows;
  size_t events = 0;
  for (const auto& file : leaders) {
    const auto event = last_motion_event(file);
    if (event.is_null()) continue;
    const auto& tensors = event.at("tensors");
    GT_REQUIRE(events == 0 || tensors.size() == rows.size(),
               "critical: {} has {} tensors, the other leaders {}", file.string(), tensors.size(),
               rows.size());
    if (events == 0) rows.resize(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto name = tensors[i].at("name").get<std::string>();
      GT_REQUIRE(events == 0 || name == rows[i].name,
                 "critical: tensor {} of {} is {}, the other leaders' is {}", i, file.string(),
                 name, rows[i].name);
      rows[i].name = name;
      rows[i].elements = tensors[i].at("elements").get<uint64_t>();
      rows[i].relative_update += tensors[i].at("relative_update").get<double>();
    }
    ++events;
  }
  GT_REQUIRE(events > 0,
             "critical: no leader in {} wrote a tensor_motion event (worker-<region>-0."
             "metrics.jsonl; written at the end of a leader's exchanges by builds since "
             "2026-11-29)",
             run_dir.string());
  for (auto& r : rows) r.relative_update /= static_cast<double>(events);
  return rows;
}

LagChoice choose_lagging(const std::vector<TensorMotionRow>& rows, double share) {
  GT_REQUIRE(share >= 0.0 && share <= 1.0, "critical: --lag-share is {}, must be in [0, 1]", share);
  LagChoice out;
  for (const auto& r : rows) out.total_elements += r.elements;
  std::vector<size_t> order(rows.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return rows[a].relative_update < rows[b].relative_update;
  });
  std::vector<bool> lags(rows.size(), false);
  const double budget = share * static_cast<double>(out.total_elements);
  for (size_t i : order) {
    if (static_cast<double>(out.lagging_elements + rows[i].elements) > budget) break;
    out.lagging_elements += rows[i].elements;
    out.lagging.push_back(rows[i].name);
    lags[i] = true;
  }
  for (size_t i = 0; i < rows.size(); ++i)
    if (!lags[i]) out.critical.push_back(rows[i].name);
  return out;
}

}  // namespace geotrain::launcher
