// Span vocabulary: views borrow, never own. Functions take spans of what they read or write;
// whoever created the buffer owns it (a std::vector, a DeviceBuffer, a ParamTable).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace geotrain {

using FloatSpan = std::span<float>;
using ConstFloatSpan = std::span<const float>;
using ByteSpan = std::span<std::byte>;
using ConstByteSpan = std::span<const std::byte>;
using Bytes = std::vector<std::byte>;

// View any contiguous range of trivially copyable T as bytes.
template <typename T>
ConstByteSpan as_bytes_of(std::span<const T> s) {
  return std::as_bytes(s);
}
template <typename T>
ConstByteSpan as_bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

}  // namespace geotrain
