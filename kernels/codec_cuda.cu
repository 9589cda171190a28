// CUDA codec kernels. Built with --fmad=false so that products and sums round exactly as the
// host code does (-ffp-contract=off); the scalar arithmetic is shared via codec_math.hpp.
#include "core/check_cuda.hpp"
#include "kernels/codec_cuda.cuh"
#include "kernels/codec_math.hpp"

namespace geotrain::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__host__ __device__ inline size_t min_size(size_t a, size_t b) { return a < b ? a : b; }
constexpr unsigned kFullMask = 0xffffffffu;

unsigned grid_for(size_t n, int threads = kThreads) {
  const size_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 * 16 ? (blocks == 0 ? 1 : blocks) : 65535 * 16);
}

// x = g + beta e, the error-feedback input of element i (ErrorFeedback's order: beta e, then the
// sum). decay == 1 adds e as it is, with no multiply, as the CPU does.
__device__ __forceinline__ float feedback_x(const float* g, const float* e, size_t i, float decay) {
  return decay == 1.0f ? g[i] + e[i] : g[i] + decay * e[i];
}

// ---- elementwise codecs ----

__global__ void fp32_encode_kernel(const float* __restrict__ g, float* __restrict__ residual,
                                   float decay, size_t n, float* __restrict__ out) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    if (residual) {
      out[i] = feedback_x(g, residual, i, decay);
      residual[i] = 0.0f;
    } else {
      out[i] = g[i];
    }
  }
}

__global__ void fp32_decode_kernel(const float* __restrict__ in, size_t n, float* __restrict__ y,
                                   bool add) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    y[i] = add ? y[i] + in[i] : in[i];
}

template <bool kBf16>
__global__ void half_encode_kernel(const float* __restrict__ g, float* __restrict__ residual,
                                   float decay, size_t n, uint16_t* __restrict__ out) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float x = residual ? feedback_x(g, residual, i, decay) : g[i];
    const uint16_t h = kBf16 ? bf16_from_float(x) : fp16_from_float(x);
    out[i] = h;
    if (residual) residual[i] = x - (kBf16 ? bf16_to_float(h) : fp16_to_float(h));
  }
}

template <bool kBf16>
__global__ void half_decode_kernel(const uint16_t* __restrict__ in, size_t n, float* __restrict__ y,
                                   bool add) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float v = kBf16 ? bf16_to_float(in[i]) : fp16_to_float(in[i]);
    y[i] = add ? y[i] + v : v;
  }
}

// ---- int8 / int4: one block per chunk ----

__device__ float block_absmax(const float* x, const float* e, float decay, size_t count) {
  __shared__ uint32_t warp_max[kThreads / 32];
  uint32_t m = 0;
  for (size_t i = threadIdx.x; i < count; i += blockDim.x)
    m = max_u(m, abs_bits(e ? feedback_x(x, e, i, decay) : x[i]));
  for (int offset = 16; offset > 0; offset /= 2)
    m = max_u(m, __shfl_xor_sync(kFullMask, m, offset));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  uint32_t result = 0;
  for (int w = 0; w < kThreads / 32; ++w) result = max_u(result, warp_max[w]);
  return bits_float(result);  // an integer max: exact in any order
}

