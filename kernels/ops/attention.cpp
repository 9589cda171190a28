#include "kernels/ops/attention.hpp"

#include <cblas.h>

#include <cmath>

#include "kernels/ops/threads.hpp"
#include "kernels/ops/vec_math.hpp"

namespace geotrain::kernels::cpu {

namespace {
blasint bi(size_t n) { return static_cast<blasint>(n); }
}  // namespace

void attention_forward(float* out, float* att, const float* qkv, size_t B, size_t T, size_t C,
                       size_t NH) {
  BlasSingleThreaded one_blas_thread;
  const size_t hd = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  parallel_for(B * NH, [&](size_t task) {
    const size_t b = task / NH, h = task % NH;
    const float* q = qkv + b * T * 3 * C + h * hd;  // (T, hd), row stride 3C
    const float* k = q + C;
    const float* v = q + 2 * C;
    float* p = att + task * T * T;  // (T, T)
    // S = Q K^T / sqrt(hd); the upper triangle is computed too and then masked: one GEMM is
    // faster than T short dot-product rows.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(T), bi(T), bi(hd), scale, q, bi(3 * C),
                k, bi(3 * C), 0.0f, p, bi(T));
    for (size_t t = 0; t < T; ++t) {
      float* row = p + t * T;
      float mx = row[0];
      for (size_t s = 1; s <= t; ++s) mx = row[s] > mx ? row[s] : mx;
      for (size_t s = 0; s <= t; ++s) row[s] = vexp(row[s] - mx);
      float sum = 0.0f;
      for (size_t s = 0; s <= t; ++s) sum += row[s];
      const float inv = 1.0f / sum;  // sum >= 1: the maximum contributes exp(0)
      for (size_t s = 0; s <= t; ++s) row[s] *= inv;
      for (size_t s = t + 1; s < T; ++s) row[s] = 0.0f;
    }
    // out[b, :, h hd : (h+1) hd] (T, hd) = P (T, T) V (T, hd)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(T), bi(hd), bi(T), 1.0f, p, bi(T), v,
                bi(3 * C), 0.0f, out + b * T * C + h * hd, bi(C));
  });
}

void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                        const float* att, size_t B, size_t T, size_t C, size_t NH) {
  BlasSingleThreaded one_blas_thread;
  const size_t hd = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  parallel_for(B * NH, [&](size_t task) {
    const size_t b = task / NH, h = task % NH;
    const float* q = qkv + b * T * 3 * C + h * hd;  // (T, hd), row stride 3C
    const float* k = q + C;
    const float* v = q + 2 * C;
    float* dq = dqkv + b * T * 3 * C + h * hd;
    float* dk = dq + C;
    float* dv = dq + 2 * C;
    const float* d_o = dout + b * T * C + h * hd;  // (T, hd), row stride C
    const float* p = att + task * T * T;
    float* ds = datt + task * T * T;
    // dP (T, T) = dO (T, hd) V^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(T), bi(T), bi(hd), 1.0f, d_o, bi(C), v,
                bi(3 * C), 0.0f, ds, bi(T));
    // dS = P * (dP - sum_s P dP) * scale, in place; zero above the diagonal (P is 0 there).
    for (size_t t = 0; t < T; ++t) {
      const float* pr = p + t * T;
      float* dr = ds + t * T;
      float dot = 0.0f;
      for (size_t s = 0; s <= t; ++s) dot += pr[s] * dr[s];
      for (size_t s = 0; s <= t; ++s) dr[s] = pr[s] * (dr[s] - dot) * scale;
      for (size_t s = t + 1; s < T; ++s) dr[s] = 0.0f;
    }
    // dQ = dS K;  dK = dS^T Q;  dV = P^T dO   (each (T, hd), row stride 3C)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(T), bi(hd), bi(T), 1.0f, ds, bi(T), k,
                bi(3 * C), 0.0f, dq, bi(3 * C));
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(T), bi(hd), bi(T), 1.0f, ds, bi(T), q,
                bi(3 * C), 0.0f, dk, bi(3 * C));
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(T), bi(hd), bi(T), 1.0f, p, bi(T), d_o,
                bi(C), 0.0f, dv, bi(3 * C));
  });
}

}  // namespace geotrain::kernels::cpu
