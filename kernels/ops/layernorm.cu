// LayerNorm on a GPU: the CUDA twin of kernels/ops/layernorm.cpp.
// Contracts in kernels/gpt_cuda.cuh; shared helpers in kernels/ops/cuda_common.cuh.
#include "kernels/ops/cuda_common.cuh"

namespace geotrain::kernels::cuda {
namespace {

using namespace ops_detail;

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

}  // namespace

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

#define GT_OPS(T)                                                                              \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, size_t, \
                                     size_t, cudaStream_t);                                    \
  template void layernorm_backward<T>(T*, float*, float*, const T*, const T*, const T*,        \
                                      const float*, const float*, size_t, size_t, cudaStream_t);

GT_OPS(float)
GT_OPS(__nv_bfloat16)
#undef GT_OPS

}  // namespace geotrain::kernels::cuda
