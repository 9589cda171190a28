// CheckpointStore: durable snapshots of a server's shards (values, momentum, version, round).
//
// Layout: <dir>/ckpt-<round>/ holds shard-<id>.bin per shard and manifest.json:
//   {"format":1, "round":R, "state_hash":H, "shards":[{"id","version","round"}],
//    "files":[{"name","bytes","xxh3"}]}
// Writing is atomic: every file goes into ckpt-<round>.tmp, each is fsync'ed, the manifest last,
// then the folder is renamed into place and the parent fsync'ed; a crash leaves either the old
// set or the new one. The newest `keep` checkpoints are kept.
// Restoring takes the newest checkpoint that verifies (manifest readable, state hash and shard
// ranges match this config, every file's size and checksum match); each one skipped is reported
// with the reason. Blocking file I/O; not thread-safe (one owner).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "server/shard_map.hpp"

namespace geotrain::server {

struct ShardSnapshot {
  ShardRange range;
  uint64_t version = 0;
  uint64_t released_round = 0;
  std::vector<float> values;
  std::vector<float> momentum;
};

struct CheckpointState {
  uint64_t round = 0;
  uint64_t state_hash = 0;
  std::vector<ShardSnapshot> shards;
};

class CheckpointStore {
 public:
  CheckpointStore(std::filesystem::path dir, uint32_t keep);

  const std::filesystem::path& dir() const { return dir_; }
  // Writes `state` atomically and prunes old checkpoints; returns the checkpoint folder.
  std::filesystem::path write(const CheckpointState& state);
  // Reads and verifies one checkpoint folder; InputError naming the problem when it does not.
  CheckpointState load(const std::filesystem::path& folder, uint64_t state_hash,
                       const std::vector<ShardRange>& expected) const;
  // Newest verifying checkpoint; `skipped` gets "<folder>: <reason>" for each refused one.
  std::optional<CheckpointState> restore_latest(uint64_t state_hash,
                                                const std::vector<ShardRange>& expected,
                                                std::vector<std::string>* skipped = nullptr) const;
  // Checkpoint folders, newest first.
  std::vector<std::filesystem::path> list() const;

 private:
  std::filesystem::path dir_;
  uint32_t keep_;
};

}  // namespace geotrain::server
