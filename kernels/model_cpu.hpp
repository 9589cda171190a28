// CPU model ops: the fully connected layer (OpenBLAS cblas_sgemm), bias, ReLU and the fused
// softmax cross-entropy, the reference twins of kernels/model_cuda.cuh.
//
// Layout is row-major throughout, PyTorch's convention for nn.Linear: a layer with `in` inputs
// and `out` outputs has weight (out, in) and bias (out), and computes y = x W^T + b. Gradient
// functions accumulate (+=) into dW and db, so gradient accumulation over micro-batches is the
// caller zeroing once and calling backward several times. Shapes are the caller's contract
// (models/ checks them once); these functions do not allocate and are single-threaded except
// inside OpenBLAS. Pointers borrow.
#pragma once

#include <cstddef>
#include <cstdint>

namespace geotrain::kernels::cpu {

// Threads OpenBLAS may use for one GEMM. Workers set 1: a region already runs one process per
// core, and small GEMMs lose more to OpenBLAS's thread hand-offs than they gain. An alias of
// set_threads (kernels/ops/threads.hpp), which also sets the GPT ops' threads.
void set_blas_threads(int threads);

// Subnormal floats flushed to zero on the calling thread and the threads it starts afterwards:
// declared with its reasons in kernels/ops/threads.hpp. Trainers call it before set_blas_threads.
bool flush_denormals();

// y (B, out) = x (B, in) W^T (W: (out, in)) + b (out).
void linear_forward(const float* x, const float* w, const float* b, size_t batch, size_t in,
                    size_t out, float* y);

// Given dy (B, out): dw (out, in) += dy^T x; db (out) += column sums of dy; and, when dx is not
// null, dx (B, in) = dy W (overwritten).
void linear_backward(const float* x, const float* w, const float* dy, size_t batch, size_t in,
                     size_t out, float* dw, float* db, float* dx);

// In place: x (n) = max(x, 0).
void relu_forward(float* x, size_t n);
// dx (n) *= (y > 0), with y the ReLU's output.
void relu_backward(const float* y, float* dx, size_t n);

// Fused softmax + cross-entropy over logits (B, C) with labels (B) in [0, C).
// Writes dlogits (B, C) = (softmax - onehot) / B, the gradient of the batch-mean loss, when
// dlogits is not null. Returns the summed (not mean) loss; *correct gets the number of rows
// whose argmax (first maximum) equals the label.
double softmax_cross_entropy(const float* logits, const int32_t* labels, size_t batch,
                             size_t classes, float* dlogits, size_t* correct);

}  // namespace geotrain::kernels::cpu
