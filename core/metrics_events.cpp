#include <algorithm>
#include <iterator>

#include "core/metrics_events_check.hpp"

namespace geotrain::events {

namespace {
bool listed(const char* const* begin, const char* const* end, std::string_view key) {
  return std::any_of(begin, end, [&](const char* f) { return key == f; });
}
}  // namespace

const EventSpec* find(std::string_view name) {
  for (const EventSpec& e : kEvents)
    if (name == e.name) return &e;
  return nullptr;
}

std::string check(std::string_view name, const std::vector<std::string>& keys, bool strict) {
  const EventSpec* spec = find(name);
  if (spec == nullptr)
    return "event '" + std::string(name) + "' is not in core/metrics_events.json";
  if (spec->extensible && !strict) return "";
  for (const std::string& key : keys) {
    if (listed(std::begin(fields::common), std::end(fields::common), key)) continue;
    if (listed(spec->fields, spec->fields + spec->count, key)) continue;
    return "event '" + std::string(name) + "' has a field '" + key +
           "' that core/metrics_events.json does not give it";
  }
  return "";
}

}  // namespace geotrain::events
