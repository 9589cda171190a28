#include "compression/error_feedback.hpp"

#include "core/error.hpp"

namespace geotrain::compression {

void require_feedback_decay(double decay, std::string_view what) {
  GT_REQUIRE(decay > 0.0 && decay <= 1.0,
             "{} is {}, allowed: (0, 1] (1 keeps the whole residual, the classic error feedback)",
             what, decay);
}

ErrorFeedback::ErrorFeedback(std::unique_ptr<Codec> codec, FeedbackOptions options)
    : codec_(std::move(codec)), options_(options) {
  GT_ASSERT(codec_ != nullptr, "ErrorFeedback needs a codec");
  require_feedback_decay(options_.decay, "error feedback decay");
}

std::vector<float>& ErrorFeedback::residual_for(uint64_t stream, size_t n) {
  auto [it, created] = residuals_.try_emplace(stream);
  if (created) it->second.assign(n, 0.0f);
  GT_REQUIRE(it->second.size() == n,
             "error feedback: stream {} has a residual of {} elements, but {} were given", stream,
             it->second.size(), n);
  return it->second;
}

std::vector<float>& ErrorFeedback::decayed(std::vector<float>& e) {
  if (options_.decay == 1.0f) return e;
  decayed_.resize(e.size());
  for (size_t i = 0; i < e.size(); ++i) decayed_[i] = options_.decay * e[i];
  return decayed_;
}

void ErrorFeedback::encode(uint64_t stream, ConstFloatSpan g, Bytes& out, MatrixShape shape) {
  std::vector<float>& e = residual_for(stream, g.size());
  std::vector<float>& r = decayed(e);  // beta e
  if (shape.matrix() && codec_->uses_shape())
    return encode_reference(e, r, g, out, [&] { codec_->encode_matrix(x_, shape, stream, out); });
  if (options_.use_fused && codec_->encode_with_feedback(g, r, out)) {
    if (&r != &e) e.swap(r);  // the codec left x - D(c) in r
    return;
  }
  encode_reference(e, r, g, out, [&] { codec_->encode(x_, out); });
}

void ErrorFeedback::encode(uint64_t stream, ConstFloatSpan g, Bytes& out,
                           std::span<const SpanPiece> pieces) {
  if (!codec_->uses_shape()) return encode(stream, g, out);
  std::vector<float>& e = residual_for(stream, g.size());
  std::vector<float>& r = decayed(e);  // beta e
  encode_reference(e, r, g, out, [&] { codec_->encode_pieces(x_, pieces, stream, out); });
}

template <typename EncodeX>
void ErrorFeedback::encode_reference(std::vector<float>& e, const std::vector<float>& r,
                                     ConstFloatSpan g, Bytes& out, EncodeX&& encode_x) {
  // The reference order. Kept in this one place; fused kernels must match it exactly.
  const size_t n = g.size();
  x_.resize(n);
  decoded_.resize(n);
  for (size_t i = 0; i < n; ++i) x_[i] = g[i] + r[i];         // x = g + beta e
  encode_x();                                                 // c = C(x)
  codec_->decode(out, decoded_);                              //     D(c)
  for (size_t i = 0; i < n; ++i) e[i] = x_[i] - decoded_[i];  // e = x - D(c)
}

ConstFloatSpan ErrorFeedback::residual(uint64_t stream) const {
  auto it = residuals_.find(stream);
  return it == residuals_.end() ? ConstFloatSpan{} : ConstFloatSpan(it->second);
}

void ErrorFeedback::set_residual(uint64_t stream, ConstFloatSpan values) {
  residuals_[stream].assign(values.begin(), values.end());
}

void ErrorFeedback::reset(uint64_t stream) {
  residuals_.erase(stream);
  codec_->reset_stream(stream);
}

std::unique_ptr<Codec> ErrorFeedback::set_codec(std::unique_ptr<Codec> codec) {
  GT_ASSERT(codec != nullptr, "ErrorFeedback needs a codec");
  codec_.swap(codec);
  return codec;
}

void ErrorFeedback::move_residual(uint64_t stream, ErrorFeedback& to) {
  if (&to == this) return;
  auto it = residuals_.find(stream);
  if (it == residuals_.end()) {
    to.reset(stream);
    return;
  }
  to.residuals_[stream] = std::move(it->second);
  residuals_.erase(it);
}

std::vector<uint64_t> ErrorFeedback::streams() const {
  std::vector<uint64_t> s;
  for (const auto& [id, e] : residuals_) s.push_back(id);
  return s;
}

}  // namespace geotrain::compression
