// The hash by which copies of the global model are compared (core/values_hash.hpp).
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/values_hash.hpp"

using namespace geotrain;

TEST_CASE("values hashed in pieces hash as their concatenation, and one bit changes the hash") {
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.001f * static_cast<float>(i) - 0.3f;
  const uint64_t whole = values_hash(v);
  ValuesHasher pieces;
  pieces.add(ConstFloatSpan(v).subspan(0, 1));
  pieces.add(ConstFloatSpan(v).subspan(1, 499));
  pieces.add(ConstFloatSpan(v).subspan(500));
  CHECK(pieces.digest() == whole);

  auto w = v;
  w[777] = std::nextafter(w[777], 1.0f);  // the smallest change there is
  CHECK(values_hash(w) != whole);
  // -0.0 == 0.0 as numbers, not as bits: a copy must be the same bits.
  std::vector<float> zero{0.0f}, minus_zero{-0.0f};
  CHECK(values_hash(zero) != values_hash(minus_zero));
  CHECK(hash_hex(0x0123456789abcdefull) == "0123456789abcdef");
  CHECK(hash_hex(1).size() == 16);
}
