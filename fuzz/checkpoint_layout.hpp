// The configuration the checkpoint fuzz target loads against, shared with the seed generator
// (fuzz/make_seeds.cpp) so that its seeds are checkpoints that load.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "server/shard_map.hpp"

namespace geotrain::fuzz {

// Between the files of one checkpoint in a fuzz input (see fuzz/checkpoint.cpp).
inline constexpr std::string_view kCheckpointSeparator = "\n%%geotrain-file%%\n";
inline constexpr uint64_t kCheckpointStateHash = 0x5eed5eed5eed5eedull;

inline std::vector<server::ShardRange> checkpoint_ranges() { return {{0, 0, 6, 0}, {1, 6, 3, 0}}; }

}  // namespace geotrain::fuzz
