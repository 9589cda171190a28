// Gpt: a decoder-only transformer language model, GPT-2 shaped, on the CPU.
//
//   tokens (B, T) -> wte[token] + wpe[position] -> `layers` x block -> ln_f -> logits = x wte^T
//   block:  x = x + attn.proj(causal_self_attention(attn.qkv(ln_1(x))))
//           x = x + mlp.proj(gelu_tanh(mlp.fc(ln_2(x))))
// The output head is tied to the token embedding. LayerNorm eps is 1e-5; GELU is the tanh
// approximation (PyTorch's nn.GELU(approximate="tanh"), GPT-2's); attention is causal, scaled by
// 1/sqrt(d_model / heads), with a max-subtracted softmax.
//
// Parameters (tensor_specs(), in this order; linear weights are (out, in) as in nn.Linear):
//   wte (vocab, d), wpe (seq_len, d),
//   for l in [0, layers):
//     h.l.ln_1.w (d), h.l.ln_1.b (d),
//     h.l.attn.qkv.w (3d, d), h.l.attn.qkv.b (3d),        q, k, v = rows [0,d), [d,2d), [2d,3d)
//     h.l.attn.proj.w (d, d), h.l.attn.proj.b (d),
//     h.l.ln_2.w (d), h.l.ln_2.b (d),
//     h.l.mlp.fc.w (r d, d), h.l.mlp.fc.b (r d),
//     h.l.mlp.proj.w (d, r d), h.l.mlp.proj.b (d),
//   ln_f.w (d), ln_f.b (d).
// Head h of attention uses channels [h * d/heads, (h+1) * d/heads) of q, k and v.
//
// Initialisation (GPT-2 / nanoGPT): linear weights and embeddings normal(0, 0.02), the residual
// projections (attn.proj.w, mlp.proj.w) normal(0, 0.02 / sqrt(2 layers)), biases 0, LayerNorm
// gains 1 and biases 0; normals from a seeded mt19937_64 through a fixed transform, so every
// process and every platform draws the same values: the normal-initialised tensors in the order
// above, elements in order, each normal from two draws a, b (u1 = ((a >> 11) + 1) 2^-53,
// u2 = (b >> 11) 2^-53) as sqrt(-2 ln u1) cos(2 pi u2) in double (Box-Muller, cosine branch),
// times the std, rounded to float.
//
// Owns: the configuration and scratch activations (resized to the largest batch seen). Ops are
// one per file in kernels/ (kernels/ops/*.hpp), each with its backward. Threads: the ops use up
// to kernels::cpu::set_threads() threads, and results do not depend on that number.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "models/model.hpp"

namespace geotrain::models {

struct GptConfig {
  size_t vocab = 256;
  size_t d_model = 128;
  size_t layers = 5;
  size_t heads = 4;
  size_t seq_len = 128;  // T: the context, and the window length of a training sample
  size_t mlp_ratio = 4;
};

// Indices into tensor_specs() (for the GPU twin and other code that walks the layout): wte 0,
// wpe 1, block l's tensor k at gpt_block_tensor(l, k); ln_f.w and ln_f.b are
// gpt_block_tensor(layers, kLn1W) and the one after it.
enum GptBlockTensor : size_t {
  kLn1W,
  kLn1B,
  kQkvW,
  kQkvB,
  kAttnProjW,
  kAttnProjB,
  kLn2W,
  kLn2B,
  kFcW,
  kFcB,
  kMlpProjW,
  kMlpProjB,
  kBlockTensors
};
inline constexpr size_t kGptWte = 0, kGptWpe = 1;
inline constexpr size_t gpt_block_tensor(size_t layer, GptBlockTensor k) {
  return 2 + kBlockTensors * layer + k;
}

// The named presets: "gpt-tiny" (~1.0M parameters: d 128, 5 layers, 4 heads, T 128, vocab 256),
// "gpt-small" (~19M: d 512, 6 layers, 8 heads, T 256, vocab 256) and "gpt2-124m" (GPT-2 small:
// d 768, 12 layers, 12 heads, T 1024, vocab 50257). InputError naming the presets otherwise.
GptConfig gpt_preset(const std::string& name);
std::vector<std::string> gpt_preset_names();
// InputError naming the field when a size is 0 or d_model is not a multiple of heads.
void validate(const GptConfig& config);
// Parameters of a configuration, without building it.
uint64_t gpt_parameter_count(const GptConfig& config);

class Gpt final : public Model {
 public:
  explicit Gpt(GptConfig config);  // validate()s

  const GptConfig& config() const { return config_; }
  std::string kind() const override { return "gpt"; }
  std::vector<TensorSpec> tensor_specs() const override;
  uint64_t parameter_count() const override { return parameter_count_; }
  std::vector<std::vector<uint64_t>> tensor_shapes() const override;
  void init(FloatSpan params, uint64_t seed) const override;

  // batch.tokens: (B, T + 1), every token in [0, vocab): inputs tokens[:, :T], targets
  // tokens[:, 1:]. Loss: mean cross-entropy over the B*T predictions (predictions = B*T).
  BatchResult forward_backward(ConstFloatSpan params, const BatchView& batch, FloatSpan grad,
                               const TensorReady& on_ready = {}) override;
  BatchResult evaluate(ConstFloatSpan params, const BatchView& batch) override;

 private:
  struct Scratch;  // pointers into scratch_ for one batch size; see gpt.cpp for the layout
  Scratch carve(size_t batch, bool with_grad);
  BatchResult forward(ConstFloatSpan params, const BatchView& batch, const Scratch& s);
  void check_batch(ConstFloatSpan params, const BatchView& batch) const;

  GptConfig config_;
  uint64_t parameter_count_ = 0;
  std::vector<uint64_t> offsets_;          // tensor i starts at offsets_[i] in params and grad
  std::vector<float> scratch_;             // one arena, grown to the largest batch, reused
  std::vector<int32_t> inputs_, targets_;  // (B, T): tokens[:, :T] and tokens[:, 1:]
};

}  // namespace geotrain::models
