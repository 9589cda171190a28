#include "compression/device_feedback.hpp"

#include <cstring>

#include "compression/codec.hpp"
#include "compression/decode.hpp"
#include "compression/factory.hpp"
#include "compression/zstd_pack.hpp"
#include "core/check_cuda.hpp"
#include "core/error.hpp"
#include "kernels/codec_cuda.cuh"
#include "kernels/qtopk_cuda.cuh"
#include "kernels/topk_cuda.cuh"

namespace geotrain::compression {
namespace {

namespace kc = geotrain::kernels;

kc::QtopkLayout qtopk_layout(const TopkOptions& t, uint64_t n) {
  return {n, t.chunk, static_cast<uint32_t>(topk_count(t.chunk, t.ratio)), t.bits};
}

}  // namespace

PinnedBuffer::~PinnedBuffer() {
  if (ptr_ != nullptr) cudaFreeHost(ptr_);
}

std::byte* PinnedBuffer::reserve(size_t bytes) {
  if (bytes > size_) {
    if (ptr_ != nullptr) GT_CUDA_CHECK(cudaFreeHost(ptr_));
    ptr_ = nullptr;
    size_ = 0;
    GT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&ptr_), bytes));
    size_ = bytes;
  }
  return ptr_;
}

DeviceFeedback::DeviceFeedback(std::string_view codec_spec, FeedbackOptions options,
                               cudaStream_t stream)
    : options_(options), cuda_stream_(stream) {
  require_feedback_decay(options_.decay, "error feedback decay");
  set_codec(codec_spec);
}

DeviceFeedback::~DeviceFeedback() = default;

void DeviceFeedback::set_codec(std::string_view codec_spec) {
  CodecSettings settings = parse_codec_spec(codec_spec);
  GT_REQUIRE(settings.quant.step == 0.0f,
             "codec spec '{}': step is not available on the device (its kernels scale by the "
             "absmax); encode on the host",
             codec_spec);
  GT_REQUIRE(settings.id != CodecId::powersgd,
             "codec spec '{}': powersgd is not available on the device (no kernel factorises on "
             "it); encode on the host",
             codec_spec);
  auto zstd =
      settings.zstd_level ? std::make_unique<detail::ZstdPacker>(*settings.zstd_level) : nullptr;
  spec_ = std::string(codec_spec);
  settings_ = settings;
  zstd_ = std::move(zstd);
  nonce_ = 0;  // a new codec object counts from zero on the CPU too
}

float* DeviceFeedback::residual_for(uint64_t stream, size_t n) {
  auto it = residuals_.find(stream);
  if (it == residuals_.end()) {
    it = residuals_.emplace(stream, DeviceBuffer<float>(n)).first;
    if (n > 0) GT_CUDA_CHECK(cudaMemsetAsync(it->second.get(), 0, n * sizeof(float), cuda_stream_));
  }
  GT_REQUIRE(it->second.size() == n,
             "error feedback: stream {} has {} elements, but {} were given (its length is fixed by "
             "its first encode)",
             stream, it->second.size(), n);
  return it->second.get();
}

void DeviceFeedback::encode(uint64_t stream, const float* g, size_t n, Bytes& out) {
  GT_REQUIRE(n <= kMaxElements, "{}: {} elements exceed the payload limit {}", spec_, n,
             kMaxElements);
  float* residual = residual_for(stream, n);
  const size_t body_bytes = encode_body(g, residual, n);
  std::byte* staged = staging_.reserve(body_bytes);
  if (body_bytes > 0)
    GT_CUDA_CHECK(
        cudaMemcpyAsync(staged, body_.get(), body_bytes, cudaMemcpyDeviceToHost, cuda_stream_));
  GT_CUDA_CHECK(cudaStreamSynchronize(cuda_stream_));
  write_payload(n, body_bytes, out);
  if (settings_.quant.stochastic) ++nonce_;
}

