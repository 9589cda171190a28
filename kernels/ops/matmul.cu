// The bias gradient of a linear layer on a GPU: the part of kernels/ops/matmul.cpp's backward that
// is not a GEMM (models/gpt_cuda.cpp runs the GEMMs through cuBLASLt).
// Contracts in kernels/gpt_cuda.cuh; shared helpers in kernels/ops/cuda_common.cuh.
#include "kernels/ops/cuda_common.cuh"

namespace geotrain::kernels::cuda {
namespace {

using namespace ops_detail;

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

}  // namespace

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

#define GT_OPS(T) \
  template void bias_backward<T>(float*, const T*, size_t, size_t, float*, cudaStream_t);

GT_OPS(float)
GT_OPS(__nv_bfloat16)
#undef GT_OPS

}  // namespace geotrain::kernels::cuda
