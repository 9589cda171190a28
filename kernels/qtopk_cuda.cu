// CUDA qtopk kernels; the algorithm is described in qtopk_cuda.cuh. Built with --fmad=false, like
// the other codec kernels: the shared arithmetic in codec_math.hpp rounds as on the host.
#include <cub/block/block_scan.cuh>

#include "core/check_cuda.hpp"
#include "kernels/qtopk_cuda.cuh"

namespace geotrain::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;
using BlockScan = cub::BlockScan<uint32_t, kThreads>;

__global__ void __launch_bounds__(kThreads)
    qtopk_encode_kernel(const float* __restrict__ g, float* __restrict__ residual, float decay,
                        QtopkLayout layout, float* __restrict__ scales,
                        uint8_t* __restrict__ values, uint8_t* __restrict__ indices,
                        uint32_t* __restrict__ slots) {
  __shared__ uint32_t hist[256];
  __shared__ uint32_t warp_max[kThreads / 32];
  __shared__ uint32_t s_digit, s_remaining;
  __shared__ typename BlockScan::TempStorage scan;
  const float levels = layout.levels();
  const uint32_t width = layout.index_bits();
  const uint64_t chunks = layout.chunks();
  const unsigned tid = threadIdx.x;

  for (uint64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const uint64_t begin = c * layout.chunk;
    const uint32_t count = layout.count(c);
    const uint32_t k = layout.k_of(c);
    const float* gc = g + begin;
    float* ec = residual ? residual + begin : nullptr;

    // 1. x = g + decay e, kept in e; the chunk's absmax (an integer max: exact in any order).
    uint32_t m = 0;
    for (uint32_t i = tid; i < count; i += kThreads) {
      const float x = !ec ? gc[i] : decay == 1.0f ? gc[i] + ec[i] : gc[i] + decay * ec[i];
      if (ec) ec[i] = x;
      m = max_u(m, abs_bits(x));
    }
    for (int offset = 16; offset > 0; offset /= 2)
      m = max_u(m, __shfl_xor_sync(kFullMask, m, offset));
    if (tid % 32 == 0) warp_max[tid / 32] = m;
    __syncthreads();
    uint32_t absmax_bits = 0;
    for (int w = 0; w < kThreads / 32; ++w) absmax_bits = max_u(absmax_bits, warp_max[w]);
    const float* xc = ec ? ec : gc;

    // 2. Radix select: T = the k-th largest key, `need` = how many keys == T are kept.
    uint32_t prefix = 0, mask = 0, remaining = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (unsigned b = tid; b < 256; b += kThreads) hist[b] = 0;
      __syncthreads();
      for (uint32_t i = tid; i < count; i += kThreads) {
        const uint32_t key = abs_bits(xc[i]);
        if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xffu], 1u);
      }
      __syncthreads();
      if (tid == 0) {
        uint32_t above = 0;
        for (int d = 255; d >= 0; --d) {
          if (above + hist[d] >= remaining) {
            s_digit = uint32_t(d);
            s_remaining = remaining - above;
            break;
          }
          above += hist[d];
        }
      }
      __syncthreads();
      prefix |= s_digit << shift;
      mask |= 0xffu << shift;
      remaining = s_remaining;
    }
    const uint32_t threshold = prefix, need = remaining;

    // 3. Keep, in index order, every key > T and the first `need` keys == T.
    uint32_t* slot = slots + c * layout.k;
    uint32_t eq_base = 0, kept = 0;
    for (uint32_t tile = 0; tile < count && kept < k; tile += kThreads) {
      const uint32_t i = tile + tid;
      const uint32_t key = i < count ? abs_bits(xc[i]) : 0u;
      const uint32_t eq = i < count && key == threshold ? 1u : 0u;
      uint32_t eq_rank, eq_total;
      BlockScan(scan).ExclusiveSum(eq, eq_rank, eq_total);
      __syncthreads();
      const uint32_t keep =
          i < count && (key > threshold || (eq && eq_base + eq_rank < need)) ? 1u : 0u;
      uint32_t pos, keep_total;
      BlockScan(scan).ExclusiveSum(keep, pos, keep_total);
      __syncthreads();
      if (keep) slot[kept + pos] = i;
      eq_base += eq_total;
      kept += keep_total;
    }
    __syncthreads();  // the slots are visible to the whole block

    // 4. Scale, codes and indices: one thread per output byte.
    const float absmax = bits_float(absmax_bits);
    const float inv = quant_inv(absmax, levels);
    if (tid == 0) scales[c] = absmax;
    uint8_t* vals = values + c * layout.value_stride();
    const uint64_t value_bytes = QtopkLayout::stream_bytes(k, layout.bits);
    for (uint64_t t = tid; t < value_bytes; t += kThreads)
      vals[t] = stream_byte(t, layout.bits, k,
                            [&](uint64_t j) { return qtopk_code(xc[slot[j]], inv, levels); });
    uint8_t* idx = indices + c * layout.index_stride();
    const uint64_t index_bytes = QtopkLayout::stream_bytes(k, width);
    for (uint64_t t = tid; t < index_bytes; t += kThreads)
      idx[t] = stream_byte(t, width, k, [&](uint64_t j) { return slot[j]; });

    // 5. The residual of the kept entries: x - decoded (after every code was read from x).
    if (ec) {
      __syncthreads();
      for (uint32_t j = tid; j < k; j += kThreads) {
        const uint32_t i = slot[j];
        ec[i] = ec[i] - qtopk_value(qtopk_code(ec[i], inv, levels), absmax, levels);
      }
    }
    __syncthreads();  // before the next chunk reuses the shared arrays
  }
}

