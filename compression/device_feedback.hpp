// The codecs with error feedback for values in GPU memory (issue 24, item 3: the leader on the
// device). CUDA-enabled code only.
//
// DeviceFeedback is ErrorFeedback (compression/error_feedback.hpp) for an input on the device:
// one residual per stream, kept on the device; encode() runs the codec's fused EF kernel there
// (kernels/codec_cuda.cuh, topk_cuda.cuh, qtopk_cuda.cuh: x = g + beta e; body = C(x);
// e = x - D(body)), and only the body crosses PCIe, through a pinned buffer. The header, and a
// zstd stage when the spec has one, are made on the host. For the same inputs, the payloads and
// the residuals are those of ErrorFeedback over make_codec(spec) on the CPU, byte for byte
// (the `gpu` suite holds them equal, codec by codec, across rounds, decays and codec switches).
//
// DeviceDecoder adds a payload into values on the device: the payload is validated on the host
// first, as decode_add_payload validates it (the same InputErrors, and y untouched on one); the
// dense codecs (fp32, fp16, bf16, int8, int4, fp4, onebit) then cross PCIe as their body and
// decode on the device; top-k, quantised top-k and zstd payloads decode on the host and cross as
// fp32 values (their bodies need the host's index checks first).
//
// Blocking: encode() and decode_add() synchronise their CUDA stream once before returning (the
// payload is then complete, and the pinned buffers free). Buffers are grow-only: repeated calls
// of one size allocate nothing. One thread at a time per object.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "compression/codecs.hpp"
#include "compression/error_feedback.hpp"
#include "compression/payload.hpp"
#include "core/device_buffer.hpp"
#include "core/span.hpp"

namespace geotrain::compression {

namespace detail {
class ZstdPacker;
}

// Page-locked host memory (cudaMallocHost), grow-only; the staging area of PCIe copies.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  // At least `bytes` bytes; contents are lost when it grows.
  std::byte* reserve(size_t bytes);
  std::byte* data() { return ptr_; }

 private:
  std::byte* ptr_ = nullptr;
  size_t size_ = 0;
};

class DeviceFeedback {
 public:
  // `codec_spec` as make_codec takes it (InputError on a bad spec or decay, as ErrorFeedback).
  explicit DeviceFeedback(std::string_view codec_spec, FeedbackOptions options = {},
                          cudaStream_t stream = nullptr);
  ~DeviceFeedback();
  DeviceFeedback(const DeviceFeedback&) = delete;
  DeviceFeedback& operator=(const DeviceFeedback&) = delete;

  // Encodes g (device, n floats) for `stream`, carrying that stream's residual; out is resized to
  // the payload. The first call for a stream fixes its length; a later call with another length
  // is an InputError (residual kept).
  void encode(uint64_t stream, const float* g, size_t n, Bytes& out);

  // Encodes with `codec_spec` from now on; every residual stays (ErrorFeedback::set_codec).
  void set_codec(std::string_view codec_spec);
  const std::string& spec() const { return spec_; }
  float decay() const { return options_.decay; }

  // A stream's residual, copied to the host; empty when the stream has not been encoded yet.
  std::vector<float> residual(uint64_t stream) const;
  // Replaces a stream's residual (restoring from a checkpoint).
  void set_residual(uint64_t stream, ConstFloatSpan values);
  void reset(uint64_t stream);
  std::vector<uint64_t> streams() const;

 private:
  float* residual_for(uint64_t stream, size_t n);
  // Launches the codec's encode of g into body_ and returns the body's size (top-k: after the
  // one wait its size needs).
  size_t encode_body(const float* g, float* residual, size_t n);
  void write_payload(size_t n, size_t body_bytes, Bytes& out);

  std::string spec_;
  CodecSettings settings_;
  FeedbackOptions options_;
  cudaStream_t cuda_stream_;
  uint64_t nonce_ = 0;  // stochastic rounding's counter, as the CPU codec's
  std::map<uint64_t, DeviceBuffer<float>> residuals_;
  DeviceBuffer<std::byte> body_;
  PinnedBuffer staging_;
  Bytes inner_;  // the payload before the zstd stage
  std::unique_ptr<detail::ZstdPacker> zstd_;
};

class DeviceDecoder {
 public:
  explicit DeviceDecoder(cudaStream_t stream = nullptr) : cuda_stream_(stream) {}
  // y (device, n floats) += D(payload); decode(): y = D(payload).
  void decode_add(ConstByteSpan payload, float* y, size_t n) { run(payload, y, n, true); }
  void decode(ConstByteSpan payload, float* y, size_t n) { run(payload, y, n, false); }

 private:
  void run(ConstByteSpan payload, float* y, size_t n, bool add);

  cudaStream_t cuda_stream_;
  DeviceBuffer<std::byte> body_;
  PinnedBuffer staging_;  // the body, or the values the host decoded
};

}  // namespace geotrain::compression
