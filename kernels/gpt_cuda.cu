// CUDA twins of the GPT's CPU ops (kernels/ops/*.cpp); contracts in gpt_cuda.cuh. Must not
// include core/error.hpp (fmt's consteval format strings do not compile under nvcc).
#include <algorithm>
#include <cfloat>
#include <climits>
#include <cstdint>
#include <string>

#include "core/check_cuda.hpp"
#include "core/error_types.hpp"
#include "kernels/gpt_cuda.cuh"

namespace geotrain::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(kFullMask, v, off);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, off));
  return v;
}

void require(bool ok, const char* what, size_t value) {
  if (!ok) throw InputError(std::string("gpt kernel: ") + what + " is " + std::to_string(value));
}
int as_int(size_t n, const char* what) {
  require(n > 0 && n <= static_cast<size_t>(INT_MAX), what, n);
  return static_cast<int>(n);
}
unsigned blocks_for(size_t n, unsigned threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}
// One warp per row, 8 warps per block.
constexpr unsigned kRowThreads = 256;
unsigned warp_row_blocks(size_t rows) { return blocks_for(rows * 32, kRowThreads); }

// ---- embedding ----------------------------------------------------------------------------

template <typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                         int BT, int T_, int C) {
  const size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  if (i >= size_t(BT) * C) return;
  const int bt = static_cast<int>(i / C), c = static_cast<int>(i % C), t = bt % T_;
  out[i] =
      from_float<T>(to_float(wte[size_t(tokens[bt]) * C + c]) + to_float(wpe[size_t(t) * C + c]));
}

template <typename T>
__global__ void embedding_backward_kernel(float* dwte, float* dwpe, const T* dout,
                                          const int32_t* tokens, int BT, int T_, int C) {
  const size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  if (i >= size_t(BT) * C) return;
  const int bt = static_cast<int>(i / C), c = static_cast<int>(i % C), t = bt % T_;
  const float d = to_float(dout[i]);
  atomicAdd(dwte + size_t(tokens[bt]) * C + c, d);
  atomicAdd(dwpe + size_t(t) * C + c, d);
}

// ---- layernorm ----------------------------------------------------------------------------

