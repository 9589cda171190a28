#include "kernels/ops/newton_schulz.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"

namespace geotrain::kernels::cpu {

namespace {
blasint bi(size_t n) { return static_cast<blasint>(n); }
}  // namespace

void newton_schulz5(const float* g, float* out, size_t rows, size_t cols, int steps) {
  GT_REQUIRE(rows > 0 && cols > 0, "newton_schulz5: a {} x {} matrix", rows, cols);
  GT_REQUIRE(steps >= 1, "newton_schulz5: {} steps, at least 1", steps);
  const bool tall = rows > cols;
  const size_t r = tall ? cols : rows, c = tall ? rows : cols;  // X is (r, c), r <= c
  std::vector<float> x(r * c), y(r * c), a(r * r), b(r * r);

  // X_0 = G / (||G||_F + 1e-7) (the norm does not change under the transpose).
  double sum_sq = 0;
  for (size_t i = 0; i < rows * cols; ++i) sum_sq += static_cast<double>(g[i]) * g[i];
  const float denom = static_cast<float>(std::sqrt(sum_sq)) + 1e-7f;
  if (tall) {
    for (size_t i = 0; i < rows; ++i)
      for (size_t j = 0; j < cols; ++j) x[j * rows + i] = g[i * cols + j] / denom;
  } else {
    for (size_t i = 0; i < rows * cols; ++i) x[i] = g[i] / denom;
  }

  for (int s = 0; s < steps; ++s) {
    // A (r, r) = X X^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(r), bi(r), bi(c), 1.0f, x.data(), bi(c),
                x.data(), bi(c), 0.0f, a.data(), bi(r));
    // B (r, r) = b A + c A A: start from A and let the GEMM scale it by b.
    std::copy(a.begin(), a.end(), b.begin());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(r), bi(r), bi(r), kNewtonSchulzC,
                a.data(), bi(r), a.data(), bi(r), kNewtonSchulzB, b.data(), bi(r));
    // X (r, c) = a X + B X, into y, then swapped in.
    std::copy(x.begin(), x.end(), y.begin());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(r), bi(c), bi(r), 1.0f, b.data(),
                bi(r), x.data(), bi(c), kNewtonSchulzA, y.data(), bi(c));
    x.swap(y);
  }

  if (tall) {
    for (size_t i = 0; i < rows; ++i)
      for (size_t j = 0; j < cols; ++j) out[i * cols + j] = x[j * rows + i];
  } else {
    std::copy(x.begin(), x.end(), out);
  }
}

}  // namespace geotrain::kernels::cpu
