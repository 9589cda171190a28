#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/check_cuda.hpp"
#include "kernels/codec_math.hpp"
#include "kernels/topk_cuda.cuh"

namespace geotrain::kernels::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b == 0 ? 1 : (b > 1u << 20 ? 1u << 20 : b));
}

#define GRID_STRIDE(i, n)                                                 \
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < (n); \
       i += size_t(gridDim.x) * blockDim.x)

__global__ void add_into(const float* __restrict__ g, float* __restrict__ e, float decay,
                         size_t n) {
  GRID_STRIDE(i, n) e[i] = decay == 1.0f ? g[i] + e[i] : g[i] + decay * e[i];
}

__global__ void sample_keys(const float* __restrict__ x, size_t n, size_t m,
                            uint32_t* __restrict__ keys) {
  GRID_STRIDE(s, m) {
    const size_t i = m == n ? s : size_t(mix64(0x70b4a11ull + s) % n);
    keys[s] = abs_bits(x[i]);
  }
}

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kTile = 4 * 4 * kThreads;  // elements a block marks: 4 float4 loads a thread
constexpr int kTileWords = kTile / 32;

// Pass 1 over x: one bit per element, set where |x| >= *threshold (bit j of word w is element
// 32 w + j), and each tile's count. x is read once, 16 bytes a load where it is aligned; eight
// lanes' nibbles make one word.
template <bool kVector>
__global__ void __launch_bounds__(kThreads)
    mark_tiles(const float* __restrict__ x, size_t n, const uint32_t* __restrict__ threshold,
               uint32_t* __restrict__ bits, uint32_t* __restrict__ tile_count) {
  __shared__ uint32_t warp_sum[kThreads / 32];
  const uint32_t t = *threshold;
  const size_t base = size_t(blockIdx.x) * kTile;
  uint32_t count = 0;
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    const size_t q = size_t(v) * kThreads + threadIdx.x;  // the float4 of the tile
    const size_t e = base + 4 * q;                        // its first element
    uint32_t nib = 0;
    if (kVector && e + 4 <= n) {
      const float4 f = reinterpret_cast<const float4*>(x + base)[q];
      nib = uint32_t(abs_bits(f.x) >= t) | uint32_t(abs_bits(f.y) >= t) << 1 |
            uint32_t(abs_bits(f.z) >= t) << 2 | uint32_t(abs_bits(f.w) >= t) << 3;
    } else {
      for (int j = 0; j < 4; ++j)
        if (e + j < n && abs_bits(x[e + j]) >= t) nib |= 1u << j;
    }
    count += __popc(nib);
    uint32_t word = nib << (4 * (threadIdx.x % 8));
    word |= __shfl_xor_sync(kFullMask, word, 1);
    word |= __shfl_xor_sync(kFullMask, word, 2);
    word |= __shfl_xor_sync(kFullMask, word, 4);
    if (threadIdx.x % 8 == 0 && e < n) bits[e / 32] = word;
  }
  for (int offset = 16; offset > 0; offset /= 2) count += __shfl_xor_sync(kFullMask, count, offset);
  if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = count;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t total = 0;
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sum[w];
    tile_count[blockIdx.x] = total;
  }
}