template <int kLevels>
__global__ void quant_encode_kernel(const float* __restrict__ g, float* __restrict__ residual,
                                    float decay, size_t n, uint32_t chunk, Rounding r,
                                    float* __restrict__ scales, uint8_t* __restrict__ packed) {
  const size_t c = blockIdx.x;
  const size_t begin = c * chunk;
  const size_t count = min_size(chunk, n - begin);
  const float* x = g + begin;
  float* e = residual ? residual + begin : nullptr;
  const float absmax = block_absmax(x, e, decay, count);
  const uint64_t key = rounding_key(r.seed, r.nonce);
  const float levels = float(kLevels);
  const float inv = quant_inv(absmax, levels);
  const float scale = quant_scale(absmax, levels);
  if (threadIdx.x == 0) scales[c] = scale;
  if (kLevels == 127) {
    auto* q = reinterpret_cast<int8_t*>(packed) + begin;
    for (size_t i = threadIdx.x; i < count; i += blockDim.x) {
      const float v = e ? feedback_x(x, e, i, decay) : x[i];
      const float u = r.stochastic ? uniform01_keyed(key, begin + i) : 0.0f;
      const int qi = quantize(v, inv, levels, r.stochastic, u);
      q[i] = static_cast<int8_t>(qi);
      if (e) e[i] = v - float(qi) * scale;
    }
  } else {
    // int4: thread t packs elements 2t, 2t+1 of the chunk into byte t (chunk is even).
    uint8_t* out = packed + begin / 2;
    for (size_t p = threadIdx.x; 2 * p < count; p += blockDim.x) {
      int nib[2] = {0, 0};
      for (int h = 0; h < 2; ++h) {
        const size_t i = 2 * p + h;
        if (i >= count) break;
        const float v = e ? feedback_x(x, e, i, decay) : x[i];
        const float u = r.stochastic ? uniform01_keyed(key, begin + i) : 0.0f;
        nib[h] = quantize(v, inv, levels, r.stochastic, u);
        if (e) e[i] = v - float(nib[h]) * scale;
      }
      out[p] = static_cast<uint8_t>((nib[0] & 0xF) | ((nib[1] & 0xF) << 4));
    }
  }
}

__global__ void int8_decode_kernel(const float* __restrict__ scales, const int8_t* __restrict__ q,
                                   size_t n, uint32_t chunk, float* __restrict__ y, bool add) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float v = float(q[i]) * scales[i / chunk];
    y[i] = add ? y[i] + v : v;
  }
}

__global__ void int4_decode_kernel(const float* __restrict__ scales,
                                   const uint8_t* __restrict__ packed, size_t n, uint32_t chunk,
                                   float* __restrict__ y, bool add) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const unsigned byte = packed[i / 2];
    const int nib = int(((i & 1) ? (byte >> 4) : (byte & 0xFu)) ^ 8u) - 8;
    const float v = float(nib) * scales[i / chunk];
    y[i] = add ? y[i] + v : v;
  }
}

// ---- fp4: one block per chunk; thread t packs elements 2t, 2t+1 into byte t ----

__global__ void fp4_encode_kernel(const float* __restrict__ g, float* __restrict__ residual,
                                  float decay, size_t n, uint32_t chunk, float* __restrict__ scales,
                                  uint8_t* __restrict__ packed) {
  const size_t c = blockIdx.x;
  const size_t begin = c * chunk;
  const size_t count = min_size(chunk, n - begin);
  const float* x = g + begin;
  float* e = residual ? residual + begin : nullptr;
  const float absmax = block_absmax(x, e, decay, count);
  const float inv = quant_inv(absmax, kFp4Max);
  const float scale = quant_scale(absmax, kFp4Max);
  if (threadIdx.x == 0) scales[c] = scale;
  uint8_t* out = packed + begin / 2;
  for (size_t p = threadIdx.x; 2 * p < count; p += blockDim.x) {
    unsigned code[2] = {0, 0};
    for (int h = 0; h < 2; ++h) {
      const size_t i = 2 * p + h;
      if (i >= count) break;
      const float v = e ? feedback_x(x, e, i, decay) : x[i];
      code[h] = fp4_code(v, inv);
      if (e) e[i] = v - fp4_value(code[h], scale);
    }
    out[p] = static_cast<uint8_t>(code[0] | (code[1] << 4));
  }
}

__global__ void fp4_decode_kernel(const float* __restrict__ scales,
                                  const uint8_t* __restrict__ packed, size_t n, uint32_t chunk,
                                  float* __restrict__ y, bool add) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float v = fp4_value((packed[i / 2] >> (4 * (i & 1))) & 0xFu, scales[i / chunk]);
    y[i] = add ? y[i] + v : v;
  }
}

