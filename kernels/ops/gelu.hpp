// GELU, tanh approximation (GPT-2's; PyTorch's nn.GELU(approximate="tanh")):
//
//   forward:  out = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   backward: dinp = dout * (0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 0.044715
//   x^2))
// Shapes: inp, out, dout, dinp (N). dinp is OVERWRITTEN and may alias dout (in place). tanh is
// vtanh (vec_math.hpp, absolute error < 3e-7). Up to threads() threads; elementwise, so
// bit-identical for any count.
#pragma once

#include <cstddef>

namespace geotrain::kernels::cpu {

void gelu_forward(float* out, const float* inp, size_t N);

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t N);

}  // namespace geotrain::kernels::cpu
