// Residual connection: out = a + b.
//
//   forward:  out (N) = a (N) + b (N)   (out may alias a or b)
//   backward: da (N) += dout;  db (N) += dout   (ACCUMULATES: the gradient flows unchanged into
//             both branches). Gpt passes its residual gradient on in place instead of calling
//             this (the same arithmetic with no copy); the op is here for completeness and tests.
// Elementwise over up to threads() threads; bit-identical for any count.
#pragma once

#include <cstddef>

namespace geotrain::kernels::cpu {

void residual_forward(float* out, const float* a, const float* b, size_t N);

void residual_backward(float* da, float* db, const float* dout, size_t N);

}  // namespace geotrain::kernels::cpu
