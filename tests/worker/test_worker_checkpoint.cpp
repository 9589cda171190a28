// Worker snapshots (worker/worker_checkpoint.hpp): what is written comes back bit for bit, and a
// snapshot that is truncated, corrupt, of another configuration or missing is refused with an
// error naming the file.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "tests/temp_dir.hpp"
#include "worker/config.hpp"
#include "worker/snapshot_writer.hpp"
#include "worker/worker_checkpoint.hpp"

using geotrain::InputError;
using geotrain::worker::SnapshotWriter;
using geotrain::worker::WorkerCheckpointState;
using geotrain::worker::WorkerCheckpointStore;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kIdentity = 0x1234abcd;

WorkerCheckpointState sample_state(uint64_t round) {
  WorkerCheckpointState s;
  s.region = "eu-west";
  s.rank = 1;
  s.round = round;
  s.steps = round * 4;
  s.micro_batches = round * 8;
  s.seed = 7;
  s.identity = kIdentity;
  for (int i = 0; i < 10; ++i) s.params.push_back(0.1f * static_cast<float>(i) + 1e-7f);
  s.optimizer_m.assign(10, -0.25f);
  s.optimizer_v.assign(10, 3e-9f);
  s.optimizer_steps = round * 4 - 1;
  s.guard_losses = {2.302585092994046, 1.0000000000000002, 0.1};
  s.guard_skipped = 1;
  s.residuals["critical.65536"] = {1.5f, -2.5f};
  s.residuals["noncritical.0"] = {1e-30f};
  return s;
}

void overwrite_byte(const fs::path& file, size_t at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(at));
  f.put('\x5a');
}

}  // namespace

TEST_CASE("a worker snapshot reads back exactly what was written") {
  geotrain::test::TempDir tmp("worker-ckpt-roundtrip");
  const WorkerCheckpointStore store(tmp.path() / "eu-west-1", 2);
  const auto written = sample_state(3);
  const auto folder = store.write(written);
  CHECK(folder == store.folder(3));
  CHECK(fs::exists(folder / "state.bin"));
  CHECK(fs::exists(folder / "manifest.json"));

  const auto s = store.load(folder, kIdentity);
  CHECK(s.region == "eu-west");
  CHECK(s.rank == 1);
  CHECK(s.round == 3);
  CHECK(s.steps == 12);
  CHECK(s.micro_batches == 24);
  CHECK(s.seed == 7);
  CHECK(s.params == written.params);
  CHECK(s.optimizer_m == written.optimizer_m);
  CHECK(s.optimizer_v == written.optimizer_v);
  CHECK(s.optimizer_steps == 11);
  CHECK(s.guard_losses == written.guard_losses);  // doubles round-trip through JSON exactly
  CHECK(s.guard_skipped == 1);
  CHECK(s.residuals == written.residuals);
}

TEST_CASE("only the newest `keep` worker snapshots are kept, and the newest is restored") {
  geotrain::test::TempDir tmp("worker-ckpt-keep");
  const WorkerCheckpointStore store(tmp.path(), 2);
  for (uint64_t r = 1; r <= 4; ++r) store.write(sample_state(r));
  const auto all = store.list();
  REQUIRE(all.size() == 2);
  CHECK(all[0] == store.folder(4));
  CHECK(all[1] == store.folder(3));
  auto newest = store.restore_latest(kIdentity);
  REQUIRE(newest.has_value());
  CHECK(newest->round == 4);
  CHECK(store.load_round(3, kIdentity).round == 3);
  CHECK_THROWS_WITH_AS(store.load_round(2, kIdentity),
                       doctest::Contains(store.folder(2).string().c_str()), InputError);
  CHECK_THROWS_AS(WorkerCheckpointStore(tmp.path(), 0), InputError);
}

TEST_CASE("snapshots written in the background reach the disk in round order, each reported once") {
  geotrain::test::TempDir tmp("worker-ckpt-background");
  const WorkerCheckpointStore store(tmp.path(), 2);
  SnapshotWriter writer(store);
  for (uint64_t r = 1; r <= 3; ++r) writer.submit(sample_state(r));
  writer.wait();
  const auto written = writer.written();
  REQUIRE(written.size() == 3);
  for (uint64_t r = 1; r <= 3; ++r) {
    CHECK(written[r - 1].round == r);
    CHECK(written[r - 1].folder == store.folder(r));
  }
  CHECK(writer.written().empty());
  // Pruned as the store does it (keep 2), and the newest reads back whole.
  CHECK(store.list() == std::vector<fs::path>{store.folder(3), store.folder(2)});
  CHECK(store.load_round(3, kIdentity).params == sample_state(3).params);
}

