#include "models/npy.hpp"

#include <bit>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "core/error.hpp"

namespace geotrain::models {

static_assert(std::endian::native == std::endian::little, "'<i4' data is written as it is held");

namespace {
constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
constexpr size_t kPreamble = kMagicSize + 2 + 2;  // magic, version, u16 header length
}  // namespace

void write_npy_int32(const std::filesystem::path& file, const std::vector<uint64_t>& shape,
                     std::span<const int32_t> values) {
  uint64_t count = 1;
  std::string dims;
  for (uint64_t d : shape) {
    count *= d;
    dims += std::to_string(d) + ", ";
  }
  GT_ASSERT(count == values.size(), "npy: shape has {} elements, given {}", count, values.size());
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // (a, b); a one-tuple keeps its comma: (a,)
  if (shape.size() == 1) dims.resize(dims.size() - 1);
  std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t total = (kPreamble + header.size() + 1 + 63) / 64 * 64;
  header.append(total - kPreamble - header.size() - 1, ' ');
  header += '\n';
  GT_ASSERT(header.size() <= UINT16_MAX, "npy header of {} bytes", header.size());

  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  GT_REQUIRE(out, "{}: cannot open for writing", file.string());
  out.write(kMagic, kMagicSize);
  const char version[2] = {1, 0};
  out.write(version, 2);
  const auto n = static_cast<uint16_t>(header.size());
  out.write(reinterpret_cast<const char*>(&n), sizeof n);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size_bytes()));
  out.close();
  GT_REQUIRE(out, "{}: writing {} int32 values failed", file.string(), values.size());
}

NpyInt32 read_npy_int32(const std::filesystem::path& file) {
  const std::string source = file.string();
  std::ifstream in(file, std::ios::binary);
  GT_REQUIRE(in, "{}: cannot open the .npy file", source);
  const std::string blob((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  GT_REQUIRE(blob.size() >= kPreamble && blob.compare(0, kMagicSize, kMagic) == 0,
             "{}: not a .npy file (no \\x93NUMPY magic)", source);
  GT_REQUIRE(blob[6] == 1 && blob[7] == 0, "{}: .npy version {}.{}, only 1.0 is read", source,
             int(blob[6]), int(blob[7]));
  uint16_t n = 0;
  std::memcpy(&n, blob.data() + 8, sizeof n);
  GT_REQUIRE(kPreamble + n <= blob.size(), "{}: truncated: header of {} bytes", source, n);
  const std::string header = blob.substr(kPreamble, n);
  GT_REQUIRE(header.find("'descr': '<i4'") != std::string::npos,
             "{}: dtype is not int32 ('<i4'): {}", source, header);
  GT_REQUIRE(header.find("'fortran_order': False") != std::string::npos,
             "{}: only C-order arrays are read: {}", source, header);
  const size_t open = header.find("'shape': (");
  const size_t close = header.find(')', open);
  GT_REQUIRE(open != std::string::npos && close != std::string::npos, "{}: no shape in {}", source,
             header);
  NpyInt32 result;
  uint64_t count = 1;
  for (size_t i = open + 10; i < close;) {
    if (header[i] == ' ' || header[i] == ',') {
      ++i;
      continue;
    }
    size_t used = 0;
    uint64_t d = 0;
    try {
      d = std::stoull(header.substr(i, close - i), &used);
    } catch (const std::exception&) {
      GT_REQUIRE(false, "{}: bad shape in {}", source, header);
    }
    result.shape.push_back(d);
    count = d != 0 && count > UINT64_MAX / d ? UINT64_MAX : count * d;  // saturates
    i += used;
  }
  const uint64_t data_bytes = blob.size() - kPreamble - n;
  GT_REQUIRE(count <= data_bytes / 4 && data_bytes == count * 4,
             "{}: {} data bytes, shape needs {} int32 values", source, data_bytes, count);
  result.values.resize(count);
  if (count) std::memcpy(result.values.data(), blob.data() + kPreamble + n, data_bytes);
  return result;
}

}  // namespace geotrain::models
