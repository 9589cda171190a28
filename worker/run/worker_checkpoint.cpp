#include "worker/run/worker_checkpoint.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include "core/durable_file.hpp"
#include "core/error.hpp"
#include "worker/config.hpp"
#include "worker/training/local_step.hpp"

namespace geotrain::worker {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr uint32_t kMagic = 0x4b575447u;  // "GTWK"
constexpr uint32_t kFormat = 1;
constexpr const char* kStateFile = "state.bin";

struct FileHeader {
  uint32_t magic, format;
  uint64_t round;
};
static_assert(sizeof(FileHeader) == 16);

std::string folder_name(uint64_t round) { return fmt::format("ckpt-{:012}", round); }

// A manifest number: a non-negative JSON integer (as server/checkpoint.cpp reads them).
uint64_t manifest_uint(const json& object, const char* key) {
  const auto& v = object.at(key);
  GT_REQUIRE(v.is_number_unsigned(), "manifest field '{}' is {}, must be a non-negative integer",
             key, v.dump());
  return v.get<uint64_t>();
}

// The sections of a state in file order, as (name, values).
std::vector<std::pair<std::string, const std::vector<float>*>> sections_of(
    const WorkerCheckpointState& s) {
  std::vector<std::pair<std::string, const std::vector<float>*>> out{
      {"params", &s.params}, {"optimizer.m", &s.optimizer_m}, {"optimizer.v", &s.optimizer_v}};
  for (const auto& [name, values] : s.residuals) out.emplace_back("ef." + name, &values);
  return out;
}

uint64_t mix(uint64_t h, uint64_t v) {  // splitmix64-style combination
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}
uint64_t mix(uint64_t h, const std::string& s) {
  for (unsigned char c : s) h = mix(h, c);
  return mix(h, s.size());
}

}  // namespace

uint64_t worker_identity(const WorkerConfig& c, uint64_t layout_hash) {
  uint64_t h = mix(0x47545754u, layout_hash);
  for (const auto& r : c.regions) h = mix(h, r);
  h = mix(h, c.workers.largest());  // a uniform fleet hashes as before the per-region counts
  if (c.workers.uneven())
    for (const auto& r : c.regions) h = mix(h, c.workers.in(r));
  h = mix(h, c.batch_size.of_rank(c.workers, 0));  // a uniform fleet hashes as before
  if (c.batch_size.uneven())
    for (const auto& r : c.regions) h = mix(h, c.batch_size.in(r));
  h = mix(h, c.accumulation_steps);
  h = mix(h, c.local_steps);
  h = mix(h, c.seed);
  h = mix(h, static_cast<uint64_t>(c.optimizer.kind));
  // Muon: which tensors hold momentum and which Adam's moments (other kinds hash as before).
  if (c.optimizer.kind == OptimizerKind::kMuon)
    for (const auto& glob : c.optimizer.adamw_tensors) h = mix(h, glob);
  h = mix(h, c.data.kind);
  // ZeRO: a snapshot holds its worker's range of the optimizer state (unsharded hash as before).
  if (c.zero_stage > 0) h = mix(h, uint64_t{c.zero_stage});
  return h;
}

fs::path worker_checkpoint_dir(const fs::path& run_dir, const fs::path& dir,
                               const std::string& region, uint32_t rank) {
  const fs::path base = dir.is_absolute() ? dir : run_dir / dir;
  return base / fmt::format("{}-{}", region, rank);
}

WorkerCheckpointStore::WorkerCheckpointStore(fs::path dir, uint32_t keep)
    : dir_(std::move(dir)), keep_(keep) {
  GT_REQUIRE(keep_ >= 1, "worker.checkpoint.keep is {}, must be at least 1", keep_);
}

fs::path WorkerCheckpointStore::folder(uint64_t round) const { return dir_ / folder_name(round); }

