#include "server/checkpoint.hpp"

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/durable_file.hpp"
#include "core/error.hpp"

namespace geotrain::server {

namespace fs = std::filesystem;

namespace {

constexpr uint32_t kMagic = 0x4b435447u;  // "GTCK"
constexpr uint32_t kFormat = 1;

struct FileHeader {
  uint32_t magic, format, id, pad;
  uint64_t offset, count, version, released_round;
};
static_assert(sizeof(FileHeader) == 48);

std::string folder_name(uint64_t round) { return fmt::format("ckpt-{:012}", round); }

// A manifest number: a non-negative JSON integer. get<uint64_t>() alone would convert a float or
// a negative number, and a float out of range is undefined behaviour (found by
// fuzz/checkpoint.cpp under UBSan).
uint64_t manifest_uint(const nlohmann::json& object, const char* key) {
  const auto& v = object.at(key);
  GT_REQUIRE(v.is_number_unsigned(), "manifest field '{}' is {}, must be a non-negative integer",
             key, v.dump());
  return v.get<uint64_t>();
}

}  // namespace

CheckpointStore::CheckpointStore(fs::path dir, uint32_t keep) : dir_(std::move(dir)), keep_(keep) {
  GT_REQUIRE(keep_ >= 1, "checkpoint keep is {}, must be at least 1", keep_);
}

fs::path CheckpointStore::write(const CheckpointState& state) {
  fs::create_directories(dir_);
  const fs::path final_dir = dir_ / folder_name(state.round);
  const fs::path tmp = dir_ / (folder_name(state.round) + ".tmp");
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  nlohmann::json manifest{
      {"format", kFormat}, {"round", state.round}, {"state_hash", state.state_hash}};
  manifest["shards"] = nlohmann::json::array();
  manifest["files"] = nlohmann::json::array();
  for (const auto& s : state.shards) {
    GT_ASSERT(s.values.size() == s.range.count && s.momentum.size() == s.range.count,
              "snapshot of shard {} has sizes {} {}, range {}", s.range.id, s.values.size(),
              s.momentum.size(), s.range.count);
    FileHeader h{kMagic,         kFormat,       s.range.id, 0,
                 s.range.offset, s.range.count, s.version,  s.released_round};
    std::string bytes(sizeof h + 2 * s.range.count * sizeof(float), '\0');
    std::memcpy(bytes.data(), &h, sizeof h);
    std::memcpy(bytes.data() + sizeof h, s.values.data(), s.values.size() * sizeof(float));
    std::memcpy(bytes.data() + sizeof h + s.values.size() * sizeof(float), s.momentum.data(),
                s.momentum.size() * sizeof(float));
    const std::string name = fmt::format("shard-{}.bin", s.range.id);
    write_file_synced(tmp / name, bytes);
    manifest["files"].push_back({{"name", name},
                                 {"bytes", bytes.size()},
                                 {"xxh3", XXH3_64bits(bytes.data(), bytes.size())}});
    manifest["shards"].push_back(
        {{"id", s.range.id}, {"version", s.version}, {"round", s.released_round}});
  }
  write_file_synced(tmp / "manifest.json", manifest.dump(2) + "\n");
  commit_folder(tmp, final_dir);
  auto all = list();
  for (size_t i = keep_; i < all.size(); ++i) fs::remove_all(all[i]);
  return final_dir;
}

std::vector<fs::path> CheckpointStore::list() const {
  std::vector<fs::path> out;
  if (!fs::is_directory(dir_)) return out;
  for (const auto& e : fs::directory_iterator(dir_)) {
    auto name = e.path().filename().string();
    if (e.is_directory() && name.starts_with("ckpt-") && name.find(".tmp") == std::string::npos)
      out.push_back(e.path());
  }
  std::sort(out.begin(), out.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename() > b.filename(); });
  return out;
}

CheckpointState CheckpointStore::load(const fs::path& folder, uint64_t state_hash,
                                      const std::vector<ShardRange>& expected) const {
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(read_binary_file(folder / "manifest.json"));
  } catch (const nlohmann::json::exception& e) {
    GT_REQUIRE(false, "manifest.json is not valid JSON ({})", e.what());
  }
  CheckpointState state;
  try {
    GT_REQUIRE(manifest_uint(manifest, "format") == kFormat, "manifest format {} is not {}",
               manifest.at("format").dump(), kFormat);
    state.round = manifest_uint(manifest, "round");
    state.state_hash = manifest_uint(manifest, "state_hash");
    GT_REQUIRE(state.state_hash == state_hash,
               "state hash {:#x} does not match this configuration's {:#x} (table, shards or "
               "optimizer changed)",
               state.state_hash, state_hash);
    const auto& files = manifest.at("files");
    GT_REQUIRE(files.size() == expected.size(),
               "manifest lists {} shard files, this server owns {} shards", files.size(),
               expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      const auto name = files[i].at("name").get<std::string>();
      GT_REQUIRE(name == fmt::format("shard-{}.bin", expected[i].id),
                 "manifest file {} is '{}', expected shard-{}.bin", i, name, expected[i].id);
      const std::string bytes = read_binary_file(folder / name);
      GT_REQUIRE(bytes.size() == manifest_uint(files[i], "bytes"), "{}: {} bytes, manifest says {}",
                 name, bytes.size(), files[i].at("bytes").dump());
      const uint64_t sum = XXH3_64bits(bytes.data(), bytes.size());
      GT_REQUIRE(sum == manifest_uint(files[i], "xxh3"),
                 "{}: checksum {:#x} does not match the manifest's {:#x}", name, sum,
                 manifest_uint(files[i], "xxh3"));
      FileHeader h;
      GT_REQUIRE(bytes.size() >= sizeof h, "{}: truncated header", name);
      std::memcpy(&h, bytes.data(), sizeof h);
      GT_REQUIRE(h.magic == kMagic && h.format == kFormat, "{}: bad magic or format", name);
      GT_REQUIRE(
          h.id == expected[i].id && h.offset == expected[i].offset && h.count == expected[i].count,
          "{}: shard {} range [{}, +{}) does not match this configuration's [{}, +{})", name, h.id,
          h.offset, h.count, expected[i].offset, expected[i].count);
      GT_REQUIRE(bytes.size() == sizeof h + 2 * h.count * sizeof(float),
                 "{}: {} bytes for {} elements", name, bytes.size(), h.count);
      ShardSnapshot s{expected[i], h.version, h.released_round, std::vector<float>(h.count),
                      std::vector<float>(h.count)};
      std::memcpy(s.values.data(), bytes.data() + sizeof h, h.count * sizeof(float));
      std::memcpy(s.momentum.data(), bytes.data() + sizeof h + h.count * sizeof(float),
                  h.count * sizeof(float));
      state.shards.push_back(std::move(s));
    }
  } catch (const nlohmann::json::exception& e) {
    GT_REQUIRE(false, "manifest.json lacks a field or has a wrong type ({})", e.what());
  }
  return state;
}

std::optional<CheckpointState> CheckpointStore::restore_latest(
    uint64_t state_hash, const std::vector<ShardRange>& expected,
    std::vector<std::string>* skipped) const {
  for (const auto& folder : list()) {
    try {
      return load(folder, state_hash, expected);
    } catch (const InputError& e) {
      if (skipped) skipped->push_back(fmt::format("{}: {}", folder.string(), e.what()));
    }
  }
  return std::nullopt;
}

}  // namespace geotrain::server
