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

std::string region_values_text(const std::vector<std::string>& regions,
                               const std::vector<uint32_t>& values) {
  std::string out = "{";
  for (size_t i = 0; i < regions.size(); ++i)
    out += fmt::format("{}{}: {}", i ? ", " : "", regions[i], values[i]);
  return out + "}";
}

std::string RegionWorkers::text() const {
  return uneven() ? region_values_text(regions_, counts_) : std::to_string(largest());
}

std::vector<uint32_t> read_region_counts(const YamlReader& in, const YAML::Node& node,
                                         const std::string& section, const std::string& key,
                                         const std::vector<std::string>& regions, uint32_t fallback,
                                         uint32_t lo, uint32_t hi) {
  const auto& w = node;
  const std::string name = section + "." + key;
  if (!w || !w.IsMap() || !w[key]) return std::vector<uint32_t>(regions.size(), fallback);
  const auto n = w[key];
  if (!n.IsMap())
    return std::vector<uint32_t>(regions.size(), in.number<uint32_t>(n, name, lo, hi));
  in.check_keys(n, name, std::set<std::string>(regions.begin(), regions.end()));
  std::vector<uint32_t> counts;
  for (const auto& r : regions) {
    GT_REQUIRE(n[r], "{}: {} has no value for region '{}' (a mapping names every region)",
               in.source(), name, r);
    counts.push_back(in.number<uint32_t>(n[r], name + "." + r, lo, hi));
  }
  return counts;
}

RegionWorkers read_region_workers(const YamlReader& in, const YAML::Node& root,
                                  const std::vector<std::string>& regions, uint32_t most) {
  return RegionWorkers(regions, read_region_counts(in, root["worker"], "worker",
                                                   "workers_per_region", regions, 1, 1, most));
}

RegionBatches::RegionBatches(uint32_t size) : uniform_(size) {}

RegionBatches::RegionBatches(std::vector<std::string> regions, std::vector<uint32_t> sizes)
    : regions_(std::move(regions)), sizes_(std::move(sizes)) {
  GT_ASSERT(regions_.size() == sizes_.size(), "{} regions, {} batch sizes", regions_.size(),
            sizes_.size());
  for (auto s : sizes_) GT_ASSERT(s >= 1, "a micro-batch of {}", s);
  if (!sizes_.empty() && !uneven()) {  // one size for every region, written either way
    uniform_ = sizes_.front();
    regions_.clear();
    sizes_.clear();
  }
}

uint32_t RegionBatches::in(std::string_view region) const {
  if (regions_.empty()) return uniform_;
  const auto it = std::find(regions_.begin(), regions_.end(), region);
  GT_REQUIRE(it != regions_.end(), "region '{}' is not one of the config's regions ({})", region,
             fmt::join(regions_, ", "));
  return sizes_[static_cast<size_t>(it - regions_.begin())];
}

uint32_t RegionBatches::of_rank(const RegionWorkers& workers, uint32_t rank) const {
  return regions_.empty() ? uniform_ : in(workers.place(rank).first);
}

bool RegionBatches::uneven() const {
  return std::adjacent_find(sizes_.begin(), sizes_.end(), std::not_equal_to<>()) != sizes_.end();
}

std::string RegionBatches::text() const {
  return regions_.empty() ? std::to_string(uniform_) : region_values_text(regions_, sizes_);
}

uint64_t RegionBatches::global(const RegionWorkers& workers) const {
  return offset(workers, workers.total());
}

uint64_t RegionBatches::offset(const RegionWorkers& workers, uint32_t rank) const {
  uint64_t at = 0;  // the sizes of ranks 0 .. rank-1
  for (uint32_t r = 0; r < rank; ++r) at += of_rank(workers, r);
  return at;
}

RegionBatches read_region_batches(const YamlReader& in, const YAML::Node& root,
                                  const std::vector<std::string>& regions) {
  return RegionBatches(regions, read_region_counts(in, root["worker"], "worker", "batch_size",
                                                   regions, 64, 1, 1 << 20));
}

RegionDevices::RegionDevices(std::string device) : uniform_(std::move(device)) {}

RegionDevices::RegionDevices(std::vector<std::string> regions, std::vector<std::string> devices)
    : regions_(std::move(regions)), devices_(std::move(devices)) {
  GT_ASSERT(regions_.size() == devices_.size(), "{} regions, {} devices", regions_.size(),
            devices_.size());
  if (!devices_.empty() && std::all_of(devices_.begin(), devices_.end(), [&](const std::string& d) {
        return d == devices_.front();
      })) {
    uniform_ = devices_.front();  // one device for every region, written either way
    regions_.clear();
    devices_.clear();
  }
}

const std::string& RegionDevices::in(std::string_view region) const {
  if (regions_.empty()) return uniform_;
  const auto it = std::find(regions_.begin(), regions_.end(), region);
  GT_REQUIRE(it != regions_.end(), "region '{}' is not one of the config's regions ({})", region,
             fmt::join(regions_, ", "));
  return devices_[static_cast<size_t>(it - regions_.begin())];
}

bool RegionDevices::any(std::string_view device) const {
  if (regions_.empty()) return uniform_ == device;
  return std::find(devices_.begin(), devices_.end(), device) != devices_.end();
}

std::string RegionDevices::text() const {
  if (regions_.empty()) return uniform_;
  std::string out = "{";
  for (size_t i = 0; i < regions_.size(); ++i)
    out += fmt::format("{}{}: {}", i ? ", " : "", regions_[i], devices_[i]);
  return out + "}";
}

RegionDevices read_region_devices(const YamlReader& in, const YAML::Node& root,
                                  const std::vector<std::string>& regions) {
  const auto w = root["worker"];
  if (!w || !w.IsMap() || !w["device"]) return RegionDevices();
  const auto n = w["device"];
  const std::set<std::string> allowed{"cpu", "cuda"};
  if (!n.IsMap()) return RegionDevices(in.choice(n, "worker.device", allowed));
  in.check_keys(n, "worker.device", std::set<std::string>(regions.begin(), regions.end()));
  std::vector<std::string> devices;
  for (const auto& r : regions) {
    GT_REQUIRE(n[r],
               "{}: worker.device has no value for region '{}' (a mapping names every region)",
               in.source(), r);
    devices.push_back(in.choice(n[r], "worker.device." + r, allowed));
  }
  return RegionDevices(regions, std::move(devices));
}

std::vector<std::string> read_elastic_regions(const YamlReader& in, const YAML::Node& root,
                                              const std::vector<std::string>& regions) {
  const auto w = root["worker"];
  const bool elastic =
      w && w.IsMap() && w["elastic"] ? in.boolean(w["elastic"], "worker.elastic") : true;
  const RegionDevices devices = read_region_devices(in, root, regions);
  std::vector<std::string> out;
  for (const auto& r : regions)
    if (regions_re_form(elastic, devices.in(r))) out.push_back(r);
  return out;
}

}  // namespace geotrain