template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* x, const T* w,
                                         const T* b, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* xr = x + size_t(row) * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += 32) s += to_float(xr[c]);
  const float m = warp_sum(s) / C;
  float v = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float d = to_float(xr[c]) - m;
    v += d * d;
  }
  const float r = rsqrtf(warp_sum(v) / C + 1e-5f);
  T* o = out + size_t(row) * C;
  for (int c = lane; c < C; c += 32)
    o[c] = from_float<T>((to_float(xr[c]) - m) * r * to_float(w[c]) + to_float(b[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// One warp per row; the block's warps add their rows' dw, db into shared memory (C floats each),
// then the block adds those into the global fp32 gradients.
template <typename T>
__global__ void layernorm_backward_kernel(T* dx, float* dw, float* db, const T* dout, const T* x,
                                          const T* w, const float* mean, const float* rstd, int N,
                                          int C) {
  extern __shared__ float shared[];  // dw (C), db (C)
  float* sdw = shared;
  float* sdb = shared + C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    sdw[c] = 0.0f;
    sdb[c] = 0.0f;
  }
  __syncthreads();
  const int warps = blockDim.x / 32, lane = threadIdx.x % 32;
  for (int row = blockIdx.x * warps + threadIdx.x / 32; row < N; row += gridDim.x * warps) {
    const T* xr = x + size_t(row) * C;
    const T* dr = dout + size_t(row) * C;
    const float m = mean[row], r = rstd[row];
    float g_mean = 0.0f, gx_mean = 0.0f;
    for (int c = lane; c < C; c += 32) {
      const float xhat = (to_float(xr[c]) - m) * r;
      const float g = to_float(dr[c]) * to_float(w[c]);
      g_mean += g;
      gx_mean += g * xhat;
    }
    g_mean = warp_sum(g_mean) / C;
    gx_mean = warp_sum(gx_mean) / C;
    T* dxr = dx + size_t(row) * C;
    for (int c = lane; c < C; c += 32) {
      const float xhat = (to_float(xr[c]) - m) * r;
      const float d = to_float(dr[c]);
      atomicAdd(sdw + c, d * xhat);
      atomicAdd(sdb + c, d);
      const float g = d * to_float(w[c]);
      dxr[c] = from_float<T>(to_float(dxr[c]) + r * (g - g_mean - xhat * gx_mean));
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    atomicAdd(dw + c, sdw[c]);
    atomicAdd(db + c, sdb[c]);
  }
}

// ---- elementwise --------------------------------------------------------------------------

__device__ __forceinline__ float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* x, size_t n) {
  const size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  if (i < n) out[i] = from_float<T>(gelu_tanh(to_float(x[i])));
}

template <typename T>
__global__ void gelu_backward_kernel(T* dx, const T* x, const T* dout, size_t n) {
  const size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float k = 0.7978845608028654f;
  const float v = to_float(x[i]);
  const float u = k * (v + 0.044715f * v * v * v);
  const float th = tanhf(u);
  const float sech2 = 1.0f - th * th;
  const float grad = 0.5f * (1.0f + th) + 0.5f * v * sech2 * k * (1.0f + 3.0f * 0.044715f * v * v);
  dx[i] = from_float<T>(grad * to_float(dout[i]));
}

template <typename T>
__global__ void residual_kernel(T* out, const T* a, const T* b, size_t n) {
  const size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  if (i < n) out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
}

template <typename T>
__global__ void cast_kernel(T* out, const float* in, size_t n) {
  const size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  if (i < n) out[i] = from_float<T>(in[i]);
}

// dbias[j] += sum_r dout[r, j]: a block owns 32 columns; its warps stride over the rows (lane =
// column, so each warp reads 32 consecutive values of a row), then reduce through shared memory.
// The bias gradient in two stages, without atomics (the sum's order is fixed, so it is the same
// on every run). Stage 1: a block sums kBiasRows rows of kBiasCols columns, each thread 8 adjacent
// columns (one 16-byte load of bf16, two of fp32 where aligned), its 8 warps on interleaved rows;
// it writes one partial row. Stage 2 sums the partial rows of each column.
constexpr int kBiasThreads = 256;
constexpr int kBiasWarps = kBiasThreads / 32;
constexpr int kBiasVec = 8;
constexpr int kBiasCols = 32 * kBiasVec;
constexpr int kBiasRows = 64;

__device__ __forceinline__ void load8(const float* p, float (&v)[kBiasVec]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void load8(const bf16* p, float (&v)[kBiasVec]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}

template <typename T>
__global__ void bias_partial_kernel(float* partial, const T* dout, int N, int OC, bool vectors) {
  __shared__ float acc[kBiasWarps][kBiasCols];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int col0 = blockIdx.x * kBiasCols + lane * kBiasVec;
  const int row_end = min(N, (blockIdx.y + 1) * kBiasRows);
  float sum[kBiasVec] = {};
  for (int r = blockIdx.y * kBiasRows + warp; r < row_end; r += kBiasWarps) {
    const T* row = dout + size_t(r) * OC;
    float v[kBiasVec];
    if (vectors && col0 + kBiasVec <= OC) {
      load8(row + col0, v);
    } else {
#pragma unroll
      for (int i = 0; i < kBiasVec; ++i) v[i] = col0 + i < OC ? to_float(row[col0 + i]) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kBiasVec; ++i) sum[i] += v[i];
  }
#pragma unroll
  for (int i = 0; i < kBiasVec; ++i) acc[warp][lane * kBiasVec + i] = sum[i];
  __syncthreads();
  const int c = blockIdx.x * kBiasCols + threadIdx.x;  // kBiasThreads == kBiasCols
  if (c >= OC) return;
  float t = 0.0f;
#pragma unroll
  for (int w = 0; w < kBiasWarps; ++w) t += acc[w][threadIdx.x];
  partial[size_t(blockIdx.y) * OC + c] = t;
}

// Block (32 columns, 8 lanes of partial rows): each thread sums every 8th partial row of its
// column, then the 8 sums are added in a fixed order.
__global__ void bias_finish_kernel(float* dbias, const float* partial, int chunks, int OC) {
  __shared__ float acc[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float s = 0.0f;
  if (c < OC)
    for (int k = threadIdx.y; k < chunks; k += 8) s += partial[size_t(k) * OC + c];
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || c >= OC) return;
  float t = 0.0f;
#pragma unroll
  for (int k = 0; k < 8; ++k) t += acc[k][threadIdx.x];
  dbias[c] += t;
}

// ---- attention ----------------------------------------------------------------------------

template <typename T>
__global__ void permute_kernel(T* q, T* k, T* v, const T* qkv, int B, int T_, int NH, int hs) {
  const size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;  // over (B, NH, T, hs)
  const size_t n = size_t(B) * NH * T_ * hs;
  if (i >= n) return;
  const int d = i % hs;
  const int t = (i / hs) % T_;
  const int h = (i / (size_t(hs) * T_)) % NH;
  const int b = static_cast<int>(i / (size_t(hs) * T_ * NH));
  const int C = NH * hs;
  const size_t src = (size_t(b) * T_ + t) * 3 * C + h * hs + d;
  q[i] = qkv[src];
  k[i] = qkv[src + C];
  v[i] = qkv[src + 2 * C];
}

template <typename T>
__global__ void permute_backward_kernel(T* dqkv, const T* dq, const T* dk, const T* dv, int B,
                                        int T_, int NH, int hs) {
  const size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  const size_t n = size_t(B) * NH * T_ * hs;
  if (i >= n) return;
  const int d = i % hs;
  const int t = (i / hs) % T_;
  const int h = (i / (size_t(hs) * T_)) % NH;
  const int b = static_cast<int>(i / (size_t(hs) * T_ * NH));
  const int C = NH * hs;
  const size_t dst = (size_t(b) * T_ + t) * 3 * C + h * hs + d;
  dqkv[dst] = dq[i];
  dqkv[dst + C] = dk[i];
  dqkv[dst + 2 * C] = dv[i];
}

template <typename T>
__global__ void unpermute_kernel(T* out, const T* y, int B, int T_, int NH, int hs, bool backward) {
  const size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;  // over y's (B, NH, T, hs)
  const size_t n = size_t(B) * NH * T_ * hs;
  if (i >= n) return;
  const int d = i % hs;
  const int t = (i / hs) % T_;
  const int h = (i / (size_t(hs) * T_)) % NH;
  const int b = static_cast<int>(i / (size_t(hs) * T_ * NH));
  const size_t o = ((size_t(b) * T_ + t) * NH + h) * hs + d;
  if (backward)
    out[i] = y[o];  // out = dy (B, NH, T, hs), y = dout (B, T, C)
  else
    out[o] = y[i];
}

// One warp per row of one (b, h)'s (T, T) scores; row t reads s in [0, t].
template <typename T>
__global__ void causal_softmax_kernel(T* att, const float* scores, float scale, int rows, int T_) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int t = row % T_;
  const float* s = scores + size_t(row) * T_;
  T* a = att + size_t(row) * T_;
  float m = -FLT_MAX;
  for (int j = lane; j <= t; j += 32) m = fmaxf(m, s[j] * scale);
  m = warp_max(m);
  float sum = 0.0f;
  for (int j = lane; j <= t; j += 32) sum += __expf(s[j] * scale - m);
  sum = warp_sum(sum);
  const float inv = 1.0f / sum;
  for (int j = lane; j < T_; j += 32)
    a[j] = from_float<T>(j <= t ? __expf(s[j] * scale - m) * inv : 0.0f);
}

template <typename T>
__global__ void causal_softmax_backward_kernel(T* dscores, const float* datt, const T* att,
                                               float scale, int rows, int T_) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int t = row % T_;
  const float* d = datt + size_t(row) * T_;
  const T* a = att + size_t(row) * T_;
  float dot = 0.0f;
  for (int j = lane; j <= t; j += 32) dot += to_float(a[j]) * d[j];
  dot = warp_sum(dot);
  T* o = dscores + size_t(row) * T_;
  for (int j = lane; j < T_; j += 32)
    o[j] = from_float<T>(j <= t ? scale * to_float(a[j]) * (d[j] - dot) : 0.0f);
}

// ---- cross-entropy ------------------------------------------------------------------------

// Block reductions over kCeThreads threads: max with the first argmax, and sum.
constexpr int kCeThreads = 512;

template <typename T>
__global__ void cross_entropy_kernel(float* losses, int32_t* correct, T* dlogits, const T* logits,
                                     const int32_t* targets, int V, int ld, float dloss) {
  __shared__ float smax[kCeThreads / 32];
  __shared__ int sarg[kCeThreads / 32];
  __shared__ float ssum[kCeThreads / 32];
  const int row = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  const T* z = logits + size_t(row) * ld;
  float m = -FLT_MAX;
  int arg = INT_MAX;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float v = to_float(z[j]);
    if (v > m) {  // strict: this thread's first maximum
      m = v;
      arg = j;
    }
  }
  for (int off = 16; off > 0; off /= 2) {
    const float om = __shfl_xor_sync(kFullMask, m, off);
    const int oa = __shfl_xor_sync(kFullMask, arg, off);
    if (om > m || (om == m && oa < arg)) {
      m = om;
      arg = oa;
    }
  }
  if (lane == 0) {
    smax[warp] = m;
    sarg[warp] = arg;
  }
  __syncthreads();
  m = smax[0];
  arg = sarg[0];
  for (int w = 1; w < warps; ++w)
    if (smax[w] > m || (smax[w] == m && sarg[w] < arg)) {
      m = smax[w];
      arg = sarg[w];
    }
  float sum = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) sum += __expf(to_float(z[j]) - m);
  sum = warp_sum(sum);
  if (lane == 0) ssum[warp] = sum;
  __syncthreads();
  sum = 0.0f;
  for (int w = 0; w < warps; ++w) sum += ssum[w];
  const int target = targets[row];
  if (threadIdx.x == 0) {
    losses[row] = logf(sum) + m - to_float(z[target]);
    correct[row] = arg == target ? 1 : 0;
  }
  if (dlogits == nullptr) return;
  __syncthreads();  // every thread has read its logits (dlogits may alias them)
  const float inv = 1.0f / sum;
  T* dz = dlogits + size_t(row) * ld;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float p = __expf(to_float(z[j]) - m) * inv;
    dz[j] = from_float<T>((p - (j == target ? 1.0f : 0.0f)) * dloss);
  }
  for (int j = V + threadIdx.x; j < ld; j += blockDim.x) dz[j] = from_float<T>(0.0f);
}

