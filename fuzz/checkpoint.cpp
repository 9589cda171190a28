// Fuzz target: the checkpoint loader, server::CheckpointStore::load (and through it
// restore_latest's refusal of a bad checkpoint).
//
// Input: [flags] then the checkpoint's files separated by kSeparator:
//   manifest.json <sep> shard-0.bin <sep> shard-1.bin [<sep> shard-2.bin ...]
// written into a scratch folder and loaded against a fixed configuration: state hash
// kStateHash, two shards, {id 0, [0, +6)} and {id 1, [6, +3)} (fuzz::checkpoint_ranges()).
//   flags bit 0: set each manifest file entry's "bytes" and "xxh3" to those of the file given
//                (when the manifest parses as JSON with a "files" list), so that mutations of the
//                shard files reach the checks behind the checksum.
// Contract checked: load throws only InputError; a checkpoint it accepts has one snapshot per
// expected shard, with that shard's range and `count` values and momenta.
// Seeds are checkpoints written by CheckpointStore::write (fuzz/make_seeds.cpp).
#include "server/checkpoint.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "fuzz/checkpoint_layout.hpp"
#include "fuzz/fuzz_target.hpp"

using namespace geotrain;
namespace fs = std::filesystem;

namespace {

// The manifest with each file entry's size and checksum set to those of `files`.
std::string fix_manifest(std::string_view manifest, const std::vector<std::string_view>& files) {
  nlohmann::json m = nlohmann::json::parse(manifest, nullptr, false);
  if (m.is_discarded() || !m.is_object() || !m.contains("files") || !m["files"].is_array())
    return std::string(manifest);
  auto& entries = m["files"];
  for (size_t i = 0; i < entries.size() && i < files.size(); ++i) {
    if (!entries[i].is_object()) continue;
    entries[i]["bytes"] = files[i].size();
    entries[i]["xxh3"] = XXH3_64bits(files[i].data(), files[i].size());
  }
  return m.dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fs::path store_dir = fuzz::scratch_dir() / "checkpoints";
  static const fs::path folder = store_dir / "ckpt-000000000001";
  static const bool made = fs::create_directories(folder);
  (void)made;

  fuzz::InputReader in(data, size);
  const uint8_t flags = in.byte();
  const auto rest = in.rest();
  const std::string_view text(reinterpret_cast<const char*>(rest.data()), rest.size());
  const auto parts = fuzz::split(text, fuzz::kCheckpointSeparator);
  const std::vector<std::string_view> files(parts.begin() + 1, parts.end());

  // Only the files of this input: shard files of a previous input would be read otherwise.
  for (const auto& e : fs::directory_iterator(folder)) fs::remove(e.path());
  fuzz::write_file(folder / "manifest.json",
                   flags & 0x01 ? fix_manifest(parts[0], files) : std::string(parts[0]));
  for (size_t i = 0; i < files.size(); ++i)
    fuzz::write_file(folder / fmt::format("shard-{}.bin", i), files[i]);

  const server::CheckpointStore store(store_dir, 1);
  const auto expected = fuzz::checkpoint_ranges();
  server::CheckpointState state;
  if (!fuzz::accepts([&] { state = store.load(folder, fuzz::kCheckpointStateHash, expected); })) {
    std::vector<std::string> skipped;
    GT_FUZZ_CHECK(!store.restore_latest(fuzz::kCheckpointStateHash, expected, &skipped),
                  "restore_latest accepted a checkpoint that load refused");
    GT_FUZZ_CHECK(skipped.size() == 1, "restore_latest did not report the refused checkpoint");
    return 0;
  }
  GT_FUZZ_CHECK(state.shards.size() == expected.size(), "a loaded checkpoint lacks shards");
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& s = state.shards[i];
    GT_FUZZ_CHECK(s.range.id == expected[i].id && s.range.count == expected[i].count,
                  "a loaded shard has another range");
    GT_FUZZ_CHECK(s.values.size() == s.range.count && s.momentum.size() == s.range.count,
                  "a loaded shard has the wrong number of values");
  }
  return 0;
}
