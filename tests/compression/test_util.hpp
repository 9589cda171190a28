// Test data and payload helpers shared by the compression suites.
#pragma once

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compression/codec.hpp"
#include "compression/factory.hpp"
#include "compression/payload.hpp"

namespace geotrain::test {

inline std::vector<float> gaussian(size_t n, unsigned seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline std::vector<float> heavy_tailed(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::student_t_distribution<float> d(2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline double sum(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  return s;
}

// Encodes x and decodes it into a buffer of 123s; the payload goes to `payload_out` if given.
inline std::vector<float> roundtrip(compression::Codec& codec, const std::vector<float>& x,
                                    Bytes* payload_out = nullptr) {
  Bytes payload;
  codec.encode(x, payload);
  std::vector<float> y(x.size(), 123.0f);
  codec.decode(payload, y);
  if (payload_out) *payload_out = payload;
  return y;
}

inline Bytes encode(const std::string& spec, const std::vector<float>& x) {
  Bytes p;
  compression::make_codec(spec)->encode(x, p);
  return p;
}

template <typename T>
void poke(Bytes& p, size_t offset, T value) {
  std::memcpy(p.data() + offset, &value, sizeof value);
}

// Recomputes the body length and checksum, so that a deliberately wrong field passes the
// integrity check and must be caught by the field's own validation.
inline void reseal(Bytes& p) {
  poke<uint64_t>(p, 24, p.size() - compression::kHeaderBytes);
  poke<uint64_t>(p, 32, compression::payload_checksum(p));
}

}  // namespace geotrain::test
