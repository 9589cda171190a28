// Token + position embedding, GPT-2's first op.
//
//   forward:  out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]
//   backward: dwte[tokens[b, t], :] += dout[b, t, :];  dwpe[t, :] += sum_b dout[b, t, :]
// Shapes: tokens (B, T), every token in [0, V) (the caller checks); wte (V, C); wpe (>= T, C);
// out and dout (B, T, C). Backward accumulates (+=) into dwte and dwpe. Both use up to
// threads() threads and are bit-identical for any count (dwte is reduced over (b, t) in order).
#pragma once

#include <cstddef>
#include <cstdint>

namespace geotrain::kernels::cpu {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       size_t B, size_t T, size_t C);

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        size_t B, size_t T, size_t C);

}  // namespace geotrain::kernels::cpu
