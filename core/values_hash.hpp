// The hash by which copies of the global model are compared at the end of a run (`geotrain run`'s
// summary key global_model_identical, `geotrain chaos --verify`): XXH3-64 of the fp32 values'
// bytes as they lie in memory (little-endian on every machine we build for), written as 16
// lower-case hex digits (a JSON number would lose bits past 2^53). Bit-identical values hash
// alike; -0.0 and 0.0, or two NaNs of different payloads, do not. Pure functions, and
// ValuesHasher for values that come in pieces (the same hash as of their concatenation).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/span.hpp"

namespace geotrain {

uint64_t values_hash(ConstFloatSpan values);
std::string hash_hex(uint64_t hash);
// values_hash as hash_hex writes it.
inline std::string values_hash_hex(ConstFloatSpan values) { return hash_hex(values_hash(values)); }

// values_hash of consecutive pieces, added in order. Not thread-safe.
class ValuesHasher {
 public:
  ValuesHasher();
  ~ValuesHasher();
  ValuesHasher(const ValuesHasher&) = delete;
  ValuesHasher& operator=(const ValuesHasher&) = delete;
  void add(ConstFloatSpan values);
  uint64_t digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace geotrain
