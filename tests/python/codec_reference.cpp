// codec_reference: the C++ side of tests/python/test_codecs.py's byte-equality checks. It calls
// compression/ directly (no Python in between) and writes what it produced, so the test compares
// the Python module's bytes against the C++ path's:
//
//   codec_reference encode SPEC OUT_PREFIX IN.f32...          one Codec, each input encoded in
//                                                             turn: OUT_PREFIX.<i>.bin
//   codec_reference ef SPEC STREAM OUT_PREFIX IN.f32...       one ErrorFeedback, each input on
//                                                             STREAM: OUT_PREFIX.<i>.bin, and the
//                                                             final residual
//                                                             OUT_PREFIX.residual.f32
//   codec_reference decode IN.bin N OUT.f32                   decode_payload into N floats
//
// Inputs and outputs are raw little-endian float32. Exit 0 on success, 2 with a message otherwise.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "compression/error_feedback.hpp"
#include "compression/factory.hpp"

namespace {

using geotrain::Bytes;

std::vector<char> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<float> read_floats(const std::string& path) {
  const auto raw = read_file(path);
  std::vector<float> v(raw.size() / sizeof(float));
  std::copy(raw.begin(), raw.begin() + std::ptrdiff_t(v.size() * sizeof(float)),
            reinterpret_cast<char*>(v.data()));
  return v;
}

void write_file(const std::string& path, const void* data, size_t bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), std::streamsize(bytes));
  if (!f) throw std::runtime_error("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> a(argv + 1, argv + argc);
    if (a.size() >= 4 && a[0] == "encode") {
      auto codec = geotrain::compression::make_codec(a[1]);
      for (size_t i = 3; i < a.size(); ++i) {
        Bytes out;
        codec->encode(read_floats(a[i]), out);
        write_file(a[2] + "." + std::to_string(i - 3) + ".bin", out.data(), out.size());
      }
      return 0;
    }
    if (a.size() >= 5 && a[0] == "ef") {
      geotrain::compression::ErrorFeedback ef(geotrain::compression::make_codec(a[1]));
      const uint64_t stream = std::stoull(a[2]);
      for (size_t i = 4; i < a.size(); ++i) {
        Bytes out;
        ef.encode(stream, read_floats(a[i]), out);
        write_file(a[3] + "." + std::to_string(i - 4) + ".bin", out.data(), out.size());
      }
      const auto r = ef.residual(stream);
      write_file(a[3] + ".residual.f32", r.data(), r.size() * sizeof(float));
      return 0;
    }
    if (a.size() == 4 && a[0] == "decode") {
      const auto raw = read_file(a[1]);
      std::vector<float> y(std::stoull(a[2]));
      geotrain::compression::decode_payload(
          geotrain::ConstByteSpan(reinterpret_cast<const std::byte*>(raw.data()), raw.size()), y);
      write_file(a[3], y.data(), y.size() * sizeof(float));
      return 0;
    }
    std::fprintf(stderr,
                 "usage: codec_reference encode SPEC OUT_PREFIX IN.f32...\n"
                 "       codec_reference ef SPEC STREAM OUT_PREFIX IN.f32...\n"
                 "       codec_reference decode IN.bin N OUT.f32\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "codec_reference: %s\n", e.what());
    return 2;
  }
}
