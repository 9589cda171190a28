// Every codec, with error feedback, on a language model's parameter deltas: the GPT's tensors
// (embeddings, LayerNorm gains, attention and MLP weights of very different scales) go through
// the same compression path as the MLP's, with EF's invariant holding exactly.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compression/error_feedback.hpp"
#include "compression/factory.hpp"
#include "models/gpt.hpp"

using namespace geotrain;

TEST_CASE("every codec with error feedback carries gpt-tiny's deltas: decoded + residual = sent") {
  models::Gpt model(models::gpt_preset("gpt-tiny"));
  std::vector<float> params(model.parameter_count());
  model.init(params, 4);
  // Four rounds of deltas: -lr x the gradient of a random byte batch (the real GPT's gradient
  // structure, no corpus needed).
  std::mt19937 rng(9);
  std::uniform_int_distribution<int32_t> byte(0, 255);
  const size_t batch = 2, window = model.config().seq_len + 1;
  std::vector<std::vector<float>> deltas;
  for (int round = 0; round < 4; ++round) {
    std::vector<int32_t> tokens(batch * window);
    for (auto& t : tokens) t = byte(rng);
    std::vector<float> grad(params.size(), 0.0f);
    model.forward_backward(params, models::BatchView{batch, nullptr, nullptr, tokens.data()}, grad);
    for (auto& g : grad) g *= -0.01f;
    deltas.push_back(std::move(grad));
  }
  for (const std::string spec : {"fp32", "fp16", "bf16", "int8", "int4", "onebit",
                                 "topk:ratio=0.01", "onebit+zstd", "int8+zstd"}) {
    CAPTURE(spec);
    compression::ErrorFeedback ef(compression::make_codec(spec));
    auto decoder = compression::make_codec(spec);
    std::vector<double> sent(params.size(), 0.0), received(params.size(), 0.0);
    size_t bytes = 0;
    Bytes payload;
    std::vector<float> decoded(params.size());
    for (const auto& d : deltas) {
      ef.encode(0, d, payload);
      bytes += payload.size();
      decoder->decode(payload, decoded);
      for (size_t i = 0; i < d.size(); ++i) {
        sent[i] += d[i];
        received[i] += decoded[i];
      }
    }
    const auto residual = ef.residual(0);
    REQUIRE(residual.size() == params.size());
    double err = 0, norm = 0, lag = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      err += std::pow(received[i] + residual[i] - sent[i], 2);
      lag += std::pow(received[i] - sent[i], 2);
      norm += sent[i] * sent[i];
    }
    const double bits = 8.0 * double(bytes) / double(deltas.size() * params.size());
    MESSAGE(spec, ": ", bits, " bits per parameter, what has not arrived yet ",
            std::sqrt(lag / norm), " of the sum sent");
    CHECK(std::sqrt(err / norm) < 1e-5);  // nothing is lost: it is delivered or in the residual
    CHECK(std::sqrt(lag / norm) < 1.0);   // and most of it has been delivered
    if (spec == "onebit") CHECK(bits < 1.1);
    if (spec == "fp32") CHECK(lag == 0.0);
  }
}
