#include "kernels/ops/gelu.hpp"

#include "kernels/ops/threads.hpp"
#include "kernels/ops/vec_math.hpp"

namespace geotrain::kernels::cpu {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr size_t kBlock = 16384;  // elements per task: long enough to vectorise, many tasks
size_t blocks_of(size_t n) { return (n + kBlock - 1) / kBlock; }
}  // namespace

void gelu_forward(float* out, const float* inp, size_t N) {
  parallel_for(blocks_of(N), [&](size_t blk) {
    const size_t end = (blk + 1) * kBlock < N ? (blk + 1) * kBlock : N;
    for (size_t i = blk * kBlock; i < end; ++i) {
      const float x = inp[i];
      const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
      out[i] = 0.5f * x * (1.0f + vtanh(u));
    }
  });
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t N) {
  parallel_for(blocks_of(N), [&](size_t blk) {
    const size_t end = (blk + 1) * kBlock < N ? (blk + 1) * kBlock : N;
    for (size_t i = blk * kBlock; i < end; ++i) {
      const float x = inp[i];
      const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
      const float th = vtanh(u);
      const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
      dinp[i] = dout[i] * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du);
    }
  });
}

}  // namespace geotrain::kernels::cpu
