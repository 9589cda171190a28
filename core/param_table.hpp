// ParamTable: the ordered list of named fp32 tensors of a model, stored in one flat buffer.
//
// Owns: the layout (names, sizes, offsets, critical flag) and the flat values. Each tensor is
// critical or not by glob patterns ('*' any run, '?' one character) matched against its name.
// Deltas, residuals and optimizer state use the same flat layout, so a range [offset, offset+n)
// means the same elements everywhere. layout_hash() identifies the layout (names, sizes, order,
// criticality) and is what processes compare before they exchange parameters.
// Nothing blocks; not thread-safe for concurrent writers (plain value type).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/fragments.hpp"
#include "core/span.hpp"

namespace geotrain {

struct TensorSpec {
  std::string name;
  uint64_t size = 0;  // fp32 elements
  // A matrix's columns (its last dimension; rows are the rest), 0 when it is not a matrix or
  // not known: what a codec that factorises matrices (powersgd) needs. Not part of the layout.
  uint64_t cols = 0;
};

struct TensorInfo {
  std::string name;
  uint64_t offset = 0;  // first element in the flat buffer
  uint64_t size = 0;
  bool critical = false;
  uint64_t cols = 0;  // TensorSpec::cols
};

// A run of one tensor's elements inside a range of the flat buffer: a matrix of `cols` columns
// when they are whole rows of a matrix tensor (TensorSpec::cols), else cols 0. A matrix that
// the range cuts inside a row is up to three pieces: the partial row, its whole rows, the
// partial row after them.
struct TensorPiece {
  uint64_t offset = 0;  // first element, relative to the range
  uint64_t count = 0;
  bool critical = false;
  uint64_t cols = 0;
  size_t tensor = 0;  // its index in tensors()
  uint64_t rows() const { return cols ? count / cols : 0; }
};

// True when `name` matches the glob `pattern` ('*' = any run of characters, '?' = one character).
bool glob_match(std::string_view pattern, std::string_view name);

class ParamTable {
 public:
  ParamTable() = default;
  // Tensor names must be unique and non-empty, sizes > 0 (InputError otherwise). Values start at 0.
  ParamTable(const std::vector<TensorSpec>& tensors,
             const std::vector<std::string>& critical_globs);

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  uint64_t total_elements() const { return values_.size(); }
  uint64_t layout_hash() const { return hash_; }

  FloatSpan values() { return values_; }
  ConstFloatSpan values() const { return values_; }
  // Values of one tensor; InputError when the name is unknown.
  FloatSpan tensor(std::string_view name);

  // One byte per element: 1 when the element belongs to a critical tensor, for [begin, end).
  std::vector<uint8_t> critical_mask(uint64_t begin, uint64_t end) const;
  // The tensors' pieces inside [begin, end), in buffer order (InputError outside the table).
  std::vector<TensorPiece> pieces(uint64_t begin, uint64_t end) const;
  // The critical tensors' elements as ranges, adjacent tensors merged, in buffer order.
  std::vector<ElementRange> critical_ranges() const;

 private:
  std::vector<TensorInfo> tensors_;
  std::vector<float> values_;
  uint64_t hash_ = 0;
};

}  // namespace geotrain
