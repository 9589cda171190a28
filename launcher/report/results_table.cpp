#include "launcher/report/results_table.hpp"

#include <fmt/format.h>

#include "core/run_summary_keys.hpp"

namespace geotrain::launcher {

namespace k = summary::field;  // summary.json's keys (core/run_summary.json)

using nlohmann::json;

std::optional<double> summary_number(const json& summary, const char* key) {
  if (!summary.is_object() || !summary.contains(key) || !summary[key].is_number())
    return std::nullopt;
  return summary[key].get<double>();
}

bool completed(const json& summary) {
  return summary.is_object() && summary.value(k::status, "") == "completed";
}

std::string status_cell(const json& summary) {
  if (!summary.is_object()) return "not run";
  const auto status = summary.value(k::status, "");
  if (status == "completed") return status;
  return fmt::format("{}, not ranked", status.empty() ? "unknown" : status);
}

RunDeltas derive_deltas(const json& s, const json& b) {
  const auto opt = [](std::optional<double> v) { return v ? json(*v) : json(nullptr); };
  const auto both = [&](const char* key) {
    return std::pair{summary_number(s, key), summary_number(b, key)};
  };
  RunDeltas r;
  const auto [acc, bacc] = both(k::final_test_accuracy);
  const auto [bpb, bbpb] = both(k::final_val_bpb);
  const auto [ttt, bttt] = both(k::time_to_target_seconds);
  const auto [wall, bwall] = both(k::wall_seconds);
  const auto [wan, bwan] = both(k::wan_bytes_total);
  r.accuracy = opt(acc);
  r.bpb = opt(bpb);
  r.loss = opt(summary_number(s, k::final_val_loss));
  r.ttt = opt(ttt);
  r.wall = opt(wall);
  r.wan = opt(wan);
  r.wire = opt(summary_number(s, k::wan_wire_bytes_total));
  if (!completed(s) || !completed(b)) return r;  // listed, not ranked
  if (acc && bacc) r.delta = 100 * (*acc - *bacc);
  if (bpb && bbpb) r.bpb_delta = *bpb - *bbpb;
  if (wan && bwan && *bwan > 0) r.reduction = 1.0 - *wan / *bwan;
  if (ttt && bttt && *ttt > 0)
    r.speedup = *bttt / *ttt;
  else if (wall && bwall && *wall > 0)
    r.speedup = *bwall / *wall;
  return r;
}

std::string csv_text(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string csv_cell(const json& v) {
  if (v.is_null()) return "";
  if (v.is_number_float()) return fmt::format("{:.6g}", v.get<double>());
  if (v.is_string()) return csv_text(v.get<std::string>());
  return v.dump();
}

}  // namespace geotrain::launcher