size_t DeviceFeedback::encode_body(const float* g, float* e, size_t n) {
  const CodecSettings& s = settings_;
  const float beta = options_.decay;
  if (n == 0) return 0;  // every codec's body for no elements (nothing to launch)
  if (s.id == CodecId::topk) {
    const uint64_t k = topk_count(n, s.topk.ratio);
    body_.reserve(std::max<size_t>(14 * k, 1));
    return kc::cuda::topk_encode(g, e, n, k, s.topk.sample, body_.get(), cuda_stream_, beta);
  }
  if (s.id == CodecId::qtopk) {
    const kc::QtopkLayout l = qtopk_layout(s.topk, n);
    body_.reserve(std::max<size_t>(l.body_bytes(), 1));
    std::byte* body = body_.get();
    kc::cuda::qtopk_encode(g, e, l, reinterpret_cast<float*>(body),
                           reinterpret_cast<uint8_t*>(body + l.values_offset()),
                           reinterpret_cast<uint8_t*>(body + l.indices_offset()), cuda_stream_,
                           beta);
    return l.body_bytes();
  }
  // The dense codecs: the layout of compression/dense_codecs.cpp, scales then the packed values.
  const uint32_t chunk = detail::is_chunked(s.id) ? s.quant.chunk : 0;
  const size_t bytes = detail::dense_body_bytes(s.id, n, chunk);
  body_.reserve(std::max<size_t>(bytes, 1));
  std::byte* body = body_.get();
  auto* scales = reinterpret_cast<float*>(body);
  std::byte* packed = body + 4 * (chunk > 0 ? kc::chunk_count(n, chunk) : 0);
  const kc::Rounding rounding{s.quant.stochastic, s.quant.seed, nonce_};
  const cudaStream_t cs = cuda_stream_;
  switch (s.id) {
    case CodecId::fp32:
      kc::cuda::fp32_encode(g, e, n, reinterpret_cast<float*>(body), cs, beta);
      break;
    case CodecId::fp16:
      kc::cuda::fp16_encode(g, e, n, reinterpret_cast<uint16_t*>(body), cs, beta);
      break;
    case CodecId::bf16:
      kc::cuda::bf16_encode(g, e, n, reinterpret_cast<uint16_t*>(body), cs, beta);
      break;
    case CodecId::int8:
      kc::cuda::int8_encode(g, e, n, chunk, rounding, scales, reinterpret_cast<int8_t*>(packed), cs,
                            beta);
      break;
    case CodecId::int4:
      kc::cuda::int4_encode(g, e, n, chunk, rounding, scales, reinterpret_cast<uint8_t*>(packed),
                            cs, beta);
      break;
    case CodecId::fp4:
      kc::cuda::fp4_encode(g, e, n, chunk, scales, reinterpret_cast<uint8_t*>(packed), cs, beta);
      break;
    case CodecId::onebit:
      kc::cuda::onebit_encode(g, e, n, chunk, scales, reinterpret_cast<uint32_t*>(packed), cs,
                              s.onebit_scale, beta);
      break;
    default:
      GT_ASSERT(false, "{} is not a dense codec", codec_name(s.id));
  }
  return bytes;
}

// The header as the CPU codec writes it (dense_codecs.cpp, topk.cpp, qtopk.cpp), after the body.
void DeviceFeedback::write_payload(size_t n, size_t body_bytes, Bytes& out) {
  const CodecSettings& s = settings_;
  Bytes& payload = zstd_ ? inner_ : out;
  payload.resize(kHeaderBytes + body_bytes);
  if (body_bytes > 0) std::memcpy(payload.data() + kHeaderBytes, staging_.data(), body_bytes);
  PayloadHeader h;
  h.codec = s.id;
  h.elements = n;
  if (s.id == CodecId::topk) {
    h.aux = static_cast<uint32_t>(topk_count(n, s.topk.ratio));
  } else if (s.id == CodecId::qtopk) {
    h.chunk = s.topk.chunk;
    h.aux = qtopk_layout(s.topk, n).k | (s.topk.bits << 24);
  } else {
    h.chunk = detail::is_chunked(s.id) ? s.quant.chunk : 0;
    h.flags = s.quant.stochastic ? kFlagStochastic : 0;
  }
  write_header(h, payload);
  if (zstd_) zstd_->pack(inner_, n, s.id, out);
}

