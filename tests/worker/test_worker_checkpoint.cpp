// Worker snapshots (worker/run/worker_checkpoint.hpp): what is written comes back bit for bit, and
// a snapshot that is truncated, corrupt, of another configuration or missing is refused with an
// error naming the file.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "tests/temp_dir.hpp"
#include "worker/backend/step_engine.hpp"
#include "worker/config.hpp"
#include "worker/leader/leader_params.hpp"
#include "worker/run/snapshot_writer.hpp"
#include "worker/run/worker_checkpoint.hpp"

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

// A device-resident backend whose "device" is host memory: the parameters and moments it holds,
// and how often each was downloaded. Training calls are not expected here.
class FakeResident final : public geotrain::worker::ModelBackend,
                           public geotrain::worker::ResidentTraining {
 public:
  std::vector<float> params, m, v;
  int parameter_downloads = 0, optimizer_downloads = 0;
  bool on_device = true;  // false: resident() says this backend trains on the host

  ResidentTraining* resident() override { return on_device ? this : nullptr; }
  void prepare_optimizer(const geotrain::worker::OptimizerConfig&,
                         const std::vector<uint8_t>&) override {}
  void upload_parameters(geotrain::ConstFloatSpan host) override {
    params.assign(host.begin(), host.end());
  }
  void download_parameters(geotrain::FloatSpan host) override {
    REQUIRE(host.size() == params.size());
    std::copy(params.begin(), params.end(), host.begin());
    ++parameter_downloads;
  }
  void upload_optimizer_state(geotrain::ConstFloatSpan m_in,
                              geotrain::ConstFloatSpan v_in) override {
    m.assign(m_in.begin(), m_in.end());
    v.assign(v_in.begin(), v_in.end());
  }
  void download_optimizer_state(geotrain::FloatSpan m_out, geotrain::FloatSpan v_out) override {
    REQUIRE(m_out.size() == m.size());
    REQUIRE(v_out.size() == v.size());
    std::copy(m.begin(), m.end(), m_out.begin());
    std::copy(v.begin(), v.end(), v_out.begin());
    ++optimizer_downloads;
  }
  geotrain::models::BatchResult accumulate(const geotrain::worker::Batch&, bool) override {
    FAIL("not expected");
    return {};
  }
  double reduce_gradient_norm_sq() override { return 0; }
  void apply_step(const geotrain::worker::ResidentStep&) override { FAIL("not expected"); }
  std::unique_ptr<geotrain::worker::LeaderParams> leader_params(geotrain::worker::OverlapMode,
                                                                geotrain::worker::OuterStepConfig,
                                                                uint32_t,
                                                                geotrain::ConstFloatSpan) override {
    return nullptr;
  }
  std::unique_ptr<geotrain::worker::Communicator> connect_region(
      gloo::rendezvous::Store&, int, int, const geotrain::worker::RegionOptions&) override {
    return nullptr;
  }
  geotrain::models::BatchResult forward_backward(geotrain::ConstFloatSpan,
                                                 const geotrain::worker::Batch&,
                                                 geotrain::FloatSpan, bool) override {
    FAIL("not expected");
    return {};
  }
  void reduce_gradient(geotrain::FloatSpan) override {}
  geotrain::models::BatchResult evaluate(geotrain::ConstFloatSpan,
                                         const geotrain::models::BatchView&) override {
    return {};
  }
};

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

TEST_CASE(
    "a snapshot's parameters and AdamW moments come from the device when training is resident, "
    "from the host otherwise") {
  using namespace geotrain::worker;
  constexpr size_t n = 6;
  LocalStepConfig config;
  config.optimizer.kind = OptimizerKind::kAdamW;
  LocalStep step(config, n);
  // The host's copies (the mirror, LocalStep's moments) differ from the device's.
  const std::vector<float> host_params(n, 1.0f), host_m(n, 2.0f), host_v(n, 3.0f);
  step.optimizer().restore(host_m, host_v, 5);
  FakeResident device;
  device.params = {0.5f, -1.5f, 2.5f, 1e-7f, -0.0f, 7.0f};
  device.m.assign(n, -0.25f);
  device.v.assign(n, 4e-9f);

  auto resident = make_step_engine(device, step, config.optimizer, {});
  auto state = capture_worker_state(step, 3, 24, {});
  resident->capture(host_params, state);
  CHECK(state.params == device.params);
  CHECK(state.optimizer_m == device.m);
  CHECK(state.optimizer_v == device.v);
  CHECK(state.optimizer_steps == 5);
  CHECK(state.round == 3);
  CHECK(state.micro_batches == 24);
  CHECK(device.parameter_downloads == 1);
  CHECK(device.optimizer_downloads == 1);
  // Straight into the snapshot: LocalStep's host moments are not rewritten on the way.
  CHECK(std::vector<float>(step.optimizer().first_moment().begin(),
                           step.optimizer().first_moment().end()) == host_m);

  // The same backend, not resident: the host's copies, and nothing downloaded.
  device.on_device = false;
  auto host = make_step_engine(device, step, config.optimizer, {});
  auto on_host = capture_worker_state(step, 3, 24, {});
  host->capture(host_params, on_host);
  CHECK(on_host.params == host_params);
  CHECK(on_host.optimizer_m == host_m);
  CHECK(on_host.optimizer_v == host_v);
  CHECK(device.parameter_downloads == 1);
  CHECK(device.optimizer_downloads == 1);
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
                       doctest::Contains("'worker.checkpoint' must be a mapping"), InputError);
}
