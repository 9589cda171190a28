#include "kernels/ops/layernorm.hpp"

#include <cmath>

#include "kernels/ops/threads.hpp"

namespace geotrain::kernels::cpu {

namespace {
constexpr size_t kRowBlock = 32;  // rows per task
}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w,
                       const float* b, size_t N, size_t C) {
  parallel_for((N + kRowBlock - 1) / kRowBlock, [&](size_t blk) {
    for (size_t r = blk * kRowBlock; r < N && r < (blk + 1) * kRowBlock; ++r) {
      const float* xr = x + r * C;  // (C)
      double sum = 0.0;
      for (size_t c = 0; c < C; ++c) sum += xr[c];
      const double m = sum / static_cast<double>(C);
      double sq = 0.0;
      for (size_t c = 0; c < C; ++c) sq += (xr[c] - m) * (xr[c] - m);
      const auto s =
          static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(C) + kLayerNormEps));
      const auto mf = static_cast<float>(m);
      float* o = out + r * C;  // (C)
      for (size_t c = 0; c < C; ++c) o[c] = (xr[c] - mf) * s * w[c] + b[c];
      mean[r] = mf;
      rstd[r] = s;
    }
  });
}

void layernorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x,
                        const float* w, const float* mean, const float* rstd, size_t N, size_t C) {
  // One loop over two kinds of task: [0, row_blocks) add into dx, one block of rows each; the
  // rest own a block of channels of dw and db and sum every row into them in order.
  constexpr size_t kChannelBlock = 16;
  const size_t row_blocks = (N + kRowBlock - 1) / kRowBlock;
  parallel_for(row_blocks + (C + kChannelBlock - 1) / kChannelBlock, [&](size_t blk) {
    if (blk < row_blocks) {
      for (size_t r = blk * kRowBlock; r < N && r < (blk + 1) * kRowBlock; ++r) {
        const float* xr = x + r * C;
        const float* d = dout + r * C;
        const float m = mean[r], s = rstd[r];
        double g_mean = 0.0, gx_mean = 0.0;
        for (size_t c = 0; c < C; ++c) {
          const float g = d[c] * w[c];
          g_mean += g;
          gx_mean += g * ((xr[c] - m) * s);
        }
        const auto gm = static_cast<float>(g_mean / static_cast<double>(C));
        const auto gxm = static_cast<float>(gx_mean / static_cast<double>(C));
        float* o = dx + r * C;
        for (size_t c = 0; c < C; ++c) {
          const float xhat = (xr[c] - m) * s;
          o[c] += s * (d[c] * w[c] - gm - xhat * gxm);
        }
      }
    } else {
      const size_t c0 = (blk - row_blocks) * kChannelBlock;
      const size_t c1 = c0 + kChannelBlock < C ? c0 + kChannelBlock : C;
      for (size_t r = 0; r < N; ++r) {
        const float* xr = x + r * C;
        const float* d = dout + r * C;
        const float m = mean[r], s = rstd[r];
        for (size_t c = c0; c < c1; ++c) {
          dw[c] += d[c] * ((xr[c] - m) * s);
          db[c] += d[c];
        }
      }
    }
  });
}

}  // namespace geotrain::kernels::cpu
