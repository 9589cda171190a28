// The local optimizer step on a GPU: the CUDA twins of worker/training/optimizer.cpp's SGD and
// AdamW (PyTorch's update rules, the same arithmetic in fp32), fused with the gradient's scaling
// (the average over micro-batches and workers, times the clipping coefficient), and the squared
// global gradient norm the anomaly guard and clipping read.
//
// Launches are asynchronous on `stream`; pointers are device pointers, borrowed. Elementwise, one
// thread per parameter with a grid stride. Plain declarations: includable from host C++.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace geotrain::kernels::cuda {

struct AdamWStep {
  float lr = 0, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0;
  float bias_correction1 = 1;       // 1 - beta1^t
  float bias_correction2_sqrt = 1;  // sqrt(1 - beta2^t)
  float grad_scale = 1;             // g = grad * grad_scale
};

// p *= 1 - lr wd (where decay_mask is 1, or everywhere when it is null); m, v updated; p -= lr /
// bc1 * m / (sqrt(v) / sqrt(bc2) + eps). When p_copy is not null it receives the new p in bf16
// (the weights the bf16 GEMMs read).
void adamw_step(float* p, float* m, float* v, const float* grad, const uint8_t* decay_mask,
                size_t n, const AdamWStep& s, __nv_bfloat16* p_copy, cudaStream_t stream);

struct SgdStep {
  float lr = 0, momentum = 0, weight_decay = 0;
  bool nesterov = false;
  bool first = false;  // the first step: the momentum buffer starts as the gradient
  float grad_scale = 1;
};
// g = grad * grad_scale + wd p (masked); with momentum, m = first ? g : mu m + g and g = nesterov ?
// g + mu m : m; p -= lr g. m may be null when momentum is 0.
void sgd_step(float* p, float* m, const float* grad, const uint8_t* decay_mask, size_t n,
              const SgdStep& s, __nv_bfloat16* p_copy, cudaStream_t stream);

// *out = sum of x^2 over n (double; *out is overwritten). Inf or NaN anywhere makes it non-finite.
void sum_of_squares(double* out, const float* x, size_t n, cudaStream_t stream);

}  // namespace geotrain::kernels::cuda