std::vector<float> DeviceFeedback::residual(uint64_t stream) const {
  auto it = residuals_.find(stream);
  if (it == residuals_.end()) return {};
  std::vector<float> host(it->second.size());
  GT_CUDA_CHECK(cudaStreamSynchronize(cuda_stream_));
  it->second.download(host);
  return host;
}

void DeviceFeedback::set_residual(uint64_t stream, ConstFloatSpan values) {
  DeviceBuffer<float> e(values.size());
  GT_CUDA_CHECK(cudaStreamSynchronize(cuda_stream_));
  e.upload(values);
  residuals_.insert_or_assign(stream, std::move(e));
}

void DeviceFeedback::reset(uint64_t stream) {
  GT_CUDA_CHECK(cudaStreamSynchronize(cuda_stream_));
  residuals_.erase(stream);
}

std::vector<uint64_t> DeviceFeedback::streams() const {
  std::vector<uint64_t> ids;
  for (const auto& [id, e] : residuals_) ids.push_back(id);
  return ids;
}

void DeviceDecoder::run(ConstByteSpan payload, float* y, size_t n, bool add) {
  const PayloadHeader h = parse_header(payload);
  detail::check_parsed(h, n, std::nullopt);
  const cudaStream_t cs = cuda_stream_;
  if (!detail::is_dense(h.codec)) {
    // Decoded (and its indices checked) on the host; the values cross PCIe as fp32.
    auto* values = reinterpret_cast<float*>(staging_.reserve(4 * n));
    decode_payload(payload, FloatSpan(values, n));
    body_.reserve(std::max<size_t>(4 * n, 1));
    GT_CUDA_CHECK(cudaMemcpyAsync(body_.get(), values, 4 * n, cudaMemcpyHostToDevice, cs));
    kc::cuda::fp32_decode(reinterpret_cast<const float*>(body_.get()), n, y, add, cs);
    GT_CUDA_CHECK(cudaStreamSynchronize(cs));
    return;
  }
  detail::check_dense(h);  // every bit pattern of the body is now a valid encoding
  const ConstByteSpan body = payload_body(payload);
  std::byte* staged = staging_.reserve(body.size());
  std::memcpy(staged, body.data(), body.size());
  body_.reserve(std::max<size_t>(body.size(), 1));
  GT_CUDA_CHECK(cudaMemcpyAsync(body_.get(), staged, body.size(), cudaMemcpyHostToDevice, cs));
  const std::byte* d = body_.get();
  const auto* scales = reinterpret_cast<const float*>(d);
  const std::byte* packed = d + 4 * (h.chunk > 0 ? kc::chunk_count(n, h.chunk) : 0);
  switch (h.codec) {
    case CodecId::fp32:
      kc::cuda::fp32_decode(reinterpret_cast<const float*>(d), n, y, add, cs);
      break;
    case CodecId::fp16:
      kc::cuda::fp16_decode(reinterpret_cast<const uint16_t*>(d), n, y, add, cs);
      break;
    case CodecId::bf16:
      kc::cuda::bf16_decode(reinterpret_cast<const uint16_t*>(d), n, y, add, cs);
      break;
    case CodecId::int8:
      kc::cuda::int8_decode(scales, reinterpret_cast<const int8_t*>(packed), n, h.chunk, y, add,
                            cs);
      break;
    case CodecId::int4:
      kc::cuda::int4_decode(scales, reinterpret_cast<const uint8_t*>(packed), n, h.chunk, y, add,
                            cs);
      break;
    case CodecId::fp4:
      kc::cuda::fp4_decode(scales, reinterpret_cast<const uint8_t*>(packed), n, h.chunk, y, add,
                           cs);
      break;
    case CodecId::onebit:
      kc::cuda::onebit_decode(scales, reinterpret_cast<const uint32_t*>(packed), n, h.chunk, y, add,
                              cs);
      break;
    default:
      GT_ASSERT(false, "{} is not a dense codec", codec_name(h.codec));
  }
  GT_CUDA_CHECK(cudaStreamSynchronize(cs));
}

}  // namespace geotrain::compression
