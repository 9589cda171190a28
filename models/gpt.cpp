#include "models/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>

#include "core/error.hpp"
#include "kernels/ops/attention.hpp"
#include "kernels/ops/cross_entropy.hpp"
#include "kernels/ops/embedding.hpp"
#include "kernels/ops/gelu.hpp"
#include "kernels/ops/layernorm.hpp"
#include "kernels/ops/matmul.hpp"
#include "kernels/ops/residual.hpp"

namespace geotrain::models {

namespace kc = geotrain::kernels::cpu;

namespace {

// One normal(0, 1) from two draws: Box-Muller's cosine branch, as documented in gpt.hpp.
double standard_normal(std::mt19937_64& rng) {
  const double u1 = static_cast<double>((rng() >> 11) + 1) * 0x1.0p-53;  // (0, 1]
  const double u2 = static_cast<double>(rng() >> 11) * 0x1.0p-53;        // [0, 1)
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace

GptConfig gpt_preset(const std::string& name) {
  if (name == "gpt-tiny") return GptConfig{256, 128, 5, 4, 128, 4};
  if (name == "gpt-small") return GptConfig{256, 512, 6, 8, 256, 4};
  if (name == "gpt2-124m") return GptConfig{50257, 768, 12, 12, 1024, 4};
  throw InputError(
      fmt::format("gpt preset '{}' is unknown; the presets are gpt-tiny, gpt-small "
                  "and gpt2-124m",
                  name));
}

std::vector<std::string> gpt_preset_names() { return {"gpt-tiny", "gpt-small", "gpt2-124m"}; }

void validate(const GptConfig& c) {
  GT_REQUIRE(c.vocab > 0, "gpt: vocab is 0, must be > 0");
  GT_REQUIRE(c.d_model > 0, "gpt: d_model is 0, must be > 0");
  GT_REQUIRE(c.layers > 0, "gpt: layers is 0, must be > 0");
  GT_REQUIRE(c.heads > 0, "gpt: heads is 0, must be > 0");
  GT_REQUIRE(c.seq_len > 0, "gpt: seq_len is 0, must be > 0");
  GT_REQUIRE(c.mlp_ratio > 0, "gpt: mlp_ratio is 0, must be > 0");
  GT_REQUIRE(c.d_model % c.heads == 0, "gpt: d_model {} is not a multiple of heads {}", c.d_model,
             c.heads);
  GT_REQUIRE(c.vocab <= size_t{INT32_MAX}, "gpt: vocab {} does not fit int32 tokens", c.vocab);
}

uint64_t gpt_parameter_count(const GptConfig& c) {
  const uint64_t d = c.d_model, hidden = c.mlp_ratio * c.d_model;
  const uint64_t block = 2 * d                  // ln_1
                         + 3 * d * d + 3 * d    // attn.qkv
                         + d * d + d            // attn.proj
                         + 2 * d                // ln_2
                         + hidden * d + hidden  // mlp.fc
                         + d * hidden + d;      // mlp.proj
  return c.vocab * d + c.seq_len * d + c.layers * block + 2 * d;
}

Gpt::Gpt(GptConfig config) : config_(config) {
  validate(config_);
  parameter_count_ = gpt_parameter_count(config_);
  uint64_t offset = 0;
  for (const TensorSpec& spec : tensor_specs()) {
    offsets_.push_back(offset);
    offset += spec.size;
  }
  GT_ASSERT(offset == parameter_count_, "gpt layout {} vs count {}", offset, parameter_count_);
}

std::vector<TensorSpec> Gpt::tensor_specs() const {
  const uint64_t d = config_.d_model, hidden = config_.mlp_ratio * config_.d_model;
  std::vector<TensorSpec> specs = {{"wte", config_.vocab * d}, {"wpe", config_.seq_len * d}};
  for (size_t l = 0; l < config_.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    specs.insert(specs.end(), {{h + "ln_1.w", d},
                               {h + "ln_1.b", d},
                               {h + "attn.qkv.w", 3 * d * d},
                               {h + "attn.qkv.b", 3 * d},
                               {h + "attn.proj.w", d * d},
                               {h + "attn.proj.b", d},
                               {h + "ln_2.w", d},
                               {h + "ln_2.b", d},
                               {h + "mlp.fc.w", hidden * d},
                               {h + "mlp.fc.b", hidden},
                               {h + "mlp.proj.w", d * hidden},
                               {h + "mlp.proj.b", d}});
  }
  specs.push_back({"ln_f.w", d});
  specs.push_back({"ln_f.b", d});
  return specs;
}

std::vector<std::vector<uint64_t>> Gpt::tensor_shapes() const {
  const uint64_t d = config_.d_model, hidden = config_.mlp_ratio * config_.d_model;
  std::vector<std::vector<uint64_t>> shapes = {{config_.vocab, d}, {config_.seq_len, d}};
  for (size_t l = 0; l < config_.layers; ++l)
    shapes.insert(shapes.end(), {{d},
                                 {d},  // ln_1
                                 {3 * d, d},
                                 {3 * d},  // attn.qkv
                                 {d, d},
                                 {d},  // attn.proj
                                 {d},
                                 {d},  // ln_2
                                 {hidden, d},
                                 {hidden},  // mlp.fc
                                 {d, hidden},
                                 {d}});  // mlp.proj
  shapes.push_back({d});                 // ln_f.w
  shapes.push_back({d});                 // ln_f.b
  return shapes;
}

void Gpt::init(FloatSpan params, uint64_t seed) const {
  GT_REQUIRE(params.size() == parameter_count_, "gpt init: params has {} elements, model has {}",
             params.size(), parameter_count_);
  std::mt19937_64 rng(seed);
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config_.layers));
  const std::vector<TensorSpec> specs = tensor_specs();
  for (size_t i = 0; i < specs.size(); ++i) {
    float* p = params.data() + offsets_[i];
    const std::string& name = specs[i].name;
    const auto ends_with = [&](const char* suffix) { return name.ends_with(suffix); };
    if (ends_with("ln_1.w") || ends_with("ln_2.w") || name == "ln_f.w") {
      std::fill_n(p, specs[i].size, 1.0f);
    } else if (ends_with(".b")) {
      std::fill_n(p, specs[i].size, 0.0f);
    } else {
      const double std = ends_with("attn.proj.w") || ends_with("mlp.proj.w") ? residual_std : 0.02;
      for (uint64_t j = 0; j < specs[i].size; ++j)
        p[j] = static_cast<float>(std * standard_normal(rng));
    }
  }
}

// The scratch arena, carved for batch B (sizes in floats; BT = B T, r = mlp_ratio):
//   forward:  encoded (BT, C); per layer: ln1 (BT, C), ln1_mean, ln1_rstd (BT), qkv (BT, 3C),
//             att (B, NH, T, T), atty (BT, C), res2 (BT, C), ln2 (BT, C), ln2_mean, ln2_rstd (BT),
//             fch (BT, rC), fch_gelu (BT, rC), res3 (BT, C); then proj (BT, C), lnf (BT, C),
//             lnf_mean, lnf_rstd (BT), logits (BT, V), losses (BT)
//   backward: dres (BT, C), dln (BT, C), datty (BT, C), dqkv (BT, 3C), datt (B, NH, T, T),
//             dfch (BT, rC); dlogits are written over logits.
// The forward part is a prefix, so an arena grown for training also serves evaluate.
struct Gpt::Scratch {
  struct Layer {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *res2, *ln2, *ln2_mean, *ln2_rstd, *fch,
        *fch_gelu, *res3;
  };
  size_t B = 0;
  float* encoded = nullptr;
  std::vector<Layer> layers;
  float *proj, *lnf, *lnf_mean, *lnf_rstd, *logits, *losses;
  float *dres = nullptr, *dln = nullptr, *datty = nullptr, *dqkv = nullptr, *datt = nullptr,
        *dfch = nullptr;
};

Gpt::Scratch Gpt::carve(size_t batch, bool with_grad) {
  const size_t T = config_.seq_len, C = config_.d_model, BT = batch * T;
  const size_t att = batch * config_.heads * T * T, hidden = config_.mlp_ratio * C;
  // Two passes: count (base null) then hand out pointers into the grown arena.
  size_t used = 0;
  float* base = nullptr;
  const auto take = [&](size_t n) {
    float* p = base == nullptr ? nullptr : base + used;
    used += n;
    return p;
  };
  Scratch s;
  for (int pass = 0; pass < 2; ++pass) {
    used = 0;
    s.B = batch;
    s.layers.assign(config_.layers, {});
    s.encoded = take(BT * C);
    for (Scratch::Layer& l : s.layers)
      l = {take(BT * C),      take(BT),          take(BT),     take(BT * 3 * C), take(att),
           take(BT * C),      take(BT * C),      take(BT * C), take(BT),         take(BT),
           take(BT * hidden), take(BT * hidden), take(BT * C)};
    s.proj = take(BT * C);
    s.lnf = take(BT * C);
    s.lnf_mean = take(BT);
    s.lnf_rstd = take(BT);
    s.logits = take(BT * config_.vocab);
    s.losses = take(BT);
    if (with_grad) {
      s.dres = take(BT * C);
      s.dln = take(BT * C);
      s.datty = take(BT * C);
      s.dqkv = take(BT * 3 * C);
      s.datt = take(att);
      s.dfch = take(BT * hidden);
    }
    if (pass == 0) {
      if (scratch_.size() < used) scratch_.resize(used);
      base = scratch_.data();
    }
  }
  return s;
}

void Gpt::check_batch(ConstFloatSpan params, const BatchView& batch) const {
  GT_REQUIRE(params.size() == parameter_count_, "gpt: params has {} elements, model has {}",
             params.size(), parameter_count_);
  GT_REQUIRE(batch.batch > 0, "gpt: batch is 0, must be > 0");
  GT_REQUIRE(batch.tokens != nullptr, "gpt: batch.tokens is null");
  const size_t row = config_.seq_len + 1;
  for (size_t i = 0; i < batch.batch * row; ++i)
    GT_REQUIRE(batch.tokens[i] >= 0 && static_cast<size_t>(batch.tokens[i]) < config_.vocab,
               "gpt: token {} at row {}, position {} is not in [0, {})", batch.tokens[i], i / row,
               i % row, config_.vocab);
}

BatchResult Gpt::forward(ConstFloatSpan params, const BatchView& batch, const Scratch& s) {
  const size_t B = batch.batch, T = config_.seq_len, C = config_.d_model, BT = B * T;
  const size_t NH = config_.heads, V = config_.vocab, hidden = config_.mlp_ratio * C;
  inputs_.resize(BT);
  targets_.resize(BT);
  for (size_t b = 0; b < B; ++b) {
    const int32_t* row = batch.tokens + b * (T + 1);
    std::copy(row, row + T, inputs_.begin() + static_cast<long>(b * T));
    std::copy(row + 1, row + T + 1, targets_.begin() + static_cast<long>(b * T));
  }
  const auto P = [&](size_t tensor) { return params.data() + offsets_[tensor]; };

  kc::embedding_forward(s.encoded, inputs_.data(), P(kGptWte), P(kGptWpe), B, T, C);
  const float* x = s.encoded;  // (BT, C): the residual stream entering the block
  for (size_t l = 0; l < config_.layers; ++l) {
    const Scratch::Layer& a = s.layers[l];
    const auto W = [&](GptBlockTensor k) { return P(gpt_block_tensor(l, k)); };
    kc::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, W(kLn1W), W(kLn1B), BT, C);
    kc::matmul_forward(a.qkv, a.ln1, W(kQkvW), W(kQkvB), BT, C, 3 * C);
    kc::attention_forward(a.atty, a.att, a.qkv, B, T, C, NH);
    kc::matmul_forward(s.proj, a.atty, W(kAttnProjW), W(kAttnProjB), BT, C, C);
    kc::residual_forward(a.res2, x, s.proj, BT * C);
    kc::layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, W(kLn2W), W(kLn2B), BT, C);
    kc::matmul_forward(a.fch, a.ln2, W(kFcW), W(kFcB), BT, C, hidden);
    kc::gelu_forward(a.fch_gelu, a.fch, BT * hidden);
    kc::matmul_forward(s.proj, a.fch_gelu, W(kMlpProjW), W(kMlpProjB), BT, hidden, C);
    kc::residual_forward(a.res3, a.res2, s.proj, BT * C);
    x = a.res3;
  }
  const size_t lnf_w = gpt_block_tensor(config_.layers, kLn1W), lnf_b = lnf_w + 1;
  kc::layernorm_forward(s.lnf, s.lnf_mean, s.lnf_rstd, x, P(lnf_w), P(lnf_b), BT, C);
  kc::matmul_forward(s.logits, s.lnf, P(kGptWte), nullptr, BT, C, V);  // the tied head
  // With backward scratch, the fused backward writes d(mean loss)/d(logits) over the logits.
  const kc::CrossEntropyResult ce =
      kc::cross_entropy(s.losses, s.dres != nullptr ? s.logits : nullptr, s.logits, targets_.data(),
                        BT, V, 1.0f / static_cast<float>(BT));
  BatchResult r;
  r.loss_sum = ce.loss_sum;
  r.correct = ce.correct;
  r.predictions = BT;
  return r;
}