// Pass 2, over the bits only: one warp per tile writes its candidates' indices in index order
// from the tile's offset (slots past `cap` are not written; the count says so).
__global__ void compact_tiles(const uint32_t* __restrict__ bits, size_t words, size_t tiles,
                              const uint32_t* __restrict__ tile_offset, size_t cap,
                              uint32_t* __restrict__ cand) {
  const unsigned lane = threadIdx.x % 32;
  const size_t tile = size_t(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  if (tile >= tiles) return;  // whole warp
  const size_t first = tile * kTileWords + lane * (kTileWords / 32);
  uint32_t w[kTileWords / 32];
  uint32_t mine = 0;
#pragma unroll
  for (int i = 0; i < kTileWords / 32; ++i) {
    w[i] = first + i < words ? bits[first + i] : 0u;
    mine += __popc(w[i]);
  }
  uint32_t before = mine;  // inclusive scan over the lanes, then exclusive
  for (int offset = 1; offset < 32; offset *= 2) {
    const uint32_t up = __shfl_up_sync(kFullMask, before, offset);
    if (lane >= unsigned(offset)) before += up;
  }
  size_t pos = size_t(tile_offset[tile]) + before - mine;
#pragma unroll
  for (int i = 0; i < kTileWords / 32; ++i) {
    for (uint32_t word = w[i]; word != 0; word &= word - 1, ++pos)
      if (pos < cap) cand[pos] = uint32_t((first + i) * 32 + __ffs(word) - 1);
  }
}

__global__ void total_count(const uint32_t* __restrict__ tile_offset,
                            const uint32_t* __restrict__ tile_count, size_t tiles,
                            uint32_t* __restrict__ out) {
  *out = tile_offset[tiles - 1] + tile_count[tiles - 1];
}

__global__ void candidate_keys(const float* __restrict__ x, const uint32_t* __restrict__ cand,
                               size_t cap, size_t n, uint32_t* __restrict__ keys) {
  GRID_STRIDE(j, cap) keys[j] = cand[j] < n ? abs_bits(x[cand[j]]) : 0u;
}

__device__ unsigned varint_size(uint32_t v) {
  unsigned s = 1;
  while (v >= 0x80) v >>= 7, ++s;
  return s;
}

__global__ void gather_values(const float* __restrict__ x, size_t n,
                              const uint32_t* __restrict__ sel, uint64_t k,
                              float* __restrict__ values, uint32_t* __restrict__ lengths) {
  GRID_STRIDE(j, k) {
    const uint32_t i = sel[j];
    values[j] = i < n ? x[i] : 0.0f;  // an empty slot only when the attempt is refused
    lengths[j] = varint_size(j == 0 ? i : i - sel[j - 1]);
  }
}

__global__ void write_varints(const uint32_t* __restrict__ sel,
                              const uint32_t* __restrict__ offsets, uint64_t k,
                              uint8_t* __restrict__ out) {
  GRID_STRIDE(j, k) {
    uint32_t v = j == 0 ? sel[0] : sel[j] - sel[j - 1];
    uint8_t* p = out + offsets[j];
    while (v >= 0x80) {
      *p++ = uint8_t((v & 0x7f) | 0x80);
      v >>= 7;
    }
    *p = uint8_t(v);
  }
}

// What the host reads back once: out[0] = the candidate count, out[1] = the varints' length.
__global__ void summarise(const uint32_t* __restrict__ count, const uint32_t* __restrict__ offsets,
                          const uint32_t* __restrict__ lengths, uint64_t k,
                          uint32_t* __restrict__ out) {
  out[0] = *count;
  out[1] = offsets[k - 1] + lengths[k - 1];
}

__global__ void zero_selected(float* __restrict__ residual, const uint32_t* __restrict__ sel,
                              uint64_t k) {
  GRID_STRIDE(j, k) residual[sel[j]] = 0.0f;  // x - D(c) where x was sent exactly
}

__global__ void scatter_values(const float* __restrict__ values, const uint32_t* __restrict__ index,
                               uint64_t k, float* __restrict__ y, bool add) {
  GRID_STRIDE(j, k) y[index[j]] = add ? y[index[j]] + values[j] : values[j];
}

// The k-th largest key among the candidates, one 8-bit digit at a time from the top (as the
// qtopk kernel does per chunk): after the four rounds, prefix is that key T and remaining is how
// many candidates equal to T the selection keeps.
struct RadixState {
  uint32_t prefix = 0, mask = 0, remaining = 0;
};

__global__ void init_state(RadixState* state, uint32_t k) { *state = RadixState{0, 0, k}; }

__global__ void digit_histogram(const uint32_t* __restrict__ keys,
                                const uint32_t* __restrict__ cand, size_t cap, size_t n,
                                const RadixState* __restrict__ state, int shift,
                                uint32_t* __restrict__ hist) {
  __shared__ uint32_t local[256];
  for (unsigned b = threadIdx.x; b < 256; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const uint32_t prefix = state->prefix, mask = state->mask;
  GRID_STRIDE(j, cap) {
    const uint32_t key = keys[j];
    if (cand[j] < n && (key & mask) == prefix) atomicAdd(&local[(key >> shift) & 0xffu], 1u);
  }
  __syncthreads();
  for (unsigned b = threadIdx.x; b < 256; b += blockDim.x)
    if (local[b] != 0) atomicAdd(&hist[b], local[b]);
}

// One block of 256 threads: the digit whose bin holds the remaining-th largest key; clears the
// histogram for the next digit.
__global__ void pick_digit(uint32_t* __restrict__ hist, RadixState* __restrict__ state, int shift) {
  __shared__ uint32_t bins[256];
  bins[threadIdx.x] = hist[threadIdx.x];
  hist[threadIdx.x] = 0;
  __syncthreads();
  if (threadIdx.x != 0) return;
  uint32_t remaining = state->remaining;
  for (int b = 255; b >= 0; --b) {
    if (bins[b] >= remaining) {
      state->prefix |= uint32_t(b) << shift;
      state->mask |= 0xffu << shift;
      break;
    }
    remaining -= bins[b];
  }
  state->remaining = remaining;
}

__global__ void tie_flags(const uint32_t* __restrict__ keys, const uint32_t* __restrict__ cand,
                          size_t cap, size_t n, const RadixState* __restrict__ state,
                          uint32_t* __restrict__ tie) {
  const uint32_t t = state->prefix;
  GRID_STRIDE(j, cap) tie[j] = cand[j] < n && keys[j] == t ? 1u : 0u;
}

// Keeps every key above T and, of those equal to T, the first `remaining` in index order (the
// candidates are in index order): the CPU's "larger |x|, then lower index".
__global__ void keep_flags(const uint32_t* __restrict__ keys, const uint32_t* __restrict__ cand,
                           const uint32_t* __restrict__ tie_rank, size_t cap, size_t n,
                           const RadixState* __restrict__ state, uint8_t* __restrict__ keep) {
  const uint32_t t = state->prefix, need = state->remaining;
  GRID_STRIDE(j, cap) {
    const uint32_t key = keys[j];
    keep[j] = cand[j] < n && (key > t || (key == t && tie_rank[j] < need)) ? 1 : 0;
  }
}

// Grow-only device buffers, one set per host thread, kept across encodes: an encode allocates
// only when it meets a larger n or k than this thread has seen.
class Workspace {
 public:
  enum Slot : int {
    kSample,
    kSorted,
    kCand,
    kBits,
    kTileCount,
    kTileOffset,
    kKeys,
    kTies,
    kTieRank,
    kKeep,
    kSel,
    kLengths,
    kOffsets,
    kSmall,
    kHist,
    kTemp,
    kSlots
  };
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace() {
    for (auto& b : buffers_) cudaFree(b.ptr);  // errors ignored: the context may be gone at exit
  }
  template <typename T>
  T* get(Slot slot, size_t count) {
    Buffer& b = buffers_[slot];
    const size_t bytes = std::max<size_t>(count, 1) * sizeof(T);
    if (b.bytes < bytes) {
      GT_CUDA_CHECK(cudaFree(b.ptr));  // synchronises: no kernel still uses the old buffer
      b.ptr = nullptr;
      b.bytes = 0;
      GT_CUDA_CHECK(cudaMalloc(&b.ptr, bytes));
      b.bytes = bytes;
    }
    return static_cast<T*>(b.ptr);
  }

 private:
  struct Buffer {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  Buffer buffers_[kSlots];
};

Workspace& workspace() {
  thread_local Workspace w;
  return w;
}

// One selection with the candidates |x| >= *threshold (a device word), at most `cap` of them.
// Returns the body's size, or 0 when the threshold let through fewer than k or more than cap
// entries (nothing of the caller's is changed then but `body`).
size_t select_and_write(const float* x, float* residual, size_t n, uint64_t k,
                        const uint32_t* threshold, size_t cap, std::byte* body, cudaStream_t stream,
                        Workspace& w) {
  const size_t words = (n + 31) / 32, tiles = (n + kTile - 1) / kTile;
  auto* cand = w.get<uint32_t>(Workspace::kCand, cap);
  auto* bits = w.get<uint32_t>(Workspace::kBits, words);
  auto* tile_count = w.get<uint32_t>(Workspace::kTileCount, tiles);
  auto* tile_offset = w.get<uint32_t>(Workspace::kTileOffset, tiles);
  auto* keys = w.get<uint32_t>(Workspace::kKeys, cap);
  auto* ties = w.get<uint32_t>(Workspace::kTies, cap);
  auto* tie_rank = w.get<uint32_t>(Workspace::kTieRank, cap);
  auto* keep = w.get<uint8_t>(Workspace::kKeep, cap);
  auto* sel = w.get<uint32_t>(Workspace::kSel, cap);
  auto* lengths = w.get<uint32_t>(Workspace::kLengths, k);
  auto* offsets = w.get<uint32_t>(Workspace::kOffsets, k);
  auto* small = w.get<uint32_t>(Workspace::kSmall, 8);  // [0] candidates, [1] kept, [2..3] summary
  auto* hist = w.get<uint32_t>(Workspace::kHist, 256);
  auto* state = reinterpret_cast<RadixState*>(small + 4);

  size_t b_tiles = 0, b_ties = 0, b_keep = 0, b_scan = 0;
  GT_CUDA_CHECK(
      cub::DeviceScan::ExclusiveSum(nullptr, b_tiles, tile_count, tile_offset, int(tiles), stream));
  GT_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, b_ties, ties, tie_rank, int(cap), stream));
  GT_CUDA_CHECK(
      cub::DeviceSelect::Flagged(nullptr, b_keep, cand, keep, sel, small + 1, int(cap), stream));
  GT_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, b_scan, lengths, offsets, int(k), stream));
  size_t temp_bytes = std::max({b_tiles, b_ties, b_keep, b_scan});
  void* temp = w.get<std::byte>(Workspace::kTemp, temp_bytes);

  // 1. Candidates in index order, empty slots after them: a bit per element and a count per
  // tile in one pass over x, the tiles' offsets, then the indices from the bits.
  GT_CUDA_CHECK(cudaMemsetAsync(cand, 0xff, cap * sizeof(uint32_t), stream));
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0)
    mark_tiles<true><<<unsigned(tiles), kThreads, 0, stream>>>(x, n, threshold, bits, tile_count);
  else
    mark_tiles<false><<<unsigned(tiles), kThreads, 0, stream>>>(x, n, threshold, bits, tile_count);
  GT_CUDA_CHECK_LAUNCH();
  GT_CUDA_CHECK(
      cub::DeviceScan::ExclusiveSum(temp, temp_bytes, tile_count, tile_offset, int(tiles), stream));
  const unsigned warps_per_block = kThreads / 32;
  compact_tiles<<<unsigned((tiles + warps_per_block - 1) / warps_per_block), kThreads, 0, stream>>>(
      bits, words, tiles, tile_offset, cap, cand);
  total_count<<<1, 1, 0, stream>>>(tile_offset, tile_count, tiles, small);
  GT_CUDA_CHECK_LAUNCH();
  candidate_keys<<<blocks_for(cap), kThreads, 0, stream>>>(x, cand, cap, n, keys);
  GT_CUDA_CHECK_LAUNCH();
  // 2. T, the k-th largest candidate key, and how many equal to T are kept.
  GT_CUDA_CHECK(cudaMemsetAsync(hist, 0, 256 * sizeof(uint32_t), stream));
  init_state<<<1, 1, 0, stream>>>(state, uint32_t(k));
  for (int shift = 24; shift >= 0; shift -= 8) {
    digit_histogram<<<std::min(blocks_for(cap), 1024u), kThreads, 0, stream>>>(keys, cand, cap, n,
                                                                               state, shift, hist);
    pick_digit<<<1, 256, 0, stream>>>(hist, state, shift);
  }
  GT_CUDA_CHECK_LAUNCH();
  // 3. The kept candidates, still in index order: the k indices, ascending.
  tie_flags<<<blocks_for(cap), kThreads, 0, stream>>>(keys, cand, cap, n, state, ties);
  GT_CUDA_CHECK_LAUNCH();
  GT_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp, temp_bytes, ties, tie_rank, int(cap), stream));
  keep_flags<<<blocks_for(cap), kThreads, 0, stream>>>(keys, cand, tie_rank, cap, n, state, keep);
  GT_CUDA_CHECK_LAUNCH();
  GT_CUDA_CHECK(
      cub::DeviceSelect::Flagged(temp, temp_bytes, cand, keep, sel, small + 1, int(cap), stream));
  // 4. The body: values, then the varints of the first index and the gaps.
  auto* values = reinterpret_cast<float*>(body);
  gather_values<<<blocks_for(k), kThreads, 0, stream>>>(x, n, sel, k, values, lengths);
  GT_CUDA_CHECK_LAUNCH();
  GT_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp, temp_bytes, lengths, offsets, int(k), stream));
  write_varints<<<blocks_for(k), kThreads, 0, stream>>>(sel, offsets, k,
                                                        reinterpret_cast<uint8_t*>(body) + 4 * k);
  GT_CUDA_CHECK_LAUNCH();
  summarise<<<1, 1, 0, stream>>>(small, offsets, lengths, k, small + 2);
  GT_CUDA_CHECK_LAUNCH();
  uint32_t summary[4] = {0, 0, 0, 0};  // the one wait of an encode: the body's length is data
  GT_CUDA_CHECK(cudaMemcpyAsync(summary, small, sizeof summary, cudaMemcpyDeviceToHost, stream));
  GT_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (summary[0] < k || summary[0] > cap) return 0;
  if (summary[1] != k)  // the radix select keeps exactly k of k or more candidates
    throw SystemError("CUDA", "topk_encode", __FILE__, __LINE__,
                      "kept " + std::to_string(summary[1]) + " of " + std::to_string(summary[0]) +
                          " candidates, expected " + std::to_string(k));
  if (residual) {
    zero_selected<<<blocks_for(k), kThreads, 0, stream>>>(residual, sel, k);
    GT_CUDA_CHECK_LAUNCH();
  }
  return 4 * k + summary[3];
}

}  // namespace

