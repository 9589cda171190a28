// CUDA twins of kernels/model_cpu.cpp; see model_cuda.cuh for the contracts. Must not include
// core/error.hpp (fmt's consteval format strings do not compile under nvcc): errors go through
// core/check_cuda.hpp and core/error_types.hpp only.
#include <cfloat>
#include <climits>
#include <string>

#include "core/check_cuda.hpp"
#include "core/error_types.hpp"
#include "kernels/model_cuda.cuh"

namespace geotrain::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;

void require_shape(bool ok, const char* what, size_t value) {
  if (!ok) throw InputError(std::string("model kernel: ") + what + " is " + std::to_string(value));
}

int as_int(size_t n, const char* what) {
  require_shape(n > 0 && n <= static_cast<size_t>(INT_MAX), what, n);
  return static_cast<int>(n);
}

unsigned grid_for(size_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// y (B, N) = broadcast b (N); the GEMM then adds x W^T with beta = 1.
__global__ void bias_broadcast_kernel(float* y, const float* b, size_t batch, size_t n) {
  const size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  if (i < batch * n) y[i] = b[i % n];
}

// db (N) += column sums of dy (B, N): thread j walks column j, so reads are coalesced per row.
// TODO(perf): a block-per-column-tile reduction for large B.
__global__ void bias_grad_kernel(const float* dy, size_t batch, size_t n, float* db) {
  const size_t j = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  if (j >= n) return;
  float s = 0.0f;
  for (size_t i = 0; i < batch; ++i) s += dy[i * n + j];
  db[j] += s;
}

__global__ void relu_forward_kernel(float* x, size_t n) {
  const size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  if (i < n) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void relu_backward_kernel(const float* y, float* dx, size_t n) {
  const size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  if (i < n && !(y[i] > 0.0f)) dx[i] = 0.0f;
}

// One warp per row. Lane l walks columns l, l+32, ...; max and sum are butterfly reductions, so
// every lane ends with the row's values.
__global__ void softmax_xent_kernel(const float* logits, const int32_t* labels, size_t batch,
                                    size_t classes, float* dlogits, float* losses,
                                    int32_t* correct) {
  const size_t row = blockIdx.x * size_t{blockDim.x / 32} + threadIdx.x / 32;
  const unsigned lane = threadIdx.x % 32;
  if (row >= batch) return;  // whole warps exit together: row depends on the warp only
  const float* z = logits + row * classes;
  float zmax = -FLT_MAX;
  int arg = INT_MAX;
  for (size_t j = lane; j < classes; j += 32) {
    if (z[j] > zmax) {  // strict: keeps the first maximum among this lane's columns
      zmax = z[j];
      arg = static_cast<int>(j);
    }
  }
  for (int off = 16; off > 0; off /= 2) {
    const float om = __shfl_xor_sync(kFullMask, zmax, off);
    const int oa = __shfl_xor_sync(kFullMask, arg, off);
    if (om > zmax || (om == zmax && oa < arg)) {
      zmax = om;
      arg = oa;
    }
  }
  float sum = 0.0f;
  for (size_t j = lane; j < classes; j += 32) sum += expf(z[j] - zmax);
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(kFullMask, sum, off);
  const int label = labels[row];
  if (lane == 0) {
    losses[row] = logf(sum) + zmax - z[label];
    correct[row] = arg == label ? 1 : 0;
  }
  if (dlogits != nullptr) {
    const float inv_sum = 1.0f / sum;
    const float inv_batch = 1.0f / static_cast<float>(batch);
    float* d = dlogits + row * classes;
    for (size_t j = lane; j < classes; j += 32)
      d[j] =
          (expf(z[j] - zmax) * inv_sum - (static_cast<int>(j) == label ? 1.0f : 0.0f)) * inv_batch;
  }
}

}  // namespace

int model_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

void linear_forward(cublasHandle_t handle, const float* x, const float* w, const float* b,
                    size_t batch, size_t in, size_t out, float* y, cudaStream_t stream) {
  const int B = as_int(batch, "batch"), I = as_int(in, "in"), O = as_int(out, "out");
  bias_broadcast_kernel<<<grid_for(batch * out), kThreads, 0, stream>>>(y, b, batch, out);
  GT_CUDA_CHECK_LAUNCH();
  // Row-major y (B, O) is column-major y^T (O, B) = W (O, I) x^T (I, B). Column-major W as
  // stored is W^T (I, O), hence OP_T; x as stored is x^T (I, B), hence OP_N.
  const float one = 1.0f;
  GT_CUBLAS_CHECK(cublasSetStream(handle, stream));
  GT_CUBLAS_CHECK(
      cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, O, B, I, &one, w, I, x, I, &one, y, O));
}

void linear_backward(cublasHandle_t handle, const float* x, const float* w, const float* dy,
                     size_t batch, size_t in, size_t out, float* dw, float* db, float* dx,
                     cudaStream_t stream) {
  const int B = as_int(batch, "batch"), I = as_int(in, "in"), O = as_int(out, "out");
  const float one = 1.0f, zero = 0.0f;
  GT_CUBLAS_CHECK(cublasSetStream(handle, stream));
  // Row-major dW (O, I) += dy^T x is column-major dW^T (I, O) += x^T (I, B) dy (B, O): stored
  // x is x^T (I, B) -> OP_N; stored dy is dy^T (O, B) -> OP_T.
  GT_CUBLAS_CHECK(
      cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, I, O, B, &one, x, I, dy, O, &one, dw, I));
  bias_grad_kernel<<<grid_for(out), kThreads, 0, stream>>>(dy, batch, out, db);
  GT_CUDA_CHECK_LAUNCH();
  if (dx != nullptr) {
    // Row-major dx (B, I) = dy (B, O) W (O, I) is column-major dx^T (I, B) = W^T (I, O) dy^T
    // (O, B), both as stored -> OP_N, OP_N.
    GT_CUBLAS_CHECK(
        cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, I, B, O, &one, w, I, dy, O, &zero, dx, I));
  }
}

void relu_forward(float* x, size_t n, cudaStream_t stream) {
  require_shape(n > 0, "relu size", n);
  relu_forward_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n);
  GT_CUDA_CHECK_LAUNCH();
}

void relu_backward(const float* y, float* dx, size_t n, cudaStream_t stream) {
  require_shape(n > 0, "relu size", n);
  relu_backward_kernel<<<grid_for(n), kThreads, 0, stream>>>(y, dx, n);
  GT_CUDA_CHECK_LAUNCH();
}

void softmax_cross_entropy(const float* logits, const int32_t* labels, size_t batch, size_t classes,
                           float* dlogits, float* losses, int32_t* correct, cudaStream_t stream) {
  require_shape(batch > 0, "batch", batch);
  require_shape(classes > 0 && classes <= static_cast<size_t>(INT_MAX), "classes", classes);
  constexpr size_t kRowsPerBlock = kThreads / 32;
  const auto grid = static_cast<unsigned>((batch + kRowsPerBlock - 1) / kRowsPerBlock);
  softmax_xent_kernel<<<grid, kThreads, 0, stream>>>(logits, labels, batch, classes, dlogits,
                                                     losses, correct);
  GT_CUDA_CHECK_LAUNCH();
}

}  // namespace geotrain::kernels::cuda
