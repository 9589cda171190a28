// PowerSGD's arithmetic (Vogels, Karimireddy and Jaggi 2019, "PowerSGD: Practical Low-Rank
// Gradient Compression"), on the CPU: one power iteration of a rows x cols matrix M (row-major)
// against r vectors, and the product that expands the factors again.
//
//   P = M Q          (rows x r)
//   P = orth(P)      (its columns orthonormal; modified Gram-Schmidt)
//   Q = M^T P        (cols x r)
//   M ~ P Q^T
//
// Every factor is row-major (P[i * r + k], Q[j * r + k]). Each output element is summed in one
// fixed order that depends on the shapes only, so encoder and decoder agree bit for bit on every
// machine that runs this code. The products are thin (r is small: a matrix times r vectors,
// bound by reading M), so they are loops over M's rows rather than GEMM calls: no BLAS threads
// in the servers that decode them.
#pragma once

#include <cstddef>

namespace geotrain::kernels::cpu {

// p (rows x r) = m (rows x cols) q (cols x r).
void powersgd_left(const float* m, const float* q, size_t rows, size_t cols, size_t r, float* p);
// q (cols x r) = m^T p, p (rows x r).
void powersgd_right(const float* m, const float* p, size_t rows, size_t cols, size_t r, float* q);
// Orthonormalises the r columns of p (rows x r) in order, in double precision; a column with
// nothing left after the earlier ones are taken out (its norm at most 1e-5 of its own: within
// float rounding of their span) becomes zero. Returns the number of columns left non-zero.
size_t powersgd_orthonormalise(float* p, size_t rows, size_t r);
// y (rows x cols) = p q^T, or += with `add`.
void powersgd_expand(const float* p, const float* q, size_t rows, size_t cols, size_t r, float* y,
                     bool add);

}  // namespace geotrain::kernels::cpu
