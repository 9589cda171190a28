// Causal multi-head self-attention from the fused q, k, v projection.
//
//   qkv (B, T, 3C): q = channels [0, C), k = [C, 2C), v = [2C, 3C); head h uses channels
//   [h hd, (h+1) hd) of each, hd = C / NH.
//   forward, per (b, h):  S = Q K^T / sqrt(hd)              (T, T)
//                         P = softmax over s <= t of S[t, s] (max-subtracted; P[t, s > t] = 0)
//                         out[b, :, h hd : (h+1) hd] = P V  (T, hd)
//   backward, per (b, h): dP = dO V^T;  dS = P * (dP - rowsum(P * dP)) / sqrt(hd)
//                         dQ = dS K;  dK = dS^T Q;  dV = P^T dO
// Shapes: out, dout (B, T, C); att, datt (B, NH, T, T): att holds P, written by forward and read
// by backward; datt is backward's scratch. dqkv (B, T, 3C) is OVERWRITTEN (every element).
// Each (b, h) is one task (QK^T, PV and the backward products are single-threaded sgemms, see
// threads.hpp), tasks spread over up to threads() threads and write disjoint outputs, so results
// are bit-identical for any thread count. Finite for any finite input small enough that S is
// finite: the softmax subtracts the row maximum.
#pragma once

#include <cstddef>

namespace geotrain::kernels::cpu {

void attention_forward(float* out, float* att, const float* qkv, size_t B, size_t T, size_t C,
                       size_t NH);

void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                        const float* att, size_t B, size_t T, size_t C, size_t NH);

}  // namespace geotrain::kernels::cpu
