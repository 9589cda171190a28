#include "kernels/ops/matmul.hpp"

#include <cblas.h>

#include "kernels/ops/threads.hpp"

namespace geotrain::kernels::cpu {

namespace {
constexpr size_t kRowBlock = 128;
blasint bi(size_t n) { return static_cast<blasint>(n); }
size_t blocks_of(size_t n, size_t block) { return (n + block - 1) / block; }
}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, size_t N,
                    size_t C, size_t OC) {
  BlasSingleThreaded one_blas_thread;
  parallel_for(blocks_of(N, kRowBlock), [&](size_t blk) {
    const size_t r0 = blk * kRowBlock;
    const size_t rows = r0 + kRowBlock < N ? kRowBlock : N - r0;
    float* o = out + r0 * OC;  // (rows, OC)
    // Start from the broadcast bias and let the GEMM add inp W^T onto it (beta = 1).
    for (size_t r = 0; r < rows; ++r)
      for (size_t j = 0; j < OC; ++j) o[r * OC + j] = bias != nullptr ? bias[j] : 0.0f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(rows), bi(OC), bi(C), 1.0f,
                inp + r0 * C, bi(C), weight, bi(C), 1.0f, o, bi(OC));
  });
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, size_t N, size_t C, size_t OC) {
  BlasSingleThreaded one_blas_thread;
  constexpr size_t kWeightBlock = kRowBlock / 2;
  // One loop over both products: tasks [0, input_blocks) are dinp's row blocks, the rest dW's.
  const size_t input_blocks = dinp != nullptr ? blocks_of(N, kRowBlock) : 0;
  parallel_for(input_blocks + blocks_of(OC, kWeightBlock), [&](size_t blk) {
    if (blk < input_blocks) {
      const size_t r0 = blk * kRowBlock;
      const size_t rows = r0 + kRowBlock < N ? kRowBlock : N - r0;
      // dinp (rows, C) = dout (rows, OC) W (OC, C)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(rows), bi(C), bi(OC), 1.0f,
                  dout + r0 * OC, bi(OC), weight, bi(C), 0.0f, dinp + r0 * C, bi(C));
    } else {
      const size_t j0 = (blk - input_blocks) * kWeightBlock;
      const size_t cols = j0 + kWeightBlock < OC ? kWeightBlock : OC - j0;
      // dW[j0 : j0 + cols] (cols, C) += dout[:, j0 : j0 + cols]^T (cols, N) inp (N, C)
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(cols), bi(C), bi(N), 1.0f, dout + j0,
                  bi(OC), inp, bi(C), 1.0f, dweight + j0 * C, bi(C));
      if (dbias != nullptr)
        for (size_t r = 0; r < N; ++r)
          for (size_t j = j0; j < j0 + cols; ++j) dbias[j] += dout[r * OC + j];
    }
  });
}

}  // namespace geotrain::kernels::cpu
