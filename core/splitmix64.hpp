// splitmix64 (Vigna): the generator behind the project's own shuffles and samples
// (worker/data/sampler.cpp, worker/data/text_corpus.cpp), where std:: distributions would differ
// between standard libraries. Pure functions; the caller owns the state.
#pragma once

#include <cstdint>

namespace geotrain {

// The splitmix64 finalizer alone: a bijective mix of 64 bits.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// One step: advances `state` and returns the next output.
inline uint64_t splitmix64(uint64_t& state) { return mix64(state += 0x9e3779b97f4a7c15ull); }

}  // namespace geotrain