// ---- onebit: one warp per chunk ----

constexpr int kWarpsPerBlock = 8;

__device__ float warp_fold(float lane_sum) {
  // Butterfly: after the step with offset o, lanes j and j^o hold the same (commutative) sum, so
  // every lane ends with the CPU's fold lane[j] += lane[j + o] for o = 16, 8, 4, 2, 1.
  for (int offset = 16; offset > 0; offset /= 2)
    lane_sum += __shfl_xor_sync(kFullMask, lane_sum, offset);
  return lane_sum;
}

// A chunk's lane term: |x| for the mean scale, x*x for the rms scale (codec_cpu.hpp).
template <OnebitScale kScale>
__device__ __forceinline__ float scale_term(float x) {
  if constexpr (kScale == OnebitScale::rms)
    return x * x;
  else
    return abs_f(x);
}

template <OnebitScale kScale>
__device__ __forceinline__ float onebit_scale_of(float lane_sum, size_t count) {
  const float folded = warp_fold(lane_sum) / float(count);
  if constexpr (kScale == OnebitScale::rms)
    return sqrtf(folded);  // correctly rounded (no --use_fast_math), as std::sqrt
  else
    return folded;
}

// kPasses > 0: chunk == 32 * kPasses, values stay in registers; a whole chunk (all but perhaps
// the last) loads without a bounds check, so the warp's 32 loads are all in flight at once.
// kPasses == 0: any chunk, the second pass re-reads x (from the residual, where the first pass
// stored it). kEf: a residual is read and written (x = g + decay e).
template <int kPasses, bool kEf, OnebitScale kScale>
__global__ void onebit_encode_kernel(const float* __restrict__ g, float* __restrict__ residual,
                                     float decay, size_t n, uint32_t chunk,
                                     float* __restrict__ scales, uint32_t* __restrict__ bits) {
  const unsigned lane = threadIdx.x % 32;
  const size_t c = size_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const size_t begin = c * chunk;
  if (begin >= n) return;  // whole warp leaves together
  const size_t count = min_size(chunk, n - begin);
  const float* gc = g + begin;
  float* ec = kEf ? residual + begin : nullptr;
  uint32_t* words = bits + begin / 32;
  auto input = [&](size_t i) { return kEf ? feedback_x(gc, ec, i, decay) : gc[i]; };

  float lane_sum = 0.0f;
  float scale;
  if constexpr (kPasses > 0) {
    float x[kPasses];
    if (count == size_t(chunk)) {
#pragma unroll
      for (int k = 0; k < kPasses; ++k) x[k] = input(size_t(k) * 32 + lane);
    } else {
#pragma unroll
      for (int k = 0; k < kPasses; ++k) {
        const size_t i = size_t(k) * 32 + lane;
        x[k] = i < count ? input(i) : 0.0f;
      }
    }
#pragma unroll
    for (int k = 0; k < kPasses; ++k)
      lane_sum += scale_term<kScale>(x[k]);  // +0 for lanes past the end leaves the sum exact
    scale = onebit_scale_of<kScale>(lane_sum, count);
    uint32_t my_word = 0;
#pragma unroll
    for (int k = 0; k < kPasses; ++k) {
      const size_t i = size_t(k) * 32 + lane;
      const uint32_t word = __ballot_sync(kFullMask, i < count && x[k] < 0.0f);
      if (k % 32 == int(lane)) my_word = word;
      if (kEf && i < count) ec[i] = x[k] - (x[k] < 0.0f ? -scale : scale);
    }
    if (int(lane) < kPasses && size_t(lane) * 32 < count) words[lane] = my_word;
  } else {
    for (size_t k = 0; k * 32 < count; ++k) {
      const size_t i = k * 32 + lane;
      if (i < count) {
        const float x = input(i);
        if (kEf) ec[i] = x;
        lane_sum += scale_term<kScale>(x);
      }
    }
    scale = onebit_scale_of<kScale>(lane_sum, count);
    __syncwarp();
    const float* xc = kEf ? ec : gc;
    for (size_t k = 0; k * 32 < count; ++k) {
      const size_t i = k * 32 + lane;
      const float x = i < count ? xc[i] : 0.0f;
      const uint32_t word = __ballot_sync(kFullMask, i < count && x < 0.0f);
      if (lane == 0) words[k] = word;
      if (kEf && i < count) ec[i] = x - (x < 0.0f ? -scale : scale);
    }
  }
  if (lane == 0) scales[c] = scale;
}