// One thread per slot (chunk c, entry j < k): the chunk's entries are distinct elements.
__global__ void qtopk_decode_kernel(QtopkLayout layout, const float* __restrict__ scales,
                                    const uint8_t* __restrict__ values,
                                    const uint8_t* __restrict__ indices, float* __restrict__ y,
                                    bool add) {
  const uint64_t slots = layout.chunks() * layout.k;
  const uint32_t width = layout.index_bits();
  const float levels = layout.levels();
  for (uint64_t s = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; s < slots;
       s += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t c = s / layout.k;
    const uint32_t j = uint32_t(s % layout.k);
    if (j >= layout.k_of(c)) continue;
    const uint32_t i = read_bits(indices + c * layout.index_stride(), uint64_t(j) * width, width);
    const uint32_t code =
        read_bits(values + c * layout.value_stride(), uint64_t(j) * layout.bits, layout.bits);
    const float v = qtopk_value(code, scales[c], levels);
    float* out = y + c * layout.chunk + i;
    *out = add ? *out + v : v;
  }
}

unsigned blocks_for(uint64_t items, uint64_t per_block) {
  const uint64_t b = (items + per_block - 1) / per_block;
  return unsigned(b == 0 ? 1 : (b > (1u << 20) ? (1u << 20) : b));
}

}  // namespace

void qtopk_encode(const float* g, float* residual, const QtopkLayout& layout, float* scales,
                  uint8_t* values, uint8_t* indices, cudaStream_t stream, float decay) {
  if (layout.n == 0) return;
  const uint64_t chunks = layout.chunks();
  uint32_t* slots = nullptr;
  GT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&slots),
                                chunks * layout.k * sizeof(uint32_t), stream));
  qtopk_encode_kernel<<<blocks_for(chunks, 1), kThreads, 0, stream>>>(
      g, residual, decay, layout, scales, values, indices, slots);
  const cudaError_t launched = cudaGetLastError();
  GT_CUDA_CHECK(cudaFreeAsync(slots, stream));
  GT_CUDA_CHECK(launched);
}

void qtopk_decode(const QtopkLayout& layout, const float* scales, const uint8_t* values,
                  const uint8_t* indices, float* y, bool add, cudaStream_t stream) {
  if (layout.n == 0) return;
  if (!add) GT_CUDA_CHECK(cudaMemsetAsync(y, 0, layout.n * sizeof(float), stream));
  const uint64_t slots = layout.chunks() * layout.k;
  qtopk_decode_kernel<<<blocks_for(slots, kThreads), kThreads, 0, stream>>>(layout, scales, values,
                                                                            indices, y, add);
  GT_CUDA_CHECK_LAUNCH();
}

}  // namespace geotrain::kernels::cuda
