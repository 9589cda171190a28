#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

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

// Owns one device allocation.
template <typename T>
class Scratch {
 public:
  explicit Scratch(size_t n) { GT_CUDA_CHECK(cudaMalloc(&ptr_, (n ? n : 1) * sizeof(T))); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { cudaFree(ptr_); }
  T* get() const { return ptr_; }

 private:
  T* ptr_ = nullptr;
};

#define GRID_STRIDE(i, n)                                                 \
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < (n); \
       i += size_t(gridDim.x) * blockDim.x)

__global__ void add_into(const float* __restrict__ g, float* __restrict__ e, size_t n) {
  GRID_STRIDE(i, n) e[i] = g[i] + e[i];
}

__global__ void sample_keys(const float* __restrict__ x, size_t n, size_t m,
                            uint32_t* __restrict__ keys) {
  GRID_STRIDE(s, m) {
    const size_t i = m == n ? s : size_t(mix64(0x70b4a11ull + s) % n);
    keys[s] = abs_bits(x[i]);
  }
}

__global__ void flag_above(const float* __restrict__ x, size_t n, uint32_t threshold,
                           uint32_t* __restrict__ flags) {
  GRID_STRIDE(i, n) flags[i] = abs_bits(x[i]) >= threshold ? 1u : 0u;
}

__global__ void scatter_candidates(const float* __restrict__ x, const uint32_t* __restrict__ flags,
                                   const uint32_t* __restrict__ pos, size_t n,
                                   uint32_t* __restrict__ index, uint32_t* __restrict__ keys) {
  GRID_STRIDE(i, n) {
    if (flags[i]) {
      index[pos[i]] = uint32_t(i);
      keys[pos[i]] = abs_bits(x[i]);
    }
  }
}

__device__ unsigned varint_size(uint32_t v) {
  unsigned s = 1;
  while (v >= 0x80) v >>= 7, ++s;
  return s;
}

