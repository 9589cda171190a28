// Fully connected layer in nn.Linear's layout, over OpenBLAS cblas_sgemm (row-major).
//
//   forward:  out (N, OC) = inp (N, C) W^T + bias,   W (OC, C), bias (OC) or null
//   backward: dinp (N, C) = dout W  (OVERWRITTEN; skipped when dinp is null)
//             dW (OC, C) += dout^T inp;   dbias (OC) += sum over rows of dout (when not null)
// The GEMMs are cut into blocks whose bounds depend on the shapes only (kRowBlock rows of out and
// dinp, kRowBlock / 2 rows of dW), each block one single-threaded sgemm, the blocks spread over
// up to threads() threads: each element is computed by one call in one fixed order, so results
// are bit-identical for any thread count. (128-row blocks cost ~2% against one whole sgemm.)
#pragma once

#include <cstddef>

namespace geotrain::kernels::cpu {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, size_t N,
                    size_t C, size_t OC);

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, size_t N, size_t C, size_t OC);

}  // namespace geotrain::kernels::cpu