__global__ void sum_loss_kernel(double* sums, const float* losses, const int32_t* correct, int N) {
  __shared__ float sl[32], sc[32];
  float l = 0.0f, c = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x) {
    l += losses[i];
    c += static_cast<float>(correct[i]);
  }
  l = warp_sum(l);
  c = warp_sum(c);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    sl[warp] = l;
    sc[warp] = c;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double tl = 0, tc = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) {
      tl += sl[w];
      tc += sc[w];
    }
    atomicAdd(sums, tl);
    atomicAdd(sums + 1, tc);
  }
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, size_t B,
                       size_t T_, size_t C, cudaStream_t stream) {
  const size_t n = B * T_ * C;
  as_int(B * T_, "B * T");
  embedding_forward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(
      out, tokens, wte, wpe, static_cast<int>(B * T_), as_int(T_, "T"), as_int(C, "C"));
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void embedding_backward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens, size_t B,
                        size_t T_, size_t C, cudaStream_t stream) {
  const size_t n = B * T_ * C;
  embedding_backward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(
      dwte, dwpe, dout, tokens, as_int(B * T_, "B * T"), as_int(T_, "T"), as_int(C, "C"));
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* x, const T* w, const T* b,
                       size_t N, size_t C, cudaStream_t stream) {
  layernorm_forward_kernel<<<warp_row_blocks(N), kRowThreads, 0, stream>>>(
      out, mean, rstd, x, w, b, as_int(N, "N"), as_int(C, "C"));
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void layernorm_backward(T* dx, float* dw, float* db, const T* dout, const T* x, const T* w,
                        const float* mean, const float* rstd, size_t N, size_t C,
                        cudaStream_t stream) {
  const size_t shared = 2 * C * sizeof(float);
  require(shared <= 48 * 1024, "C (2 C floats of shared memory must fit 48 KiB)", C);
  // Enough blocks to fill the device a few times over; each walks rows with a grid stride, so
  // the shared partials amortise over many rows.
  const unsigned blocks = std::min<unsigned>(warp_row_blocks(N), 132 * 4);
  layernorm_backward_kernel<<<blocks, kRowThreads, shared, stream>>>(
      dx, dw, db, dout, x, w, mean, rstd, as_int(N, "N"), as_int(C, "C"));
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void gelu_forward(T* out, const T* x, size_t n, cudaStream_t stream) {
  gelu_forward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, x, n);
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void gelu_backward(T* dx, const T* x, const T* dout, size_t n, cudaStream_t stream) {
  gelu_backward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(dx, x, dout, n);
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void residual_forward(T* out, const T* a, const T* b, size_t n, cudaStream_t stream) {
  residual_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, a, b, n);
  GT_CUDA_CHECK_LAUNCH();
}

size_t bias_backward_scratch(size_t N, size_t OC) { return (N + kBiasRows - 1) / kBiasRows * OC; }

template <typename T>
void bias_backward(float* dbias, const T* dout, size_t N, size_t OC, float* scratch,
                   cudaStream_t stream) {
  static_assert(kBiasThreads == kBiasCols, "stage 1 writes one column per thread");
  if (N == 0 || OC == 0) return;
  const int chunks = as_int((N + kBiasRows - 1) / kBiasRows, "bias row chunks");
  const bool vectors = OC % kBiasVec == 0 && reinterpret_cast<uintptr_t>(dout) % 16 == 0;
  const dim3 grid(static_cast<unsigned>((OC + kBiasCols - 1) / kBiasCols),
                  static_cast<unsigned>(chunks));
  bias_partial_kernel<<<grid, kBiasThreads, 0, stream>>>(scratch, dout, as_int(N, "N"),
                                                         as_int(OC, "OC"), vectors);
  GT_CUDA_CHECK_LAUNCH();
  bias_finish_kernel<<<static_cast<unsigned>((OC + 31) / 32), dim3(32, 8), 0, stream>>>(
      dbias, scratch, chunks, as_int(OC, "OC"));
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void attention_permute(T* q, T* k, T* v, const T* qkv, size_t B, size_t T_, size_t NH, size_t hs,
                       cudaStream_t stream) {
  const size_t n = B * NH * T_ * hs;
  permute_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(
      q, k, v, qkv, as_int(B, "B"), as_int(T_, "T"), as_int(NH, "NH"), as_int(hs, "head size"));
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void attention_permute_backward(T* dqkv, const T* dq, const T* dk, const T* dv, size_t B, size_t T_,
                                size_t NH, size_t hs, cudaStream_t stream) {
  const size_t n = B * NH * T_ * hs;
  permute_backward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(
      dqkv, dq, dk, dv, as_int(B, "B"), as_int(T_, "T"), as_int(NH, "NH"), as_int(hs, "head size"));
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void attention_unpermute(T* out, const T* y, size_t B, size_t T_, size_t NH, size_t hs,
                         cudaStream_t stream) {
  const size_t n = B * NH * T_ * hs;
  unpermute_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(
      out, y, as_int(B, "B"), as_int(T_, "T"), as_int(NH, "NH"), as_int(hs, "head size"), false);
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void attention_unpermute_backward(T* dy, const T* dout, size_t B, size_t T_, size_t NH, size_t hs,
                                  cudaStream_t stream) {
  const size_t n = B * NH * T_ * hs;
  unpermute_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(
      dy, dout, as_int(B, "B"), as_int(T_, "T"), as_int(NH, "NH"), as_int(hs, "head size"), true);
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void causal_softmax(T* att, const float* scores, float scale, size_t rows, size_t T_,
                    cudaStream_t stream) {
  causal_softmax_kernel<<<warp_row_blocks(rows), kRowThreads, 0, stream>>>(
      att, scores, scale, as_int(rows, "rows"), as_int(T_, "T"));
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void causal_softmax_backward(T* dscores, const float* datt, const T* att, float scale, size_t rows,
                             size_t T_, cudaStream_t stream) {
  causal_softmax_backward_kernel<<<warp_row_blocks(rows), kRowThreads, 0, stream>>>(
      dscores, datt, att, scale, as_int(rows, "rows"), as_int(T_, "T"));
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void cross_entropy(float* losses, int32_t* correct, T* dlogits, const T* logits,
                   const int32_t* targets, size_t N, size_t V, size_t ld, float dloss,
                   cudaStream_t stream) {
  require(ld >= V, "the logits' row stride (below V)", ld);
  cross_entropy_kernel<<<as_int(N, "N"), kCeThreads, 0, stream>>>(
      losses, correct, dlogits, logits, targets, as_int(V, "V"), as_int(ld, "ld"), dloss);
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void cast_from_float(T* out, const float* in, size_t n, cudaStream_t stream) {
  cast_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, in, n);
  GT_CUDA_CHECK_LAUNCH();
}

void sum_loss(double* sums, const float* losses, const int32_t* correct, size_t N,
              cudaStream_t stream) {
  const unsigned blocks = std::min<unsigned>(blocks_for(N, 256), 264);
  sum_loss_kernel<<<blocks, 256, 0, stream>>>(sums, losses, correct, as_int(N, "N"));
  GT_CUDA_CHECK_LAUNCH();
}

#define GT_GPT_OPS(T)                                                                            \
  template void embedding_forward<T>(T*, const int32_t*, const T*, const T*, size_t, size_t,     \
                                     size_t, cudaStream_t);                                      \
  template void embedding_backward<T>(float*, float*, const T*, const int32_t*, size_t, size_t,  \
                                      size_t, cudaStream_t);                                     \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, size_t,   \
                                     size_t, cudaStream_t);                                      \
  template void layernorm_backward<T>(T*, float*, float*, const T*, const T*, const T*,          \
                                      const float*, const float*, size_t, size_t, cudaStream_t); \
  template void gelu_forward<T>(T*, const T*, size_t, cudaStream_t);                             \
  template void gelu_backward<T>(T*, const T*, const T*, size_t, cudaStream_t);                  \
  template void residual_forward<T>(T*, const T*, const T*, size_t, cudaStream_t);               \
  template void bias_backward<T>(float*, const T*, size_t, size_t, float*, cudaStream_t);        \
  template void attention_permute<T>(T*, T*, T*, const T*, size_t, size_t, size_t, size_t,       \
                                     cudaStream_t);                                              \
  template void attention_permute_backward<T>(T*, const T*, const T*, const T*, size_t, size_t,  \
                                              size_t, size_t, cudaStream_t);                     \
  template void attention_unpermute<T>(T*, const T*, size_t, size_t, size_t, size_t,             \
                                       cudaStream_t);                                            \
  template void attention_unpermute_backward<T>(T*, const T*, size_t, size_t, size_t, size_t,    \
                                                cudaStream_t);                                   \
  template void causal_softmax<T>(T*, const float*, float, size_t, size_t, cudaStream_t);        \
  template void causal_softmax_backward<T>(T*, const float*, const T*, float, size_t, size_t,    \
                                           cudaStream_t);                                        \
  template void cross_entropy<T>(float*, int32_t*, T*, const T*, const int32_t*, size_t, size_t, \
                                 size_t, float, cudaStream_t);                                   \
  template void cast_from_float<T>(T*, const float*, size_t, cudaStream_t);

GT_GPT_OPS(float)
GT_GPT_OPS(__nv_bfloat16)
#undef GT_GPT_OPS

}  // namespace geotrain::kernels::cuda