__global__ void gather_values(const float* __restrict__ x, float* __restrict__ residual,
                              const uint32_t* __restrict__ sel, uint64_t k,
                              float* __restrict__ values, uint32_t* __restrict__ lengths) {
  GRID_STRIDE(j, k) {
    const uint32_t i = sel[j];
    values[j] = x[i];
    lengths[j] = varint_size(j == 0 ? i : i - sel[j - 1]);
    if (residual) residual[i] = 0.0f;  // x - D(c) where x was sent exactly
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

__global__ void scatter_values(const float* __restrict__ values, const uint32_t* __restrict__ index,
                               uint64_t k, float* __restrict__ y, bool add) {
  GRID_STRIDE(j, k) y[index[j]] = add ? y[index[j]] + values[j] : values[j];
}

// Runs a CUB algorithm twice: once to size its temporary storage, once for real.
template <typename F>
void with_temp_storage(F&& run) {
  size_t bytes = 0;
  GT_CUDA_CHECK(run(nullptr, bytes));
  Scratch<std::byte> temp(bytes);
  GT_CUDA_CHECK(run(temp.get(), bytes));
}

}  // namespace

size_t topk_encode(const float* g, float* residual, size_t n, uint64_t k, uint32_t sample,
                   std::byte* body, cudaStream_t stream) {
  if (k == 0 || n == 0) return 0;
  if (n >= (size_t{1} << 32))
    throw SystemError("CUDA", "topk_encode", __FILE__, __LINE__, "n must be below 2^32");
  const float* x = g;
  if (residual) {
    add_into<<<blocks_for(n), kThreads, 0, stream>>>(g, residual, n);
    GT_CUDA_CHECK_LAUNCH();
    x = residual;
  }

  // Threshold estimate from the same hashed sample as the CPU, sorted on the host.
  const size_t m = std::min<size_t>(n, sample);
  Scratch<uint32_t> d_sample(m);
  sample_keys<<<blocks_for(m), kThreads, 0, stream>>>(x, n, m, d_sample.get());
  GT_CUDA_CHECK_LAUNCH();
  std::vector<uint32_t> keys(m);
  GT_CUDA_CHECK(
      cudaMemcpyAsync(keys.data(), d_sample.get(), m * 4, cudaMemcpyDeviceToHost, stream));
  GT_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::sort(keys.begin(), keys.end(), std::greater<>());

  Scratch<uint32_t> flags(n), pos(n), cand(n), cand_keys(n);
  uint32_t count = 0;
  double rank = std::ceil(double(m) * double(k) / double(n) * 1.25) + 2;
  for (;;) {
    const bool last_resort = rank >= double(m);
    const uint32_t threshold = last_resort ? 0u : keys[size_t(rank)];
    flag_above<<<blocks_for(n), kThreads, 0, stream>>>(x, n, threshold, flags.get());
    GT_CUDA_CHECK_LAUNCH();
    with_temp_storage([&](void* t, size_t& b) {
      return cub::DeviceScan::ExclusiveSum(t, b, flags.get(), pos.get(), n, stream);
    });
    uint32_t last_pos = 0, last_flag = 0;
    GT_CUDA_CHECK(cudaMemcpyAsync(&last_pos, pos.get() + n - 1, 4, cudaMemcpyDeviceToHost, stream));
    GT_CUDA_CHECK(
        cudaMemcpyAsync(&last_flag, flags.get() + n - 1, 4, cudaMemcpyDeviceToHost, stream));
    GT_CUDA_CHECK(cudaStreamSynchronize(stream));
    count = last_pos + last_flag;
    if (count >= k || last_resort) break;
    rank = rank * 2 + 8;
  }
  scatter_candidates<<<blocks_for(n), kThreads, 0, stream>>>(x, flags.get(), pos.get(), n,
                                                             cand.get(), cand_keys.get());
  GT_CUDA_CHECK_LAUNCH();

  // Stable sort by |x| descending: equal keys keep ascending index order; the first k win.
  Scratch<uint32_t> sorted_keys(count), sorted_index(count), sel(k);
  with_temp_storage([&](void* t, size_t& b) {
    return cub::DeviceRadixSort::SortPairsDescending(t, b, cand_keys.get(), sorted_keys.get(),
                                                     cand.get(), sorted_index.get(), int(count), 0,
                                                     32, stream);
  });
  with_temp_storage([&](void* t, size_t& b) {
    return cub::DeviceRadixSort::SortKeys(t, b, sorted_index.get(), sel.get(), int(k), 0, 32,
                                          stream);
  });

  auto* values = reinterpret_cast<float*>(body);
  Scratch<uint32_t> lengths(k), offsets(k);
  gather_values<<<blocks_for(k), kThreads, 0, stream>>>(x, residual, sel.get(), k, values,
                                                        lengths.get());
  GT_CUDA_CHECK_LAUNCH();
  with_temp_storage([&](void* t, size_t& b) {
    return cub::DeviceScan::ExclusiveSum(t, b, lengths.get(), offsets.get(), int(k), stream);
  });
  auto* varints = reinterpret_cast<uint8_t*>(body) + 4 * k;
  write_varints<<<blocks_for(k), kThreads, 0, stream>>>(sel.get(), offsets.get(), k, varints);
  GT_CUDA_CHECK_LAUNCH();
  uint32_t last_offset = 0, last_length = 0;
  GT_CUDA_CHECK(
      cudaMemcpyAsync(&last_offset, offsets.get() + k - 1, 4, cudaMemcpyDeviceToHost, stream));
  GT_CUDA_CHECK(
      cudaMemcpyAsync(&last_length, lengths.get() + k - 1, 4, cudaMemcpyDeviceToHost, stream));
  GT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return 4 * k + last_offset + last_length;
}

void topk_decode(const float* values, const uint32_t* indices, uint64_t k, size_t n, float* y,
                 bool add, cudaStream_t stream) {
  if (!add && n > 0) GT_CUDA_CHECK(cudaMemsetAsync(y, 0, n * sizeof(float), stream));
  if (k == 0) return;
  scatter_values<<<blocks_for(k), kThreads, 0, stream>>>(values, indices, k, y, add);
  GT_CUDA_CHECK_LAUNCH();
}

}  // namespace geotrain::kernels::cuda