BatchResult Gpt::evaluate(ConstFloatSpan params, const BatchView& batch) {
  check_batch(params, batch);
  return forward(params, batch, carve(batch.batch, false));
}

BatchResult Gpt::forward_backward(ConstFloatSpan params, const BatchView& batch, FloatSpan grad,
                                  const TensorReady& on_ready) {
  check_batch(params, batch);
  GT_REQUIRE(grad.size() == parameter_count_, "gpt: grad has {} elements, model has {}",
             grad.size(), parameter_count_);
  const Scratch s = carve(batch.batch, true);
  const BatchResult r = forward(params, batch, s);

  const size_t B = batch.batch, T = config_.seq_len, C = config_.d_model, BT = B * T;
  const size_t NH = config_.heads, V = config_.vocab, hidden = config_.mlp_ratio * C;
  const auto P = [&](size_t tensor) { return params.data() + offsets_[tensor]; };
  const auto G = [&](size_t tensor) { return grad.data() + offsets_[tensor]; };
  const auto ready = [&](size_t tensor) {
    if (on_ready) on_ready(tensor);
  };

  // Head: logits = lnf wte^T. wte's gradient gets the embedding's share at the very end.
  kc::matmul_backward(s.dln, G(kGptWte), nullptr, s.logits, s.lnf, P(kGptWte), BT, C, V);
  const size_t lnf_w = gpt_block_tensor(config_.layers, kLn1W), lnf_b = lnf_w + 1;
  const float* x_last = config_.layers > 0 ? s.layers.back().res3 : s.encoded;
  std::fill_n(s.dres, BT * C, 0.0f);  // dres (BT, C): d(loss)/d(residual stream)
  kc::layernorm_backward(s.dres, G(lnf_w), G(lnf_b), s.dln, x_last, P(lnf_w), s.lnf_mean,
                         s.lnf_rstd, BT, C);
  ready(lnf_w);
  ready(lnf_b);

  // The residual additions pass dres unchanged into both branches, so each branch's input
  // gradient is added onto dres in place (layernorm_backward accumulates).
  for (size_t l = config_.layers; l-- > 0;) {
    const Scratch::Layer& a = s.layers[l];
    const float* x_in = l == 0 ? s.encoded : s.layers[l - 1].res3;
    const auto W = [&](GptBlockTensor k) { return P(gpt_block_tensor(l, k)); };
    const auto D = [&](GptBlockTensor k) { return G(gpt_block_tensor(l, k)); };
    const auto done = [&](GptBlockTensor w) {
      ready(gpt_block_tensor(l, w));
      ready(gpt_block_tensor(l, w) + 1);
    };
    kc::matmul_backward(s.dfch, D(kMlpProjW), D(kMlpProjB), s.dres, a.fch_gelu, W(kMlpProjW), BT,
                        hidden, C);
    done(kMlpProjW);
    kc::gelu_backward(s.dfch, a.fch, s.dfch, BT * hidden);
    kc::matmul_backward(s.dln, D(kFcW), D(kFcB), s.dfch, a.ln2, W(kFcW), BT, C, hidden);
    done(kFcW);
    kc::layernorm_backward(s.dres, D(kLn2W), D(kLn2B), s.dln, a.res2, W(kLn2W), a.ln2_mean,
                           a.ln2_rstd, BT, C);
    done(kLn2W);
    kc::matmul_backward(s.datty, D(kAttnProjW), D(kAttnProjB), s.dres, a.atty, W(kAttnProjW), BT, C,
                        C);
    done(kAttnProjW);
    kc::attention_backward(s.dqkv, s.datt, s.datty, a.qkv, a.att, B, T, C, NH);
    kc::matmul_backward(s.dln, D(kQkvW), D(kQkvB), s.dqkv, a.ln1, W(kQkvW), BT, C, 3 * C);
    done(kQkvW);
    kc::layernorm_backward(s.dres, D(kLn1W), D(kLn1B), s.dln, x_in, W(kLn1W), a.ln1_mean,
                           a.ln1_rstd, BT, C);
    done(kLn1W);
  }
  kc::embedding_backward(G(kGptWte), G(kGptWpe), s.dres, inputs_.data(), B, T, C);
  ready(kGptWpe);
  ready(kGptWte);
  return r;
}

}  // namespace geotrain::models
