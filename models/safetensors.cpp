#include "models/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>

#include "core/error.hpp"

namespace geotrain::models {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this build writes host floats as they are");

namespace {

// Saturates at UINT64_MAX, so that a hostile shape cannot wrap around to a small count.
uint64_t element_count(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) {
    if (d != 0 && n > UINT64_MAX / d) return UINT64_MAX;
    n *= d;
  }
  return n;
}

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

const Safetensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

void write_safetensors(const std::filesystem::path& file,
                       const std::vector<SafetensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    GT_ASSERT(element_count(t.shape) == t.values.size(), "{}: shape {} but {} values", t.name,
              shape_text(t.shape), t.values.size());
    GT_ASSERT(!header.contains(t.name), "tensor '{}' given twice", t.name);
    const uint64_t bytes = t.values.size() * sizeof(float);
    header[t.name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned

  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  GT_REQUIRE(out, "{}: cannot open for writing", file.string());
  const uint64_t n = text.size();
  out.write(reinterpret_cast<const char*>(&n), sizeof n);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& t : tensors)
    out.write(reinterpret_cast<const char*>(t.values.data()),
              static_cast<std::streamsize>(t.values.size_bytes()));
  out.close();
  GT_REQUIRE(out, "{}: writing {} bytes failed", file.string(), 8 + n + offset);
}

SafetensorsFile read_safetensors(const std::filesystem::path& file) {
  const std::string source = file.string();
  std::ifstream in(file, std::ios::binary);
  GT_REQUIRE(in, "{}: cannot open the safetensors file", source);
  const std::string blob((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  GT_REQUIRE(blob.size() >= 8, "{}: truncated: {} bytes, shorter than the 8-byte header length",
             source, blob.size());
  uint64_t n = 0;
  std::memcpy(&n, blob.data(), sizeof n);
  GT_REQUIRE(n <= blob.size() - 8, "{}: truncated: the header is {} bytes but only {} follow",
             source, n, blob.size() - 8);
  const char* data = blob.data() + 8 + n;
  const uint64_t data_bytes = blob.size() - 8 - n;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(blob.begin() + 8, blob.begin() + 8 + static_cast<ptrdiff_t>(n));
  } catch (const nlohmann::json::exception& e) {
    GT_REQUIRE(false, "{}: the header is not valid JSON: {}", source, e.what());
  }
  GT_REQUIRE(header.is_object(), "{}: the header must be a JSON object, not {}", source,
             header.type_name());

  SafetensorsFile result;
  std::vector<std::pair<uint64_t, Safetensor>> read;  // (data offset, tensor)
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      GT_REQUIRE(entry.is_object(), "{}: __metadata__ must be an object of strings", source);
      for (const auto& [key, value] : entry.items()) {
        GT_REQUIRE(value.is_string(), "{}: __metadata__.{} is {}, must be a string", source, key,
                   value.dump());
        result.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    GT_REQUIRE(entry.is_object() && entry.contains("dtype") && entry.contains("shape") &&
                   entry.contains("data_offsets"),
               "{}: tensor '{}' needs dtype, shape and data_offsets, has {}", source, name,
               entry.dump());
    GT_REQUIRE(entry["dtype"] == "F32", "{}: tensor '{}' has dtype {}, only F32 is supported",
               source, name, entry["dtype"].dump());
    const auto& shape = entry["shape"];
    const auto& offsets = entry["data_offsets"];
    GT_REQUIRE(
        shape.is_array() && std::all_of(shape.begin(), shape.end(),
                                        [](const auto& d) { return d.is_number_unsigned(); }),
        "{}: tensor '{}': shape {} must be a list of sizes", source, name, shape.dump());
    GT_REQUIRE(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                   offsets[1].is_number_unsigned(),
               "{}: tensor '{}': data_offsets {} must be [begin, end]", source, name,
               offsets.dump());
    Safetensor t;
    t.name = name;
    t.shape = shape.get<std::vector<uint64_t>>();
    const auto begin = offsets[0].get<uint64_t>();
    const auto end = offsets[1].get<uint64_t>();
    GT_REQUIRE(begin <= end && end <= data_bytes,
               "{}: tensor '{}': data_offsets [{}, {}] out of range (the data is {} bytes)", source,
               name, begin, end, data_bytes);
    const uint64_t count = element_count(t.shape);
    GT_REQUIRE(count <= data_bytes / sizeof(float) && end - begin == count * sizeof(float),
               "{}: tensor '{}': data_offsets [{}, {}] hold {} bytes, shape {} F32 needs {}",
               source, name, begin, end, end - begin, shape_text(t.shape), count * sizeof(float));
    t.values.resize(count);
    if (count) std::memcpy(t.values.data(), data + begin, count * sizeof(float));
    read.emplace_back(begin, std::move(t));
  }
  // JSON objects have no order: the data offsets give the order the writer wrote them in.
  std::stable_sort(read.begin(), read.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [offset, t] : read) result.tensors.push_back(std::move(t));
  return result;
}

}  // namespace geotrain::models
