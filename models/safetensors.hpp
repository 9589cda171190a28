// Safetensors: named fp32 tensors in one file, the format PyTorch tooling reads and writes, so
// that geotrain's parameters can be handed to a Python reference and compared back.
//
//   [u64 little-endian n][n bytes of JSON header][raw data]
//   header: {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [a, b]}, ...,
//            "__metadata__": {"<key>": "<string>", ...}}
// Offsets are bytes into the raw data, which follows the header; tensors are written in the
// order given, back to back, and the header is padded with spaces to a multiple of 8 bytes (as
// the safetensors package does). Only F32 is read or written: geotrain's parameters are fp32.
//
// Plain functions; nothing is shared, everything blocks on the file. Bad input (a truncated
// file, a header that is not JSON or not the shape above, offsets outside the data or not
// matching the shape, a dtype other than F32, a metadata value that is not a string) is an
// InputError naming the file and the tensor. Writing throws InputError when the file cannot be
// written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/span.hpp"

namespace geotrain::models {

// One tensor to write; `values` borrows (numel(shape) elements).
struct SafetensorView {
  std::string name;
  std::vector<uint64_t> shape;
  ConstFloatSpan values;
};

struct Safetensor {
  std::string name;
  std::vector<uint64_t> shape;
  std::vector<float> values;
};

struct SafetensorsFile {
  std::vector<Safetensor> tensors;  // in data-offset order, i.e. the order they were written
  std::map<std::string, std::string> metadata;
  // nullptr when there is no tensor of that name.
  const Safetensor* find(const std::string& name) const;
};

void write_safetensors(const std::filesystem::path& file,
                       const std::vector<SafetensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
SafetensorsFile read_safetensors(const std::filesystem::path& file);

}  // namespace geotrain::models
