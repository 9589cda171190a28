#include "core/region_workers.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "core/error.hpp"

namespace geotrain {

RegionWorkers::RegionWorkers(std::vector<std::string> regions, std::vector<uint32_t> counts)
    : regions_(std::move(regions)), counts_(std::move(counts)) {
  GT_ASSERT(regions_.size() == counts_.size(), "{} regions, {} worker counts", regions_.size(),
            counts_.size());
  for (auto c : counts_) GT_ASSERT(c >= 1, "a region of {} workers", c);
}

RegionWorkers RegionWorkers::uniform(std::vector<std::string> regions, uint32_t count) {
  std::vector<uint32_t> counts(regions.size(), count);
  return RegionWorkers(std::move(regions), std::move(counts));
}

size_t RegionWorkers::index(std::string_view region) const {
  const auto it = std::find(regions_.begin(), regions_.end(), region);
  GT_REQUIRE(it != regions_.end(), "region '{}' is not one of the config's regions ({})", region,
             fmt::join(regions_, ", "));
  return static_cast<size_t>(it - regions_.begin());
}

uint32_t RegionWorkers::in(std::string_view region) const { return counts_[index(region)]; }

uint32_t RegionWorkers::total() const {
  return std::accumulate(counts_.begin(), counts_.end(), uint32_t{0});
}

uint32_t RegionWorkers::first_rank(std::string_view region) const {
  const auto i = index(region);
  return std::accumulate(counts_.begin(), counts_.begin() + static_cast<std::ptrdiff_t>(i),
                         uint32_t{0});
}

std::pair<std::string, uint32_t> RegionWorkers::place(uint32_t rank) const {
  uint32_t first = 0;
  for (size_t i = 0; i < regions_.size(); ++i) {
    if (rank < first + counts_[i]) return {regions_[i], rank - first};
    first += counts_[i];
  }
  GT_REQUIRE(false, "worker rank {} is beyond the fleet's {} workers ({})", rank, total(), text());
  return {};
}

uint32_t RegionWorkers::largest() const {
  return counts_.empty() ? 1 : *std::max_element(counts_.begin(), counts_.end());
}

bool RegionWorkers::uneven() const {
  return std::adjacent_find(counts_.begin(), counts_.end(), std::not_equal_to<>()) != counts_.end();
}

std::string RegionWorkers::text() const {
  if (!uneven()) return std::to_string(largest());
  std::string out = "{";
  for (size_t i = 0; i < regions_.size(); ++i)
    out += fmt::format("{}{}: {}", i ? ", " : "", regions_[i], counts_[i]);
  return out + "}";
}

RegionWorkers read_region_workers(const YamlReader& in, const YAML::Node& root,
                                  const std::vector<std::string>& regions, uint32_t most) {
  const auto w = root["worker"];
  if (!w || !w.IsMap() || !w["workers_per_region"]) return RegionWorkers::uniform(regions, 1);
  const auto n = w["workers_per_region"];
  if (!n.IsMap())
    return RegionWorkers::uniform(regions,
                                  in.number<uint32_t>(n, "worker.workers_per_region", 1, most));
  in.check_keys(n, "worker.workers_per_region",
                std::set<std::string>(regions.begin(), regions.end()));
  std::vector<uint32_t> counts;
  for (const auto& r : regions) {
    GT_REQUIRE(n[r],
               "{}: worker.workers_per_region has no count for region '{}' (a mapping names "
               "every region)",
               in.source(), r);
    counts.push_back(in.number<uint32_t>(n[r], "worker.workers_per_region." + r, 1, most));
  }
  return RegionWorkers(regions, std::move(counts));
}

}  // namespace geotrain
