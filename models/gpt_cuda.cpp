#include "models/gpt_cuda.hpp"

#include <cmath>
#include <type_traits>

#include "core/check_cuda.hpp"
#include "core/error.hpp"
#include "kernels/gpt_cuda.cuh"

namespace geotrain::models {

namespace kg = geotrain::kernels::cuda;
using bf16 = __nv_bfloat16;

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

template <typename X>
cudaDataType_t data_type() {
  return std::is_same_v<X, float> ? CUDA_R_32F : CUDA_R_16BF;
}

// D (m, n, column-major, ldd) = alpha op(A) op(B) + beta D [+ bias (m) broadcast over columns],
// through cuBLASLt with fp32 accumulation. A and B of type ab, D (and bias) of type d.
void lt_matmul(cublasLtHandle_t lt, cudaDataType_t ab, cudaDataType_t d, bool transa, bool transb,
               int m, int n, int k, const void* A, int lda, const void* B, int ldb, void* D,
               int ldd, float beta, const void* bias, void* workspace, cudaStream_t stream) {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  const auto cleanup = [&] {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
  };
  try {
    GT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    GT_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    GT_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (bias != nullptr) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      GT_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
      GT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                     sizeof(bias)));
      GT_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &d, sizeof(d)));
    }
    GT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, ab, transa ? k : m, transa ? m : k, lda));
    GT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, ab, transb ? n : k, transb ? k : n, ldb));
    GT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, d, m, n, ldd));
    GT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws = kWorkspaceBytes;
    GT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    GT_CUBLAS_CHECK(
        cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &heuristic, &found));
    GT_ASSERT(found > 0, "cuBLASLt has no algorithm for m {} n {} k {} (transa {}, transb {})", m,
              n, k, transa, transb);
    const float alpha = 1.0f;
    GT_CUBLAS_CHECK(cublasLtMatmul(lt, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld,
                                   &heuristic.algo, workspace, ws, stream));
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
}

