// The GPT's ops on a GPU: the CUDA twins of kernels/ops/*.hpp (same shapes and contracts), for
// activations of type T = float (fp32) or __nv_bfloat16 (bf16 mixed precision). Each op's kernels
// and launchers live beside its CPU twin, in kernels/ops/<op>.cu.
//
// llm.c style: each launcher checks what it can see (sizes that must fit an int, a row that must
// fit a block), computes the grid, launches on `stream` and checks cudaGetLastError (SystemError),
// InputError on a bad shape. Launches are asynchronous; results are ready after the stream is
// synchronised. All pointers are device pointers, borrowed. Row-major, as on the CPU.
//
// Precision contract: activations and weights are read as T; statistics (LayerNorm mean/rstd,
// softmax sums, losses) are computed and kept in fp32; parameter gradients are fp32 and
// ACCUMULATED (+=) with atomics where rows are reduced (so their last bits depend on the order
// the atomics land: fp32 results match the CPU to ~1e-5 relative, not bit for bit).
// The GEMMs are not here: models/gpt_cuda.cpp runs them through cuBLASLt (linear layers) and
// cuBLAS strided batched GEMMs (attention). Plain declarations: includable from host C++.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace geotrain::kernels::cuda {

// out (B, T, C) = wte[tokens] + wpe[t]. wte (V, C), wpe (>= T, C) as T; tokens (B, T) in range.
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, size_t B,
                       size_t T_, size_t C, cudaStream_t stream);
// dwte[tokens[b, t]] += dout[b, t]; dwpe[t] += sum_b dout[b, t]. Gradients fp32 (atomics).
template <typename T>
void embedding_backward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens, size_t B,
                        size_t T_, size_t C, cudaStream_t stream);

// LayerNorm (eps 1e-5, biased variance): one warp per row. mean, rstd (N) fp32 are written.
template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* x, const T* w, const T* b,
                       size_t N, size_t C, cudaStream_t stream);
// dx += ...; dw, db (C, fp32) += ... (shared-memory partials per block, then atomics).
template <typename T>
void layernorm_backward(T* dx, float* dw, float* db, const T* dout, const T* x, const T* w,
                        const float* mean, const float* rstd, size_t N, size_t C,
                        cudaStream_t stream);

// GELU, tanh approximation. forward: out = gelu(x); backward: dx = gelu'(x) * dout (dx may
// alias dout).
template <typename T>
void gelu_forward(T* out, const T* x, size_t n, cudaStream_t stream);
template <typename T>
void gelu_backward(T* dx, const T* x, const T* dout, size_t n, cudaStream_t stream);

// out = a + b, elementwise.
template <typename T>
void residual_forward(T* out, const T* a, const T* b, size_t n, cudaStream_t stream);

// dbias (OC, fp32) += sum over the N rows of dout (N, OC), in a fixed order (the same on every
// run). scratch: bias_backward_scratch(N, OC) floats of device memory, overwritten.
size_t bias_backward_scratch(size_t N, size_t OC);
template <typename T>
void bias_backward(float* dbias, const T* dout, size_t N, size_t OC, float* scratch,
                   cudaStream_t stream);

// Attention's layout changes: qkv (B, T, 3, NH, hs) <-> q, k, v (B, NH, T, hs) each.
template <typename T>
void attention_permute(T* q, T* k, T* v, const T* qkv, size_t B, size_t T_, size_t NH, size_t hs,
                       cudaStream_t stream);
template <typename T>
void attention_permute_backward(T* dqkv, const T* dq, const T* dk, const T* dv, size_t B, size_t T_,
                                size_t NH, size_t hs, cudaStream_t stream);
// y (B, NH, T, hs) -> out (B, T, NH, hs), and its backward.
template <typename T>
void attention_unpermute(T* out, const T* y, size_t B, size_t T_, size_t NH, size_t hs,
                         cudaStream_t stream);
template <typename T>
void attention_unpermute_backward(T* dy, const T* dout, size_t B, size_t T_, size_t NH, size_t hs,
                                  cudaStream_t stream);
// Causal softmax of scale * scores, per row t of each (B NH) (T, T) matrix: att[t, s] for s <= t,
// 0 for s > t; max-subtracted. scores fp32, att T. One warp per row; `rows` = B NH T.
template <typename T>
void causal_softmax(T* att, const float* scores, float scale, size_t rows, size_t T_,
                    cudaStream_t stream);
// dscores[t, s] = scale * att (datt - sum_s att datt) for s <= t, 0 above the diagonal.
template <typename T>
void causal_softmax_backward(T* dscores, const float* datt, const T* att, float scale, size_t rows,
                             size_t T_, cudaStream_t stream);

// Softmax cross-entropy over V columns of rows `ld` apart (ld >= V: a padded vocabulary keeps the
// GEMMs aligned), one block per row: losses[r] (fp32), correct[r] (first argmax == target), and,
// when dlogits is not null, dlogits = (softmax - onehot) * dloss (may alias logits: each row is
// read whole before it is written) and its padding columns V..ld-1 = 0, so that the head's
// backward GEMM may run over all ld columns (aligned) without the padding contributing.
template <typename T>
void cross_entropy(float* losses, int32_t* correct, T* dlogits, const T* logits,
                   const int32_t* targets, size_t N, size_t V, size_t ld, float dloss,
                   cudaStream_t stream);

// out (n, T) = in (n, fp32), rounded to nearest.
template <typename T>
void cast_from_float(T* out, const float* in, size_t n, cudaStream_t stream);

// sums[0] += sum of losses (N, fp32) in double; sums[1] += sum of correct (N) as a double.
void sum_loss(double* sums, const float* losses, const int32_t* correct, size_t N,
              cudaStream_t stream);

}  // namespace geotrain::kernels::cuda