fs::path WorkerCheckpointStore::write(const WorkerCheckpointState& state) const {
  fs::create_directories(dir_);
  const fs::path final_dir = folder(state.round);
  const fs::path tmp = dir_ / (folder_name(state.round) + ".tmp");
  fs::remove_all(tmp);
  fs::create_directories(tmp);

  // state.bin: the header, then each section's values straight from the state (no copy of the
  // whole file in memory: GPT-2 124M's with AdamW is 1.5 GB).
  const auto sections = sections_of(state);
  const FileHeader h{kMagic, kFormat, state.round};
  std::vector<std::string_view> parts{{reinterpret_cast<const char*>(&h), sizeof h}};
  size_t file_bytes = sizeof h;
  json section_list = json::array();
  for (const auto& [name, v] : sections) {
    parts.emplace_back(reinterpret_cast<const char*>(v->data()), v->size() * sizeof(float));
    file_bytes += v->size() * sizeof(float);
    section_list.push_back({{"name", name}, {"count", v->size()}});
  }
  const uint64_t checksum = write_parts_synced(tmp / kStateFile, parts);
  const json manifest{
      {"format", kFormat},
      {"kind", "worker"},
      {"region", state.region},
      {"rank", state.rank},
      {"round", state.round},
      {"steps", state.steps},
      {"micro_batches", state.micro_batches},
      {"seed", state.seed},
      {"identity", state.identity},
      {"optimizer_steps", state.optimizer_steps},
      {"guard_skipped", state.guard_skipped},
      {"guard_losses", state.guard_losses},
      {"sections", section_list},
      {"files", json::array({{{"name", kStateFile}, {"bytes", file_bytes}, {"xxh3", checksum}}})}};
  write_file_synced(tmp / "manifest.json", manifest.dump(2) + "\n");
  commit_folder(tmp, final_dir);
  const auto all = list();
  for (size_t i = keep_; i < all.size(); ++i) fs::remove_all(all[i]);
  return final_dir;
}

std::vector<fs::path> WorkerCheckpointStore::list() const {
  std::vector<fs::path> out;
  if (!fs::is_directory(dir_)) return out;
  for (const auto& e : fs::directory_iterator(dir_)) {
    const auto name = e.path().filename().string();
    if (e.is_directory() && name.starts_with("ckpt-") && name.find(".tmp") == std::string::npos)
      out.push_back(e.path());
  }
  std::sort(out.begin(), out.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename() > b.filename(); });
  return out;
}

