#include "launcher/report/summary_schema.hpp"

#include <vector>

namespace geotrain::summary {

namespace {
std::string check_object(std::string_view object, const nlohmann::json& o) {
  if (!o.is_object())
    return std::string("summary.json's ") + std::string(object) + " is not an object";
  std::vector<std::string> keys;
  for (const auto& [k, _] : o.items()) keys.push_back(k);
  return schema::check(kObjects, fields::common, "summary.json object", "core/run_summary.json",
                       object, keys);
}
}  // namespace

std::string check(const nlohmann::json& s) {
  if (auto e = check_object(name::summary, s); !e.empty()) return e;
  if (s.contains(field::per_region))
    for (const auto& [region, o] : s.at(field::per_region).items())
      if (auto e = check_object(name::per_region, o); !e.empty()) return e + " (" + region + ")";
  const std::pair<const char*, const char*> lists[] = {
      {field::codec_phases, name::codec_phase},
      {field::faults, name::fault},
      {field::regions_marked_dead, name::dead_region}};
  for (const auto& [key, object] : lists) {
    if (!s.contains(key)) continue;
    if (!s.at(key).is_array()) return std::string("summary.json's ") + key + " is not a list";
    for (const auto& o : s.at(key))
      if (auto e = check_object(object, o); !e.empty()) return e;
  }
  return "";
}

}  // namespace geotrain::summary
