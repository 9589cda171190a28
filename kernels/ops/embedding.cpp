#include "kernels/ops/embedding.hpp"

#include "kernels/ops/threads.hpp"

namespace geotrain::kernels::cpu {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       size_t B, size_t T, size_t C) {
  parallel_for(B, [&](size_t b) {
    for (size_t t = 0; t < T; ++t) {
      const float* e = wte + static_cast<size_t>(tokens[b * T + t]) * C;  // (C)
      const float* p = wpe + t * C;                                       // (C)
      float* o = out + (b * T + t) * C;                                   // (C)
      for (size_t c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
  });
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        size_t B, size_t T, size_t C) {
  // Tokens repeat, so rows of dwte cannot be split between threads; channels can. Each thread
  // owns a fixed block of channels and walks every (b, t) in order.
  constexpr size_t kBlock = 16;
  parallel_for((C + kBlock - 1) / kBlock, [&](size_t blk) {
    const size_t c0 = blk * kBlock;
    const size_t c1 = c0 + kBlock < C ? c0 + kBlock : C;
    for (size_t b = 0; b < B; ++b)
      for (size_t t = 0; t < T; ++t) {
        const float* d = dout + (b * T + t) * C;
        float* e = dwte + static_cast<size_t>(tokens[b * T + t]) * C;
        float* p = dwpe + t * C;
        for (size_t c = c0; c < c1; ++c) {
          e[c] += d[c];
          p[c] += d[c];
        }
      }
  });
}

}  // namespace geotrain::kernels::cpu
