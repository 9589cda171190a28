#include "core/record_schema.hpp"

#include <algorithm>

namespace geotrain::schema {

namespace {
bool listed(std::span<const char* const> names, std::string_view key) {
  return std::any_of(names.begin(), names.end(), [&](const char* f) { return key == f; });
}
}  // namespace

const RecordSpec* find(std::span<const RecordSpec> records, std::string_view name) {
  for (const RecordSpec& r : records)
    if (name == r.name) return &r;
  return nullptr;
}

std::string check(std::span<const RecordSpec> records, std::span<const char* const> common,
                  std::string_view kind, std::string_view file, std::string_view name,
                  const std::vector<std::string>& keys, bool strict) {
  const RecordSpec* spec = find(records, name);
  const std::string what = std::string(kind) + " '" + std::string(name) + "'";
  if (spec == nullptr) return what + " is not in " + std::string(file);
  if (spec->extensible && !strict) return "";
  for (const std::string& key : keys) {
    if (listed(common, key) || listed({spec->fields, spec->count}, key)) continue;
    return what + " has a field '" + key + "' that " + std::string(file) + " does not give it";
  }
  return "";
}

}  // namespace geotrain::schema
