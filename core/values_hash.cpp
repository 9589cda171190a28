#include "core/values_hash.hpp"

#include <fmt/format.h>
#include <xxhash.h>

#include "core/error.hpp"

namespace geotrain {

uint64_t values_hash(ConstFloatSpan values) {
  return XXH3_64bits(values.data(), values.size() * sizeof(float));
}

std::string hash_hex(uint64_t hash) { return fmt::format("{:016x}", hash); }

struct ValuesHasher::State {
  XXH3_state_t* xxh = XXH3_createState();
  ~State() { XXH3_freeState(xxh); }
};

ValuesHasher::ValuesHasher() : state_(std::make_unique<State>()) {
  GT_ASSERT(state_->xxh != nullptr, "XXH3_createState failed");
  XXH3_64bits_reset(state_->xxh);
}
ValuesHasher::~ValuesHasher() = default;

void ValuesHasher::add(ConstFloatSpan values) {
  XXH3_64bits_update(state_->xxh, values.data(), values.size() * sizeof(float));
}

uint64_t ValuesHasher::digest() const { return XXH3_64bits_digest(state_->xxh); }

}  // namespace geotrain
