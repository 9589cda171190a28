#include "kernels/ops/residual.hpp"

#include "kernels/ops/threads.hpp"

namespace geotrain::kernels::cpu {

namespace {
constexpr size_t kBlock = 16384;  // elements per task
size_t blocks_of(size_t n) { return (n + kBlock - 1) / kBlock; }
}  // namespace

void residual_forward(float* out, const float* a, const float* b, size_t N) {
  parallel_for(blocks_of(N), [&](size_t blk) {
    const size_t end = (blk + 1) * kBlock < N ? (blk + 1) * kBlock : N;
    for (size_t i = blk * kBlock; i < end; ++i) out[i] = a[i] + b[i];
  });
}

void residual_backward(float* da, float* db, const float* dout, size_t N) {
  parallel_for(blocks_of(N), [&](size_t blk) {
    const size_t end = (blk + 1) * kBlock < N ? (blk + 1) * kBlock : N;
    for (size_t i = blk * kBlock; i < end; ++i) {
      da[i] += dout[i];
      db[i] += dout[i];
    }
  });
}

}  // namespace geotrain::kernels::cpu
