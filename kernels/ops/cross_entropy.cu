// Softmax cross-entropy over the vocabulary on a GPU, and the loss sum: the CUDA twins of
// kernels/ops/cross_entropy.cpp.
// Contracts in kernels/gpt_cuda.cuh; shared helpers in kernels/ops/cuda_common.cuh.
#include "kernels/ops/cuda_common.cuh"

namespace geotrain::kernels::cuda {
namespace {

using namespace ops_detail;

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

template <typename T>
void cross_entropy(float* losses, int32_t* correct, T* dlogits, const T* logits,
                   const int32_t* targets, size_t N, size_t V, size_t ld, float dloss,
                   cudaStream_t stream) {
  require(ld >= V, "the logits' row stride (below V)", ld);
  cross_entropy_kernel<<<as_int(N, "N"), kCeThreads, 0, stream>>>(
      losses, correct, dlogits, logits, targets, as_int(V, "V"), as_int(ld, "ld"), dloss);
  GT_CUDA_CHECK_LAUNCH();
}

void sum_loss(double* sums, const float* losses, const int32_t* correct, size_t N,
              cudaStream_t stream) {
  const unsigned blocks = std::min<unsigned>(blocks_for(N, 256), 264);
  sum_loss_kernel<<<blocks, 256, 0, stream>>>(sums, losses, correct, as_int(N, "N"));
  GT_CUDA_CHECK_LAUNCH();
}

#define GT_OPS(T)                                                                                \
  template void cross_entropy<T>(float*, int32_t*, T*, const T*, const int32_t*, size_t, size_t, \
                                 size_t, float, cudaStream_t);

GT_OPS(float)
GT_OPS(__nv_bfloat16)
#undef GT_OPS

}  // namespace geotrain::kernels::cuda