// Per (b, h): C = op(A) op(B), column-major, through cuBLAS with fp32 accumulation.
void batched_gemm(cublasHandle_t blas, cudaDataType_t ab, cudaDataType_t c, bool transa,
                  bool transb, int m, int n, int k, const void* A, int lda, long long sa,
                  const void* B, int ldb, long long sb, void* C, int ldc, long long sc,
                  int batches) {
  const float alpha = 1.0f, beta = 0.0f;
  GT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(blas, transa ? CUBLAS_OP_T : CUBLAS_OP_N,
                                             transb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, A,
                                             ab, lda, sa, B, ab, ldb, sb, &beta, C, c, ldc, sc,
                                             batches, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

}  // namespace

// Activations for batch B (BT = B T, r = mlp_ratio; X = float or bf16; "f" = always fp32):
//   encoded (BT, C); per layer: ln1 (BT, C), ln1_mean, ln1_rstd (BT f), qkv (BT, 3C),
//   att (B, NH, T, T), atty, res2, ln2 (BT, C), ln2_mean, ln2_rstd (BT f), fch, fch_gelu
//   (BT, rC), res3 (BT, C); lnf (BT, C), lnf_mean, lnf_rstd (BT f), logits (BT, Vp),
//   losses (BT f), correct (BT int32).
// Scratch shared by the layers: proj (BT, C); q, k, v, y (B, NH, T, hs); scores (B, NH, T, T f).
// Backward: dres, dln, datty (BT, C), dqkv (BT, 3C), dq, dk, dv, dy (B, NH, T, hs),
//   datt (B, NH, T, T f), dscores (B, NH, T, T), dfch (BT, rC); dlogits are written over logits.
struct GptCuda::Acts {
  struct Layer {
    void *ln1, *qkv, *att, *atty, *res2, *ln2, *fch, *fch_gelu, *res3;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
  };
  void* encoded;
  std::vector<Layer> layers;
  void *lnf, *logits, *proj, *q, *k, *v, *y;
  float *lnf_mean, *lnf_rstd, *losses, *scores, *bias_scratch;
  int32_t* correct;
  void *dres, *dln, *datty, *dqkv, *dq, *dk, *dv, *dy, *dscores, *dfch;
  float* datt;
};

GptCuda::GptCuda(GptConfig config, Precision precision)
    : layout_(config), config_(config), precision_(precision) {
  vocab_padded_ = align_up(config_.vocab, 64);
  uint64_t offset = 0;
  for (const TensorSpec& spec : layout_.tensor_specs()) {
    offsets_.push_back(offset);
    offset += spec.size;
  }
  // The tied head's GEMMs run over the padded vocabulary where the weights allow: an odd row count
  // (50257) makes cuBLASLt fall back to unvectorised kernels, 5x slower (H200, 2026-11-26). The
  // padding rows read the tensors after wte (logits the loss never reads; in backward they meet
  // zeroed dlogits), so this needs Vp - V rows of parameters after wte.
  head_rows_ =
      offsets_[kGptWte] + vocab_padded_ * config_.d_model <= offset ? vocab_padded_ : config_.vocab;
  GT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  GT_CUBLAS_CHECK(cublasCreate(&blas_));
  GT_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
  // fp32 stays fp32: no TF32 in the batched GEMMs either.
  GT_CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
  GT_CUBLAS_CHECK(cublasLtCreate(&lt_));
  workspace_ = DeviceBuffer<char>(kWorkspaceBytes);
  if (precision_ == Precision::kBf16) weights_ = DeviceBuffer<bf16>(layout_.parameter_count());
  sums_ = DeviceBuffer<double>(2);
  GT_CUDA_CHECK(cudaMemsetAsync(sums_.get(), 0, 2 * sizeof(double), stream_));
}

GptCuda::~GptCuda() {
  cublasLtDestroy(lt_);
  cublasDestroy(blas_);
  cudaStreamDestroy(stream_);
}

void GptCuda::refresh_weights(const float* d_params) {
  if (precision_ == Precision::kBf16)
    kg::cast_from_float(weights_.get(), d_params, layout_.parameter_count(), stream_);
}

void GptCuda::upload(const BatchView& view) {
  const size_t batch = view.batch;
  const int32_t* tokens = view.tokens;
  GT_REQUIRE(batch > 0, "gpt (cuda): batch is 0, must be > 0");
  GT_REQUIRE(tokens != nullptr, "gpt (cuda): batch.tokens is null");
  const size_t T = config_.seq_len, row = T + 1;
  host_inputs_.resize(batch * T);
  host_targets_.resize(batch * T);
  for (size_t b = 0; b < batch; ++b)
    for (size_t t = 0; t < T; ++t) {
      for (size_t at : {t, t + 1}) {
        const int32_t tok = tokens[b * row + at];
        GT_REQUIRE(tok >= 0 && static_cast<size_t>(tok) < config_.vocab,
                   "gpt: token {} at row {}, position {} is not in [0, {})", tok, b, at,
                   config_.vocab);
      }
      host_inputs_[b * T + t] = tokens[b * row + t];
      host_targets_[b * T + t] = tokens[b * row + t + 1];
    }
  inputs_.reserve(batch * T);
  targets_.reserve(batch * T);
  // Pageable sources: the copies are staged by the driver and complete before the call returns,
  // so the host vectors may be rewritten by the next call.
  GT_CUDA_CHECK(cudaMemcpyAsync(inputs_.get(), host_inputs_.data(), batch * T * sizeof(int32_t),
                                cudaMemcpyHostToDevice, stream_));
  GT_CUDA_CHECK(cudaMemcpyAsync(targets_.get(), host_targets_.data(), batch * T * sizeof(int32_t),
                                cudaMemcpyHostToDevice, stream_));
  GT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void GptCuda::forward_backward(const float* d_params, const BatchView& batch, float* d_grad,
                               const Model::TensorReady& on_ready) {
  GT_REQUIRE(d_grad != nullptr, "gpt (cuda): forward_backward without a gradient buffer");
  upload(batch);
  if (precision_ == Precision::kBf16)
    run<bf16>(d_params, batch.batch, d_grad, on_ready);
  else
    run<float>(d_params, batch.batch, d_grad, on_ready);
}

void GptCuda::forward(const float* d_params, const BatchView& batch) {
  upload(batch);
  if (precision_ == Precision::kBf16)
    run<bf16>(d_params, batch.batch, nullptr, {});
  else
    run<float>(d_params, batch.batch, nullptr, {});
}

BatchResult GptCuda::take_result() {
  double sums[2] = {0, 0};
  GT_CUDA_CHECK(cudaMemcpyAsync(sums, sums_.get(), sizeof(sums), cudaMemcpyDeviceToHost, stream_));
  GT_CUDA_CHECK(cudaMemsetAsync(sums_.get(), 0, 2 * sizeof(double), stream_));
  GT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  BatchResult r;
  r.loss_sum = sums[0];
  r.correct = static_cast<size_t>(std::llround(sums[1]));
  r.predictions = predictions_;
  predictions_ = 0;
  return r;
}

// Carves the arena for `batch` sequences with activations of `x_bytes` each: two passes,
// counting then handing out 256-byte aligned pointers.
GptCuda::Acts GptCuda::carve(size_t batch, size_t x_bytes) {
  const size_t B = batch, T = config_.seq_len, C = config_.d_model, BT = B * T;
  const size_t NH = config_.heads, Vp = vocab_padded_;
  const size_t H = config_.mlp_ratio * C, att_n = B * NH * T * T;
  Acts a{};
  a.layers.resize(config_.layers);
  for (int pass = 0; pass < 2; ++pass) {
    size_t used = 0;
    char* base = pass == 0 ? nullptr : arena_.get();
    const auto take = [&](size_t elements, size_t bytes_each) -> void* {
      void* p = base == nullptr ? nullptr : base + used;
      used += align_up(elements * bytes_each, 256);
      return p;
    };
    const auto X_ = [&](size_t n) { return take(n, x_bytes); };
    const auto F_ = [&](size_t n) { return static_cast<float*>(take(n, sizeof(float))); };
    a.encoded = X_(BT * C);
    for (auto& l : a.layers) {
      l.ln1 = X_(BT * C);
      l.ln1_mean = F_(BT);
      l.ln1_rstd = F_(BT);
      l.qkv = X_(BT * 3 * C);
      l.att = X_(att_n);
      l.atty = X_(BT * C);
      l.res2 = X_(BT * C);
      l.ln2 = X_(BT * C);
      l.ln2_mean = F_(BT);
      l.ln2_rstd = F_(BT);
      l.fch = X_(BT * H);
      l.fch_gelu = X_(BT * H);
      l.res3 = X_(BT * C);
    }
    a.lnf = X_(BT * C);
    a.lnf_mean = F_(BT);
    a.lnf_rstd = F_(BT);
    a.logits = X_(BT * Vp);
    a.losses = F_(BT);
    a.correct = static_cast<int32_t*>(take(BT, sizeof(int32_t)));
    a.proj = X_(BT * C);
    a.bias_scratch = F_(kg::bias_backward_scratch(BT, std::max(H, 3 * C)));
    a.q = X_(BT * C);
    a.k = X_(BT * C);
    a.v = X_(BT * C);
    a.y = X_(BT * C);
    a.scores = F_(att_n);
    // Backward scratch is always carved, so that evaluation never shrinks what training grew.
    a.dres = X_(BT * C);
    a.dln = X_(BT * C);
    a.datty = X_(BT * C);
    a.dqkv = X_(BT * 3 * C);
    a.dq = X_(BT * C);
    a.dk = X_(BT * C);
    a.dv = X_(BT * C);
    a.dy = X_(BT * C);
    a.datt = F_(att_n);
    a.dscores = X_(att_n);
    a.dfch = X_(BT * H);
    if (pass == 0) arena_.reserve(used);
  }
  return a;
}

// One pass over a batch with activations of type X: its shapes, the weights (fp32 parameters, or
// their bf16 copy), the gradient buffer, and the GEMM helpers that forward() and backward() share.
template <typename X>
struct GptCuda::Pass {
  GptCuda& m;
  Acts& a;
  size_t B, T, C, BT, NH, hs, V, Vp, H, L;
  const X* weights;
  float* d_grad;
  const Model::TensorReady& on_ready;
  cudaStream_t s;
  cudaDataType_t xt = data_type<X>();
  int iBT, iT, ihs, batches;
  long long sT, sTT;
  float scale;

  Pass(GptCuda& model, Acts& acts, size_t batch, const float* d_params, float* grad,
       const Model::TensorReady& ready_cb)
      : m(model), a(acts), d_grad(grad), on_ready(ready_cb), s(model.stream_) {
    const auto& c = m.config_;
    B = batch, T = c.seq_len, C = c.d_model, BT = B * T, NH = c.heads, hs = C / NH;
    V = c.vocab, Vp = m.vocab_padded_, H = c.mlp_ratio * C, L = c.layers;
    if constexpr (std::is_same_v<X, float>)
      weights = d_params;
    else
      weights = m.weights_.get();
    iBT = static_cast<int>(BT), iT = static_cast<int>(T), ihs = static_cast<int>(hs);
    batches = static_cast<int>(B * NH);
    sT = static_cast<long long>(T * hs), sTT = static_cast<long long>(T * T);
    scale = 1.0f / std::sqrt(static_cast<float>(hs));
  }

  const X* W(size_t tensor) const { return weights + m.offsets_[tensor]; }
  float* G(size_t tensor) const { return d_grad + m.offsets_[tensor]; }
  void ready(size_t tensor) const {
    if (on_ready) on_ready(tensor);
  }
  static X* x_(void* p) { return static_cast<X*>(p); }

  // out (BT, OC) = inp (BT, IC) W^T + bias.
  void linear(void* out, const void* inp, const X* w, const X* bias, size_t IC, size_t OC,
              size_t ldo) const {
    lt_matmul(m.lt_, xt, xt, true, false, static_cast<int>(OC), iBT, static_cast<int>(IC), w,
              static_cast<int>(IC), inp, static_cast<int>(IC), out, static_cast<int>(ldo), 0.0f,
              bias, m.workspace_.get(), s);
  }
  // dinp (BT, IC) = dout W (when dinp); dW (fp32) += dout^T inp; dbias += column sums of dout.
  void linear_backward(void* dinp, float* dw, float* dbias, const void* dout, const void* inp,
                       const X* w, size_t IC, size_t OC, size_t ldd) const {
    if (dinp != nullptr)
      lt_matmul(m.lt_, xt, xt, false, false, static_cast<int>(IC), iBT, static_cast<int>(OC), w,
                static_cast<int>(IC), dout, static_cast<int>(ldd), dinp, static_cast<int>(IC), 0.0f,
                nullptr, m.workspace_.get(), s);
    lt_matmul(m.lt_, xt, CUDA_R_32F, false, true, static_cast<int>(IC), static_cast<int>(OC), iBT,
              inp, static_cast<int>(IC), dout, static_cast<int>(ldd), dw, static_cast<int>(IC),
              1.0f, nullptr, m.workspace_.get(), s);
    if (dbias != nullptr)
      kg::bias_backward(dbias, static_cast<const X*>(dout), BT, OC, a.bias_scratch, s);
  }

  // Embedding, the blocks, the final LayerNorm, the tied head and the loss (dlogits over the
  // logits when training).
  void forward(bool grad) {
    kg::embedding_forward(x_(a.encoded), m.inputs_.get(), W(kGptWte), W(kGptWpe), B, T, C, s);
    const void* x = a.encoded;
    for (size_t l = 0; l < L; ++l) {
      Acts::Layer& y = a.layers[l];
      const auto P = [&](GptBlockTensor k) { return W(gpt_block_tensor(l, k)); };
      kg::layernorm_forward(x_(y.ln1), y.ln1_mean, y.ln1_rstd, static_cast<const X*>(x), P(kLn1W),
                            P(kLn1B), BT, C, s);
      linear(y.qkv, y.ln1, P(kQkvW), P(kQkvB), C, 3 * C, 3 * C);
      // Attention: S = Q K^T (fp32), P = causal softmax(S / sqrt(hs)), Y = P V.
      kg::attention_permute(x_(a.q), x_(a.k), x_(a.v), x_(y.qkv), B, T, NH, hs, s);
      batched_gemm(m.blas_, xt, CUDA_R_32F, true, false, iT, iT, ihs, a.k, ihs, sT, a.q, ihs, sT,
                   a.scores, iT, sTT, batches);
      kg::causal_softmax(x_(y.att), a.scores, scale, B * NH * T, T, s);
      batched_gemm(m.blas_, xt, xt, false, false, ihs, iT, iT, a.v, ihs, sT, y.att, iT, sTT, a.y,
                   ihs, sT, batches);
      kg::attention_unpermute(x_(y.atty), x_(a.y), B, T, NH, hs, s);
      linear(a.proj, y.atty, P(kAttnProjW), P(kAttnProjB), C, C, C);
      kg::residual_forward(x_(y.res2), static_cast<const X*>(x), x_(a.proj), BT * C, s);
      kg::layernorm_forward(x_(y.ln2), y.ln2_mean, y.ln2_rstd, x_(y.res2), P(kLn2W), P(kLn2B), BT,
                            C, s);
      linear(y.fch, y.ln2, P(kFcW), P(kFcB), C, H, H);
      kg::gelu_forward(x_(y.fch_gelu), x_(y.fch), BT * H, s);
      linear(a.proj, y.fch_gelu, P(kMlpProjW), P(kMlpProjB), H, C, C);
      kg::residual_forward(x_(y.res3), x_(y.res2), x_(a.proj), BT * C, s);
      x = y.res3;
    }
    const size_t lnf_w = gpt_block_tensor(L, kLn1W), lnf_b = lnf_w + 1;
    kg::layernorm_forward(x_(a.lnf), a.lnf_mean, a.lnf_rstd, static_cast<const X*>(x), W(lnf_w),
                          W(lnf_b), BT, C, s);
    linear(a.logits, a.lnf, W(kGptWte), nullptr, C, m.head_rows_, Vp);  // the tied head
    kg::cross_entropy(a.losses, a.correct, grad ? x_(a.logits) : nullptr, x_(a.logits),
                      m.targets_.get(), BT, V, Vp, 1.0f / static_cast<float>(BT), s);
    kg::sum_loss(m.sums_.get(), a.losses, a.correct, BT, s);
  }

  // The head, the final LayerNorm, the blocks in reverse and the embedding; each tensor's
  // gradient is announced (on_ready) once its kernels are queued.
  void backward() {
    const size_t lnf_w = gpt_block_tensor(L, kLn1W), lnf_b = lnf_w + 1;
    const X* x_last = x_(L == 0 ? a.encoded : a.layers[L - 1].res3);
    GT_CUDA_CHECK(cudaMemsetAsync(a.dres, 0, BT * C * sizeof(X), s));
    // The head's backward: dln over head_rows_ columns of dlogits (the padding is zero), the
    // embedding's gradient over the V real rows only.
    lt_matmul(m.lt_, xt, xt, false, false, static_cast<int>(C), iBT, static_cast<int>(m.head_rows_),
              W(kGptWte), static_cast<int>(C), a.logits, static_cast<int>(Vp), a.dln,
              static_cast<int>(C), 0.0f, nullptr, m.workspace_.get(), s);
    linear_backward(nullptr, G(kGptWte), nullptr, a.logits, a.lnf, W(kGptWte), C, V, Vp);
    kg::layernorm_backward(x_(a.dres), G(lnf_w), G(lnf_b), x_(a.dln), x_last, W(lnf_w), a.lnf_mean,
                           a.lnf_rstd, BT, C, s);
    ready(lnf_w);
    ready(lnf_b);
    for (size_t l = L; l-- > 0;) block_backward(l);
    kg::embedding_backward(G(kGptWte), G(kGptWpe), x_(a.dres), m.inputs_.get(), B, T, C, s);
    ready(kGptWpe);
    ready(kGptWte);
  }

  // Block l's backward: dres (BT, C) in is the gradient of its output, out of its input.
  void block_backward(size_t l) {
    Acts::Layer& y = a.layers[l];
    const X* x_in = x_(l == 0 ? a.encoded : a.layers[l - 1].res3);
    const auto P = [&](GptBlockTensor k) { return W(gpt_block_tensor(l, k)); };
    const auto D = [&](GptBlockTensor k) { return G(gpt_block_tensor(l, k)); };
    const auto done = [&](GptBlockTensor w) {  // a weight and the bias (or LayerNorm pair) after it
      ready(gpt_block_tensor(l, w));
      ready(gpt_block_tensor(l, w) + 1);
    };
    linear_backward(a.dfch, D(kMlpProjW), D(kMlpProjB), a.dres, y.fch_gelu, P(kMlpProjW), H, C, C);
    done(kMlpProjW);
    kg::gelu_backward(x_(a.dfch), x_(y.fch), x_(a.dfch), BT * H, s);
    linear_backward(a.dln, D(kFcW), D(kFcB), a.dfch, y.ln2, P(kFcW), C, H, H);
    done(kFcW);
    kg::layernorm_backward(x_(a.dres), D(kLn2W), D(kLn2B), x_(a.dln), x_(y.res2), P(kLn2W),
                           y.ln2_mean, y.ln2_rstd, BT, C, s);
    done(kLn2W);
    linear_backward(a.datty, D(kAttnProjW), D(kAttnProjB), a.dres, y.atty, P(kAttnProjW), C, C, C);
    done(kAttnProjW);
    // Attention backward: dP = dY V^T, dV = P^T dY, dS = softmax'(dP), dQ = dS K, dK = dS^T Q.
    kg::attention_permute(x_(a.q), x_(a.k), x_(a.v), x_(y.qkv), B, T, NH, hs, s);
    kg::attention_unpermute_backward(x_(a.dy), x_(a.datty), B, T, NH, hs, s);
    batched_gemm(m.blas_, xt, CUDA_R_32F, true, false, iT, iT, ihs, a.v, ihs, sT, a.dy, ihs, sT,
                 a.datt, iT, sTT, batches);
    batched_gemm(m.blas_, xt, xt, false, true, ihs, iT, iT, a.dy, ihs, sT, y.att, iT, sTT, a.dv,
                 ihs, sT, batches);
    kg::causal_softmax_backward(x_(a.dscores), a.datt, x_(y.att), scale, B * NH * T, T, s);
    batched_gemm(m.blas_, xt, xt, false, false, ihs, iT, iT, a.k, ihs, sT, a.dscores, iT, sTT, a.dq,
                 ihs, sT, batches);
    batched_gemm(m.blas_, xt, xt, false, true, ihs, iT, iT, a.q, ihs, sT, a.dscores, iT, sTT, a.dk,
                 ihs, sT, batches);
    kg::attention_permute_backward(x_(a.dqkv), x_(a.dq), x_(a.dk), x_(a.dv), B, T, NH, hs, s);
    linear_backward(a.dln, D(kQkvW), D(kQkvB), a.dqkv, y.ln1, P(kQkvW), C, 3 * C, 3 * C);
    done(kQkvW);
    kg::layernorm_backward(x_(a.dres), D(kLn1W), D(kLn1B), x_(a.dln), x_in, P(kLn1W), y.ln1_mean,
                           y.ln1_rstd, BT, C, s);
    done(kLn1W);
  }
};

template <typename X>
void GptCuda::run(const float* d_params, size_t batch, float* d_grad,
                  const Model::TensorReady& on_ready) {
  const size_t BT = batch * config_.seq_len, C = config_.d_model;
  const size_t att_n = batch * config_.heads * config_.seq_len * config_.seq_len;
  GT_REQUIRE(BT * std::max(vocab_padded_, 3 * C) <= size_t{INT32_MAX} && att_n <= size_t{INT32_MAX},
             "gpt (cuda): batch {} is too large for 32-bit indexing", batch);
  Acts a = carve(batch, sizeof(X));
  Pass<X> pass(*this, a, batch, d_params, d_grad, on_ready);
  pass.forward(d_grad != nullptr);
  predictions_ += BT;
  if (d_grad != nullptr) pass.backward();
}

}  // namespace geotrain::models
