// The shape of the project's two schemas of names (core/metrics_events.json: the worker metrics
// events; core/run_summary.json: the objects of summary.json), as the generated headers
// (cmake/RecordNames.cmake) give them to C++: named records, each with its field names, and a
// check of one record's keys against them. Pure functions over constant tables.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace geotrain::schema {

struct RecordSpec {
  const char* name;
  const char* const* fields;
  std::size_t count;
  bool extensible;  // the Python API may add the user's own fields (events only)
};

// The record named `name` among `records`, or nullptr.
const RecordSpec* find(std::span<const RecordSpec> records, std::string_view name);

// What is wrong with a record `name` holding these keys ("" when nothing is): a record the
// schema does not name, or a key it does not give that record (nor every record: `common`). An
// extensible record may hold other keys unless `strict`. Messages name the record as
// "<kind> '<name>'" and the schema by `file`.
std::string check(std::span<const RecordSpec> records, std::span<const char* const> common,
                  std::string_view kind, std::string_view file, std::string_view name,
                  const std::vector<std::string>& keys, bool strict = true);

}  // namespace geotrain::schema
