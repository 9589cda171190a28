// LayerNorm over the last dimension, PyTorch's nn.LayerNorm: biased variance, eps inside the
// square root.
//
//   forward:  mean[r] = mean(x[r, :]);  rstd[r] = 1 / sqrt(var(x[r, :]) + eps)
//             out[r, c] = (x[r, c] - mean[r]) * rstd[r] * w[c] + b[c]
//   backward: with xhat = (x - mean) * rstd and g = dout * w,
//             dx[r, :] += rstd[r] * (g - mean(g) - xhat * mean(g * xhat))
//             dw += sum_r dout * xhat;  db += sum_r dout
// Shapes: x, out, dout, dx (N, C); w, b, dw, db (C); mean, rstd (N), written by forward and read
// by backward. Backward ACCUMULATES into dx (the residual stream's gradient), dw and db. Rows
// are split between up to threads() threads; dw and db are reduced over rows in order, so the
// results are bit-identical for any thread count. Statistics are accumulated in double.
#pragma once

#include <cstddef>

namespace geotrain::kernels::cpu {

inline constexpr float kLayerNormEps = 1e-5f;

void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w,
                       const float* b, size_t N, size_t C);

void layernorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x,
                        const float* w, const float* mean, const float* rstd, size_t N, size_t C);

}  // namespace geotrain::kernels::cpu
