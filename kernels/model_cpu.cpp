#include "kernels/model_cpu.hpp"

#include <cblas.h>

#include <cmath>

#include "kernels/ops/threads.hpp"

namespace geotrain::kernels::cpu {

void set_blas_threads(int threads) { set_threads(threads); }
namespace {
blasint as_blas(size_t n) { return static_cast<blasint>(n); }
}  // namespace

void linear_forward(const float* x, const float* w, const float* b, size_t batch, size_t in,
                    size_t out, float* y) {
  // Start from the broadcast bias and let the GEMM add x W^T onto it (beta = 1).
  for (size_t i = 0; i < batch; ++i)
    for (size_t j = 0; j < out; ++j) y[i * out + j] = b[j];
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, as_blas(batch), as_blas(out), as_blas(in),
              1.0f, x, as_blas(in), w, as_blas(in), 1.0f, y, as_blas(out));
}

void linear_backward(const float* x, const float* w, const float* dy, size_t batch, size_t in,
                     size_t out, float* dw, float* db, float* dx) {
  // dW (out, in) += dy^T (out, B) x (B, in)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, as_blas(out), as_blas(in), as_blas(batch),
              1.0f, dy, as_blas(out), x, as_blas(in), 1.0f, dw, as_blas(in));
  for (size_t i = 0; i < batch; ++i)
    for (size_t j = 0; j < out; ++j) db[j] += dy[i * out + j];
  if (dx != nullptr)  // dx (B, in) = dy (B, out) W (out, in)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, as_blas(batch), as_blas(in),
                as_blas(out), 1.0f, dy, as_blas(out), w, as_blas(in), 0.0f, dx, as_blas(in));
}

void relu_forward(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void relu_backward(const float* y, float* dx, size_t n) {
  for (size_t i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dx[i] : 0.0f;
}

double softmax_cross_entropy(const float* logits, const int32_t* labels, size_t batch,
                             size_t classes, float* dlogits, size_t* correct) {
  double loss = 0.0;
  size_t hits = 0;
  const float inv_batch = 1.0f / static_cast<float>(batch);
  for (size_t i = 0; i < batch; ++i) {
    const float* z = logits + i * classes;
    size_t arg = 0;
    for (size_t j = 1; j < classes; ++j)
      if (z[j] > z[arg]) arg = j;
    const float zmax = z[arg];
    float sum = 0.0f;
    for (size_t j = 0; j < classes; ++j) sum += std::exp(z[j] - zmax);
    const auto label = static_cast<size_t>(labels[i]);
    // loss_i = log(sum_j exp(z_j)) - z_label, computed around the max for stability.
    loss += static_cast<double>(std::log(sum) + zmax - z[label]);
    hits += arg == label ? 1 : 0;
    if (dlogits != nullptr) {
      float* d = dlogits + i * classes;
      const float inv_sum = 1.0f / sum;
      for (size_t j = 0; j < classes; ++j)
        d[j] = (std::exp(z[j] - zmax) * inv_sum - (j == label ? 1.0f : 0.0f)) * inv_batch;
    }
  }
  if (correct != nullptr) *correct = hits;
  return loss;
}

}  // namespace geotrain::kernels::cpu