__global__ void onebit_decode_kernel(const float* __restrict__ scales,
                                     const uint32_t* __restrict__ bits, size_t n, uint32_t chunk,
                                     float* __restrict__ y, bool add) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float v = onebit_value(bits[i / 32], unsigned(i % 32), scales[i / chunk]);
    y[i] = add ? y[i] + v : v;
  }
}

}  // namespace

void fp32_encode(const float* g, float* residual, size_t n, float* out, cudaStream_t stream,
                 float decay) {
  if (n == 0) return;
  fp32_encode_kernel<<<grid_for(n), kThreads, 0, stream>>>(g, residual, decay, n, out);
  GT_CUDA_CHECK_LAUNCH();
}
void fp32_decode(const float* in, size_t n, float* y, bool add, cudaStream_t stream) {
  if (n == 0) return;
  fp32_decode_kernel<<<grid_for(n), kThreads, 0, stream>>>(in, n, y, add);
  GT_CUDA_CHECK_LAUNCH();
}
void fp16_encode(const float* g, float* residual, size_t n, uint16_t* out, cudaStream_t stream,
                 float decay) {
  if (n == 0) return;
  half_encode_kernel<false><<<grid_for(n), kThreads, 0, stream>>>(g, residual, decay, n, out);
  GT_CUDA_CHECK_LAUNCH();
}
void fp16_decode(const uint16_t* in, size_t n, float* y, bool add, cudaStream_t stream) {
  if (n == 0) return;
  half_decode_kernel<false><<<grid_for(n), kThreads, 0, stream>>>(in, n, y, add);
  GT_CUDA_CHECK_LAUNCH();
}
void bf16_encode(const float* g, float* residual, size_t n, uint16_t* out, cudaStream_t stream,
                 float decay) {
  if (n == 0) return;
  half_encode_kernel<true><<<grid_for(n), kThreads, 0, stream>>>(g, residual, decay, n, out);
  GT_CUDA_CHECK_LAUNCH();
}
void bf16_decode(const uint16_t* in, size_t n, float* y, bool add, cudaStream_t stream) {
  if (n == 0) return;
  half_decode_kernel<true><<<grid_for(n), kThreads, 0, stream>>>(in, n, y, add);
  GT_CUDA_CHECK_LAUNCH();
}

void int8_encode(const float* g, float* residual, size_t n, uint32_t chunk, Rounding rounding,
                 float* scales, int8_t* q, cudaStream_t stream, float decay) {
  if (n == 0) return;
  quant_encode_kernel<127><<<unsigned(chunk_count(n, chunk)), kThreads, 0, stream>>>(
      g, residual, decay, n, chunk, rounding, scales, reinterpret_cast<uint8_t*>(q));
  GT_CUDA_CHECK_LAUNCH();
}
void int8_decode(const float* scales, const int8_t* q, size_t n, uint32_t chunk, float* y, bool add,
                 cudaStream_t stream) {
  if (n == 0) return;
  int8_decode_kernel<<<grid_for(n), kThreads, 0, stream>>>(scales, q, n, chunk, y, add);
  GT_CUDA_CHECK_LAUNCH();
}
void int4_encode(const float* g, float* residual, size_t n, uint32_t chunk, Rounding rounding,
                 float* scales, uint8_t* packed, cudaStream_t stream, float decay) {
  if (n == 0) return;
  quant_encode_kernel<7><<<unsigned(chunk_count(n, chunk)), kThreads, 0, stream>>>(
      g, residual, decay, n, chunk, rounding, scales, packed);
  GT_CUDA_CHECK_LAUNCH();
}
void int4_decode(const float* scales, const uint8_t* packed, size_t n, uint32_t chunk, float* y,
                 bool add, cudaStream_t stream) {
  if (n == 0) return;
  int4_decode_kernel<<<grid_for(n), kThreads, 0, stream>>>(scales, packed, n, chunk, y, add);
  GT_CUDA_CHECK_LAUNCH();
}