TEST_CASE("a snapshot written in the background that fails is rethrown by the next wait") {
  geotrain::test::TempDir tmp("worker-ckpt-background-fails");
  std::ofstream(tmp.path() / "not-a-folder") << "x";  // the store's folder is a file
  const WorkerCheckpointStore store(tmp.path() / "not-a-folder", 2);
  SnapshotWriter writer(store);
  writer.submit(sample_state(1));
  CHECK_THROWS(writer.wait());
  writer.wait();  // reported once
  CHECK(writer.written().empty());
}

TEST_CASE("a truncated worker snapshot is refused with an error naming its file") {
  geotrain::test::TempDir tmp("worker-ckpt-truncated");
  const WorkerCheckpointStore store(tmp.path(), 3);
  const auto folder = store.write(sample_state(5));
  const auto file = folder / "state.bin";
  const auto size = fs::file_size(file);
  CHECK(size == 16 + 33 * sizeof(float));  // header, then 10 + 10 + 10 + 2 + 1 values
  fs::resize_file(file, size - 4);
  CHECK_THROWS_WITH_AS(
      store.load(folder, kIdentity),
      doctest::Contains(fmt::format("{}': {} bytes, the manifest says {} (truncated?)",
                                    file.string(), size - 4, size)
                            .c_str()),
      InputError);
  // The newest that verifies is restored instead, and the skipped one is reported.
  store.write(sample_state(4));
  std::vector<std::string> skipped;
  auto s = store.restore_latest(kIdentity, &skipped);
  REQUIRE(s.has_value());
  CHECK(s->round == 4);
  REQUIRE(skipped.size() == 1);
  CHECK(skipped[0].find("truncated") != std::string::npos);
}

TEST_CASE("a corrupt worker snapshot is refused: checksum, manifest, identity, missing file") {
  geotrain::test::TempDir tmp("worker-ckpt-corrupt");
  const WorkerCheckpointStore store(tmp.path(), 3);
  const auto folder = store.write(sample_state(2));

  SUBCASE("a flipped byte in state.bin") {
    overwrite_byte(folder / "state.bin", 40);
    CHECK_THROWS_WITH_AS(store.load(folder, kIdentity), doctest::Contains("state.bin': checksum"),
                         InputError);
  }
  SUBCASE("a manifest that is not JSON") {
    std::ofstream(folder / "manifest.json") << "{\"format\": 1, ";
    CHECK_THROWS_WITH_AS(store.load(folder, kIdentity),
                         doctest::Contains("manifest.json': not valid JSON"), InputError);
  }
  SUBCASE("a manifest field with a wrong type") {
    std::ofstream(folder / "manifest.json")
        << R"({"format":1,"kind":"worker","region":"a","rank":-1})";
    CHECK_THROWS_WITH_AS(store.load(folder, kIdentity),
                         doctest::Contains("'rank' is -1, must be a non-negative integer"),
                         InputError);
  }
  SUBCASE("a snapshot of another configuration") {
    CHECK_THROWS_WITH_AS(store.load(folder, kIdentity + 1),
                         doctest::Contains("does not match this configuration"), InputError);
  }
  SUBCASE("state.bin missing") {
    fs::remove(folder / "state.bin");
    CHECK_THROWS_WITH_AS(store.load(folder, kIdentity),
                         doctest::Contains("state.bin': cannot be read"), InputError);
  }
  CHECK_FALSE(store.restore_latest(kIdentity + 1).has_value());
}

TEST_CASE("worker.checkpoint is read strictly") {
  using geotrain::worker::parse_worker_config;
  const std::string base = "regions: [a]\nmodel: {arch: \"4-3\"}\n";
  const auto off = parse_worker_config(base, "t.yaml");
  CHECK(off.checkpoint.every == 0);
  CHECK(off.checkpoint.keep == 2);
  const auto on = parse_worker_config(
      base + "worker: {checkpoint: {every: 3, keep: 4, dir: snaps}}\n", "t.yaml");
  CHECK(on.checkpoint.every == 3);
  CHECK(on.checkpoint.keep == 4);
  CHECK(on.checkpoint.dir == "snaps");
  CHECK_THROWS_WITH_AS(parse_worker_config(base + "worker: {checkpoint: {evry: 3}}\n", "t.yaml"),
                       doctest::Contains("evry"), InputError);
  CHECK_THROWS_WITH_AS(parse_worker_config(base + "worker: {checkpoint: {keep: 0}}\n", "t.yaml"),
                       doctest::Contains("worker.checkpoint.keep"), InputError);
  CHECK_THROWS_WITH_AS(parse_worker_config(base + "worker: {checkpoint: 3}\n", "t.yaml"),
                       doctest::Contains("worker.checkpoint must be a mapping"), InputError);
}