WorkerCheckpointState WorkerCheckpointStore::load(const fs::path& dir, uint64_t identity) const {
  const fs::path manifest_file = dir / "manifest.json";
  const fs::path state_file = dir / kStateFile;
  // Every problem names the file it is in.
  const auto where = [&](const fs::path& f, const std::string& why) {
    return fmt::format("worker checkpoint '{}': {}", f.string(), why);
  };
  json m;
  try {
    m = json::parse(read_binary_file(manifest_file));
  } catch (const json::exception& e) {
    throw InputError(where(manifest_file, fmt::format("not valid JSON ({})", e.what())));
  } catch (const InputError& e) {
    throw InputError(where(manifest_file, e.what()));
  }
  WorkerCheckpointState s;
  std::vector<std::pair<std::string, uint64_t>> sections;
  uint64_t bytes_expected = 0, sum_expected = 0;
  try {
    GT_REQUIRE(manifest_uint(m, "format") == kFormat, "format {} is not {}", m.at("format").dump(),
               kFormat);
    GT_REQUIRE(m.at("kind") == "worker", "kind is {}, not \"worker\"", m.at("kind").dump());
    s.region = m.at("region").get<std::string>();
    s.rank = static_cast<uint32_t>(manifest_uint(m, "rank"));
    s.round = manifest_uint(m, "round");
    s.steps = manifest_uint(m, "steps");
    s.micro_batches = manifest_uint(m, "micro_batches");
    s.seed = manifest_uint(m, "seed");
    s.identity = manifest_uint(m, "identity");
    s.optimizer_steps = manifest_uint(m, "optimizer_steps");
    s.guard_skipped = manifest_uint(m, "guard_skipped");
    for (const auto& l : m.at("guard_losses")) {
      GT_REQUIRE(l.is_number(), "guard_losses holds {}, not a number", l.dump());
      s.guard_losses.push_back(l.get<double>());
    }
    GT_REQUIRE(s.identity == identity,
               "identity {:#x} does not match this configuration's {:#x} (model, regions, workers "
               "per region, batch, local steps, seed, optimizer or data changed)",
               s.identity, identity);
    for (const auto& sec : m.at("sections"))
      sections.emplace_back(sec.at("name").get<std::string>(), manifest_uint(sec, "count"));
    const auto& files = m.at("files");
    GT_REQUIRE(files.is_array() && files.size() == 1 && files[0].at("name") == kStateFile,
               "files must list {} alone, not {}", kStateFile, files.dump());
    bytes_expected = manifest_uint(files[0], "bytes");
    sum_expected = manifest_uint(files[0], "xxh3");
  } catch (const json::exception& e) {
    throw InputError(
        where(manifest_file, fmt::format("a field is missing or has a wrong type ({})", e.what())));
  } catch (const InputError& e) {
    throw InputError(where(manifest_file, e.what()));
  }

  std::string bytes;
  try {
    bytes = read_binary_file(state_file);
  } catch (const InputError& e) {
    throw InputError(where(state_file, "cannot be read (missing?)"));
  }
  if (bytes.size() != bytes_expected)
    throw InputError(where(state_file, fmt::format("{} bytes, the manifest says {} (truncated?)",
                                                   bytes.size(), bytes_expected)));
  if (const uint64_t sum = checksum_xxh3(bytes); sum != sum_expected)
    throw InputError(where(state_file, fmt::format("checksum {:#x} does not match the manifest's "
                                                   "{:#x} (corrupt)",
                                                   sum, sum_expected)));
  FileHeader h{};
  if (bytes.size() < sizeof h) throw InputError(where(state_file, "shorter than its header"));
  std::memcpy(&h, bytes.data(), sizeof h);
  if (h.magic != kMagic || h.format != kFormat || h.round != s.round)
    throw InputError(where(state_file, fmt::format("header (magic {:#x}, format {}, round {}) is "
                                                   "not a worker snapshot of round {}",
                                                   h.magic, h.format, h.round, s.round)));
  uint64_t floats = 0;
  for (const auto& [_, n] : sections) {
    if (n > (bytes.size() - sizeof h) / sizeof(float))
      throw InputError(where(manifest_file, fmt::format("a section of {} values is larger than "
                                                        "the file",
                                                        n)));
    floats += n;
  }
  if (sizeof h + floats * sizeof(float) != bytes.size())
    throw InputError(where(state_file, fmt::format("{} bytes, its sections need {}", bytes.size(),
                                                   sizeof h + floats * sizeof(float))));
  size_t at = sizeof h;
  for (const auto& [name, n] : sections) {
    std::vector<float> values(n);
    if (n > 0) std::memcpy(values.data(), bytes.data() + at, n * sizeof(float));
    at += n * sizeof(float);
    if (name == "params")
      s.params = std::move(values);
    else if (name == "optimizer.m")
      s.optimizer_m = std::move(values);
    else if (name == "optimizer.v")
      s.optimizer_v = std::move(values);
    else if (name.starts_with("ef."))
      s.residuals[name.substr(3)] = std::move(values);
    else
      throw InputError(where(manifest_file, fmt::format("unknown section '{}'", name)));
  }
  return s;
}

WorkerCheckpointState WorkerCheckpointStore::load_round(uint64_t round, uint64_t identity) const {
  const auto dir = folder(round);
  GT_REQUIRE(fs::is_directory(dir),
             "worker checkpoint '{}' does not exist: the region's other workers resume from "
             "round {}, this one has no snapshot of it",
             dir.string(), round);
  return load(dir, identity);
}

std::optional<WorkerCheckpointState> WorkerCheckpointStore::restore_latest(
    uint64_t identity, std::vector<std::string>* skipped) const {
  for (const auto& dir : list()) {
    try {
      return load(dir, identity);
    } catch (const InputError& e) {
      if (skipped) skipped->push_back(e.what());
    }
  }
  return std::nullopt;
}

WorkerCheckpointState capture_worker_state(const LocalStep& step, uint64_t round,
                                           uint64_t micro_batches,
                                           std::map<std::string, std::vector<float>> residuals) {
  WorkerCheckpointState s;
  s.round = round;
  s.steps = step.steps();
  s.micro_batches = micro_batches;
  s.optimizer_steps = step.optimizer().steps();
  s.guard_losses = step.guard().losses();
  s.guard_skipped = step.guard().skipped();
  s.residuals = std::move(residuals);
  return s;
}

void restore_worker_state(const WorkerCheckpointState& state, const fs::path& folder,
                          LocalStep& step, FloatSpan params) {
  GT_REQUIRE(state.params.size() == params.size(),
             "worker snapshot '{}': {} parameters, the model has {}", folder.string(),
             state.params.size(), params.size());
  step.optimizer().restore(state.optimizer_m, state.optimizer_v, state.optimizer_steps);
  step.guard().restore(state.guard_losses, state.guard_skipped);
  std::copy(state.params.begin(), state.params.end(), params.begin());
}

}  // namespace geotrain::worker