void fp4_encode(const float* g, float* residual, size_t n, uint32_t chunk, float* scales,
                uint8_t* packed, cudaStream_t stream, float decay) {
  if (n == 0) return;
  fp4_encode_kernel<<<unsigned(chunk_count(n, chunk)), kThreads, 0, stream>>>(
      g, residual, decay, n, chunk, scales, packed);
  GT_CUDA_CHECK_LAUNCH();
}
void fp4_decode(const float* scales, const uint8_t* packed, size_t n, uint32_t chunk, float* y,
                bool add, cudaStream_t stream) {
  if (n == 0) return;
  fp4_decode_kernel<<<grid_for(n), kThreads, 0, stream>>>(scales, packed, n, chunk, y, add);
  GT_CUDA_CHECK_LAUNCH();
}

namespace {

// Launches the onebit encoder for one (passes, EF, scale) choice.
template <int kPasses>
void launch_onebit(const float* g, float* residual, float decay, size_t n, uint32_t chunk,
                   OnebitScale scale, float* scales, uint32_t* bits, cudaStream_t stream) {
  const unsigned blocks = unsigned((chunk_count(n, chunk) + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const int threads = 32 * kWarpsPerBlock;
  const auto run = [&](auto kernel) {
    kernel<<<blocks, threads, 0, stream>>>(g, residual, decay, n, chunk, scales, bits);
  };
  const bool rms = scale == OnebitScale::rms;
  if (residual)
    rms ? run(onebit_encode_kernel<kPasses, true, OnebitScale::rms>)
        : run(onebit_encode_kernel<kPasses, true, OnebitScale::mean>);
  else
    rms ? run(onebit_encode_kernel<kPasses, false, OnebitScale::rms>)
        : run(onebit_encode_kernel<kPasses, false, OnebitScale::mean>);
}

}  // namespace

void onebit_encode(const float* g, float* residual, size_t n, uint32_t chunk, float* scales,
                   uint32_t* bits, cudaStream_t stream, OnebitScale scale, float decay) {
  if (n == 0) return;
  switch (chunk) {
    case 256:
      launch_onebit<8>(g, residual, decay, n, chunk, scale, scales, bits, stream);
      break;
    case 512:
      launch_onebit<16>(g, residual, decay, n, chunk, scale, scales, bits, stream);
      break;
    case 1024:
      launch_onebit<32>(g, residual, decay, n, chunk, scale, scales, bits, stream);
      break;
    default:
      launch_onebit<0>(g, residual, decay, n, chunk, scale, scales, bits, stream);
      break;
  }
  GT_CUDA_CHECK_LAUNCH();
}
void onebit_decode(const float* scales, const uint32_t* bits, size_t n, uint32_t chunk, float* y,
                   bool add, cudaStream_t stream) {
  if (n == 0) return;
  onebit_decode_kernel<<<grid_for(n), kThreads, 0, stream>>>(scales, bits, n, chunk, y, add);
  GT_CUDA_CHECK_LAUNCH();
}

namespace {
__global__ void subtract_kernel(const float* __restrict__ a, const float* __restrict__ b, size_t n,
                                float* __restrict__ d) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    d[i] = a[i] - b[i];
}
}  // namespace

void subtract(const float* a, const float* b, size_t n, float* d, cudaStream_t stream) {
  if (n == 0) return;
  subtract_kernel<<<grid_for(n), kThreads, 0, stream>>>(a, b, n, d);
  GT_CUDA_CHECK_LAUNCH();
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

}  // namespace geotrain::kernels::cuda
