#include "server/metrics.hpp"

#include "core/error.hpp"

namespace geotrain::server {

ServerMetrics::ServerMetrics(std::vector<std::string> regions, uint32_t staleness_bound,
                             std::optional<std::filesystem::path> jsonl)
    : names_(std::move(regions)), regions_(names_.size()) {
  for (auto& r : regions_) r.staleness.assign(staleness_bound + 1, 0);
  if (jsonl) {
    std::filesystem::create_directories(jsonl->parent_path());
    out_.open(*jsonl, std::ios::app);
    GT_REQUIRE(out_.good(), "metrics file '{}' cannot be opened for writing", jsonl->string());
  }
}

void ServerMetrics::record_staleness(size_t r, uint32_t tau) {
  auto& h = regions_.at(r).staleness;
  h[std::min<size_t>(tau, h.size() - 1)] += 1;
}

void ServerMetrics::round_released(uint32_t shard, uint64_t round, size_t contributors,
                                   size_t late) {
  ++applied_rounds_;
  nlohmann::json fields{{"shard", shard}, {"round", round}, {"contributors", contributors}};
  if (late > 0) fields["late"] = late;
  event("round", std::move(fields));
}

void ServerMetrics::event(const std::string& name, nlohmann::json fields) {
  if (!out_.is_open()) return;
  nlohmann::json line{
      {"t", std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count()},
      {"event", name}};
  line.update(fields);
  out_ << line.dump() << '\n';
  out_.flush();
}

nlohmann::json ServerMetrics::snapshot() const {
  nlohmann::json regions = nlohmann::json::object();
  for (size_t r = 0; r < regions_.size(); ++r) {
    const auto& c = regions_[r];
    regions[names_[r]] = {{"pushes", c.pushes},
                          {"pulls", c.pulls},
                          {"bytes_in", c.bytes_in},
                          {"bytes_out", c.bytes_out},
                          {"errors", c.errors},
                          {"gate_waits", c.gate_waits},
                          {"gate_wait_us", c.gate_wait_us},
                          {"rounds_sat_out", c.rounds_sat_out},
                          {"staleness_histogram", c.staleness}};
  }
  return {{"applied_rounds", applied_rounds_}, {"regions", regions}};
}

}  // namespace geotrain::server
