// qtopk: top-k with chunked selection and quantised values (SparseLoCo-style, arXiv 2508.15706).
// The body layout, the bit-stream helpers both paths pack with, and the CPU kernels. The CUDA
// twins are in qtopk_cuda.cuh and produce the same bytes and residual.
//
// Selection: in each chunk, the k_c entries of largest |x| (ties: lower index first; |x| is
// compared as abs_bits, so NaN sorts above +inf), k_c = k for a full chunk and
// ceil(k * count / chunk) for a last chunk of `count` elements.
// Values: `bits` in {2, 4, 8}, sign + magnitude level of the chunk's absmax (qtopk_code in
// codec_math.hpp).
//
// Body (all little-endian, streams LSB first; every chunk's parts start on a byte, so chunks are
// packed independently):
//   scales   chunks x fp32, the chunk's absmax
//   values   per chunk, ceil(k_c * bits / 8) bytes: the k_c codes in index order
//   indices  per chunk, ceil(k_c * index_bits / 8) bytes: the k_c indices relative to the chunk
//            start, ascending, index_bits = bit_width(chunk - 1) each
//
// Kernels: single-threaded, no allocation, no validation (compression/ validates payloads before
// decoding). Pointers borrow.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/codec_math.hpp"

namespace geotrain::kernels {

struct QtopkLayout {
  uint64_t n = 0;      // elements
  uint32_t chunk = 0;  // multiple of 32
  uint32_t k = 0;      // entries kept per full chunk, in [1, chunk]
  uint32_t bits = 0;   // bits per value: 2, 4 or 8

  GT_HD float levels() const { return float(1u << (bits - 1)); }
  GT_HD uint32_t index_bits() const {
    uint32_t w = 0;
    while (((chunk - 1) >> w) != 0) ++w;
    return w;
  }
  GT_HD uint64_t chunks() const { return (n + chunk - 1) / chunk; }
  GT_HD uint32_t count(uint64_t c) const {
    const uint64_t left = n - c * chunk;
    return uint32_t(left < chunk ? left : chunk);
  }
  GT_HD uint32_t k_of(uint64_t c) const {
    const uint32_t m = count(c);
    return m == chunk ? k : uint32_t((uint64_t(k) * m + chunk - 1) / chunk);
  }
  GT_HD static uint64_t stream_bytes(uint64_t items, uint32_t width) {
    return (items * width + 7) / 8;
  }
  // Byte strides of a full chunk's values and indices (chunk c starts at c times these).
  GT_HD uint64_t value_stride() const { return stream_bytes(k, bits); }
  GT_HD uint64_t index_stride() const { return stream_bytes(k, index_bits()); }
  // Offsets in the body.
  GT_HD uint64_t values_offset() const { return 4 * chunks(); }
  GT_HD uint64_t indices_offset() const {
    const uint64_t nc = chunks();
    return nc == 0 ? values_offset()
                   : values_offset() + (nc - 1) * value_stride() + stream_bytes(k_of(nc - 1), bits);
  }
  GT_HD uint64_t body_bytes() const {
    const uint64_t nc = chunks();
    return nc == 0 ? indices_offset()
                   : indices_offset() + (nc - 1) * index_stride() +
                         stream_bytes(k_of(nc - 1), index_bits());
  }
  // Entries kept in all.
  GT_HD uint64_t selected() const {
    const uint64_t nc = chunks();
    return nc == 0 ? 0 : (nc - 1) * k + k_of(nc - 1);
  }
};

// `width` (<= 24) bits at bit offset `bit` of an LSB-first stream.
GT_HD uint32_t read_bits(const uint8_t* stream, uint64_t bit, uint32_t width) {
  const uint8_t* p = stream + bit / 8;
  const unsigned shift = unsigned(bit % 8);
  const unsigned nbytes = (shift + width + 7) / 8;
  uint64_t v = 0;
  for (unsigned b = 0; b < nbytes; ++b) v |= uint64_t(p[b]) << (8 * b);
  return uint32_t((v >> shift) & ((uint64_t{1} << width) - 1));
}

// Byte t of an LSB-first stream of `items` values of `width` bits, value j = item(j) (which must
// fit in width bits). Computing each byte from the values it holds lets each byte have one
// writer, on the CPU as in a CUDA block.
template <typename Item>
GT_HD uint8_t stream_byte(uint64_t t, uint32_t width, uint64_t items, Item item) {
  const uint64_t first = 8 * t / width;
  const uint64_t last = (8 * t + 7) / width;
  uint64_t byte = 0;
  for (uint64_t j = first; j <= last && j < items; ++j) {
    const int64_t shift = int64_t(j * width) - int64_t(8 * t);
    const uint64_t v = item(j);
    byte |= shift >= 0 ? v << shift : v >> -shift;
  }
  return uint8_t(byte & 0xffu);
}

namespace cpu {

// x = g (+ residual, written back: the fused error-feedback step), then per chunk: select, scale,
// quantise and pack into scales (chunks), values and indices (the body's sections, at
// body + values_offset() and body + indices_offset()). With a residual, it ends as x - D(body):
// x where nothing was sent, x - decoded where a value was. scratch: layout.chunk entries.
void qtopk_encode(const float* g, float* residual, const QtopkLayout& layout, float* scales,
                  uint8_t* values, uint8_t* indices, uint64_t* scratch);

// y = D(body) (add: y += D(body)); entries not selected decode to 0.
void qtopk_decode(const QtopkLayout& layout, const float* scales, const uint8_t* values,
                  const uint8_t* indices, float* y, bool add);

}  // namespace cpu
}  // namespace geotrain::kernels