size_t topk_encode(const float* g, float* residual, size_t n, uint64_t k, uint32_t sample,
                   std::byte* body, cudaStream_t stream, float decay) {
  if (k == 0 || n == 0) return 0;
  if (n >= (size_t{1} << 31))  // CUB takes int counts
    throw SystemError("CUDA", "topk_encode", __FILE__, __LINE__, "n must be below 2^31");
  const float* x = g;
  if (residual) {
    add_into<<<blocks_for(n), kThreads, 0, stream>>>(g, residual, decay, n);
    GT_CUDA_CHECK_LAUNCH();
    x = residual;
  }
  Workspace& w = workspace();

  // The threshold: the same hashed sample as the CPU's, sorted on the device, read at the rank
  // a quarter above k's expected rank. The candidates it admits are counted against a capacity
  // of that rank plus four standard deviations; the rare miss (fewer than k, or more than the
  // capacity) selects again with every entry a candidate.
  const size_t m = std::min<size_t>(n, sample);
  const double rank = std::ceil(double(m) * double(k) / double(n) * 1.25) + 2;
  if (rank < double(m)) {
    auto* keys = w.get<uint32_t>(Workspace::kSample, m);
    auto* sorted = w.get<uint32_t>(Workspace::kSorted, m);
    sample_keys<<<blocks_for(m), kThreads, 0, stream>>>(x, n, m, keys);
    GT_CUDA_CHECK_LAUNCH();
    size_t bytes = 0;
    GT_CUDA_CHECK(cub::DeviceRadixSort::SortKeysDescending(nullptr, bytes, keys, sorted, int(m), 0,
                                                           32, stream));
    void* temp = w.get<std::byte>(Workspace::kTemp, bytes);
    GT_CUDA_CHECK(
        cub::DeviceRadixSort::SortKeysDescending(temp, bytes, keys, sorted, int(m), 0, 32, stream));
    const double admitted = rank + 1;
    const double cap = std::ceil(double(n) * (admitted + 4 * std::sqrt(admitted) + 8) / double(m));
    const size_t size = select_and_write(x, residual, n, k, sorted + size_t(rank),
                                         std::min<size_t>(n, size_t(cap) + 64), body, stream, w);
    if (size > 0) return size;
  }
  auto* zero = w.get<uint32_t>(Workspace::kSorted, 1);
  GT_CUDA_CHECK(cudaMemsetAsync(zero, 0, sizeof(uint32_t), stream));
  const size_t size = select_and_write(x, residual, n, k, zero, n, body, stream, w);
  if (size == 0)
    throw SystemError("CUDA", "topk_encode", __FILE__, __LINE__,
                      "threshold 0 selected fewer than k entries");
  return size;
}

void topk_decode(const float* values, const uint32_t* indices, uint64_t k, size_t n, float* y,
                 bool add, cudaStream_t stream) {
  if (!add && n > 0) GT_CUDA_CHECK(cudaMemsetAsync(y, 0, n * sizeof(float), stream));
  if (k == 0) return;
  scatter_values<<<blocks_for(k), kThreads, 0, stream>>>(values, indices, k, y, add);
  GT_CUDA_CHECK_LAUNCH();
}

}  // namespace geotrain::kernels::cuda
