#include "core/metrics_events_check.hpp"

namespace geotrain::events {

const EventSpec* find(std::string_view name) { return schema::find(kEvents, name); }

std::string check(std::string_view name, const std::vector<std::string>& keys, bool strict) {
  return schema::check(kEvents, fields::common, "event", "core/metrics_events.json", name, keys,
                       strict);
}

}  // namespace geotrain::events
