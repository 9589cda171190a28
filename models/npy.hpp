// Npy: int32 arrays in NumPy's .npy format (version 1.0), so that token batches can be handed to
// a Python reference (numpy.load) and read back.
//
//   "\x93NUMPY" 1 0 [u16 little-endian header length]
//   "{'descr': '<i4', 'fortran_order': False, 'shape': (d0, d1, ...), }" padded with spaces and
//   ended by '\n' so that the data starts at a multiple of 64 bytes; then the C-order data.
//
// Plain functions that block on the file. Reading accepts exactly what write_npy_int32 writes
// (and what numpy.save writes for a C-order int32 array); anything else (another dtype or
// version, Fortran order, a truncated file) is an InputError naming the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace geotrain::models {

struct NpyInt32 {
  std::vector<uint64_t> shape;
  std::vector<int32_t> values;  // C order
};

// InputError when the file cannot be written; GT_ASSERT when values.size() != prod(shape).
void write_npy_int32(const std::filesystem::path& file, const std::vector<uint64_t>& shape,
                     std::span<const int32_t> values);
NpyInt32 read_npy_int32(const std::filesystem::path& file);

}  // namespace geotrain::models
