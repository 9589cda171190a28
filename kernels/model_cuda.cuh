// CUDA model ops: the GPU twins of kernels/model_cpu.hpp (same names, shapes and contracts).
//
// llm.c style: each `foo_kernel` in model_cuda.cu has a host launcher here that checks the
// shapes it can see, computes the grid, launches on `stream` and checks cudaGetLastError
// (SystemError on failure, InputError on a bad shape). Launches are asynchronous on `stream`;
// results are ready after a stream synchronisation. All pointers are device pointers, borrowed.
// Row-major layout as on the CPU; the GEMMs go through cuBLAS (column-major), so each call
// below states the transposition it uses. Plain declarations: includable from host C++.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace geotrain::kernels::cuda {

// Number of visible CUDA devices; 0 (not an error) when there is no driver or no device.
int model_device_count();

// y (B, out) = x (B, in) W^T + b; W (out, in), b (out).
void linear_forward(cublasHandle_t handle, const float* x, const float* w, const float* b,
                    size_t batch, size_t in, size_t out, float* y, cudaStream_t stream);

// dw (out, in) += dy^T x; db (out) += column sums of dy; dx (B, in) = dy W when dx != nullptr.
void linear_backward(cublasHandle_t handle, const float* x, const float* w, const float* dy,
                     size_t batch, size_t in, size_t out, float* dw, float* db, float* dx,
                     cudaStream_t stream);

// x (n) = max(x, 0) in place.
void relu_forward(float* x, size_t n, cudaStream_t stream);
// dx (n) *= (y > 0).
void relu_backward(const float* y, float* dx, size_t n, cudaStream_t stream);

// Per row i of logits (B, C): losses[i] = logsumexp(z_i) - z_i[label_i], correct[i] = 1 when
// the first argmax equals the label, and (when dlogits != nullptr) dlogits (B, C) =
// (softmax - onehot) / B. One warp per row; C may be any size.
void softmax_cross_entropy(const float* logits, const int32_t* labels, size_t batch, size_t classes,
                           float* dlogits, float* losses, int32_t* correct, cudaStream_t stream);

}  // namespace geotrain::kernels::cuda
