#include "kernels/powersgd_cpu.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace geotrain::kernels::cpu {

void powersgd_left(const float* m, const float* q, size_t rows, size_t cols, size_t r, float* p) {
  std::vector<float> acc(r);
  for (size_t i = 0; i < rows; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    const float* row = m + i * cols;
    for (size_t j = 0; j < cols; ++j) {
      const float v = row[j];
      const float* qj = q + j * r;
      for (size_t k = 0; k < r; ++k) acc[k] += v * qj[k];
    }
    std::copy(acc.begin(), acc.end(), p + i * r);
  }
}

void powersgd_right(const float* m, const float* p, size_t rows, size_t cols, size_t r, float* q) {
  std::fill(q, q + cols * r, 0.0f);
  for (size_t i = 0; i < rows; ++i) {
    const float* row = m + i * cols;
    const float* pi = p + i * r;
    for (size_t j = 0; j < cols; ++j) {
      const float v = row[j];
      float* qj = q + j * r;
      for (size_t k = 0; k < r; ++k) qj[k] += v * pi[k];
    }
  }
}

size_t powersgd_orthonormalise(float* p, size_t rows, size_t r) {
  std::vector<double> col(rows);
  size_t kept = 0;
  for (size_t k = 0; k < r; ++k) {
    double start = 0.0;
    for (size_t i = 0; i < rows; ++i) {
      col[i] = p[i * r + k];
      start += col[i] * col[i];
    }
    // Take out the earlier (orthonormal or zero) columns, one at a time: modified Gram-Schmidt.
    for (size_t e = 0; e < k; ++e) {
      double dot = 0.0;
      for (size_t i = 0; i < rows; ++i) dot += col[i] * p[i * r + e];
      for (size_t i = 0; i < rows; ++i) col[i] -= dot * p[i * r + e];
    }
    double norm2 = 0.0;
    for (size_t i = 0; i < rows; ++i) norm2 += col[i] * col[i];
    const bool zero = !(norm2 > 0.0) || norm2 <= 1e-10 * start;
    const double scale = zero ? 0.0 : 1.0 / std::sqrt(norm2);
    for (size_t i = 0; i < rows; ++i) p[i * r + k] = static_cast<float>(col[i] * scale);
    if (!zero) ++kept;
  }
  return kept;
}

void powersgd_expand(const float* p, const float* q, size_t rows, size_t cols, size_t r, float* y,
                     bool add) {
  for (size_t i = 0; i < rows; ++i) {
    const float* pi = p + i * r;
    float* out = y + i * cols;
    for (size_t j = 0; j < cols; ++j) {
      const float* qj = q + j * r;
      float s = 0.0f;
      for (size_t k = 0; k < r; ++k) s += pi[k] * qj[k];
      out[j] = add ? out[j] + s : s;
    }
  }
}

}  // namespace geotrain::kernels::cpu
