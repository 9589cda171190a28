// Newton-Schulz orthogonalisation of one matrix: Muon's zeropower_via_newtonschulz5 (Keller
// Jordan, github.com/KellerJordan/Muon, muon.py), in fp32 on the CPU over OpenBLAS cblas_sgemm.
//
//   out (rows, cols) = X_steps, from X_0 = G / (||G||_F + 1e-7), G (rows, cols) row-major,
//   one step:  A = X X^T;  B = b A + c A A;  X = a X + B X,   (a, b, c) = (3.4445, -4.7750, 2.0315)
// When rows > cols the iteration runs on G^T (so that A is the smaller Gram matrix) and the
// result is transposed back, as the reference does. For G = U S V^T the result is U p(S') V^T,
// S' = S / (||G||_F + 1e-7), with p the quintic a s + b s^3 + c s^5 composed `steps` times: the
// coefficients buy speed with exactness, so after 5 steps singular values that were not tiny
// against ||G||_F land in about [0.7, 1.2] rather than at 1 (the reference's own remark).
// The reference casts to bf16 on the GPU; this is fp32, the precision of the parity test.
//
// `out` may be `g` (the input is read into a scratch copy first). Runs OpenBLAS in the calling
// thread at its current thread count: callers that orthogonalise several matrices at once run
// each in its own parallel_for task under BlasSingleThreaded (kernels/ops/threads.hpp), which
// makes the results independent of the thread count. Blocks; no shared state.
#pragma once

#include <cstddef>

namespace geotrain::kernels::cpu {

inline constexpr float kNewtonSchulzA = 3.4445f, kNewtonSchulzB = -4.7750f,
                       kNewtonSchulzC = 2.0315f;

// InputError when rows or cols is 0 or steps < 1.
void newton_schulz5(const float* g, float* out, size_t rows, size_t cols, int steps);

}  // namespace geotrain::kernels::cpu
