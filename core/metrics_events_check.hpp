// The worker metrics events' schema (core/metrics_events.json), as C++ reads it: the generated
// names (core/metrics_events.hpp: events::field::*, events::name::*) and a check of one line's
// fields against it, for tests and for the Python API's writer.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/metrics_events.hpp"

namespace geotrain::events {

// The event named `name`, or nullptr when the schema has none.
const EventSpec* find(std::string_view name);

// What is wrong with a line of event `name` and these field names ("" when nothing is): an
// event the schema does not name, or a field it does not give that event (nor every event:
// `event`, `time`). An extensible event may carry other fields unless `strict`.
std::string check(std::string_view name, const std::vector<std::string>& keys, bool strict = true);

}  // namespace geotrain::events
