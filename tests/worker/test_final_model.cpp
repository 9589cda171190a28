// The end of a run (docs/training.md, "The end of a run"): leaders (RegionSync) flush what error
// feedback holds to real in-process ParamServers (one per region, over inproc://) and pull the
// global model. Checks the closed forms: with the outer lr 1 and no momentum the global model is
// every region's whole progress averaged, whatever the codecs; fp32 rounds leave nothing to flush.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <future>
#include <thread>

#include "compression/payload.hpp"
#include "server/param_server.hpp"
#include "wire/channel.hpp"
#include "wire/client.hpp"
#include "worker/leader/leader_session.hpp"
#include "worker/leader/region_sync.hpp"

using namespace geotrain;
using namespace std::chrono_literals;

namespace {

// Regions a, b, c; each runs a server owning a third of crit.w (critical, 1024 elements) +
// free.w (2048). `server_yaml`: more keys of the server section.
class Regions {
 public:
  Regions(const std::string& name, const std::string& server_yaml)
      : dir_(std::filesystem::temp_directory_path() /
             fmt::format("geotrain-final-{}-{}", name, ::getpid())),
        config_(server::parse_server_config(fmt::format(R"(
regions: [a, b, c]
model:
  tensors: [{{name: crit.w, size: 1024}}, {{name: free.w, size: 2048}}]
  critical: ["crit.*"]
server:
  dead_after_ms: 60000
  run_dir: "{}"
{}
)",
                                                        dir_.string(), server_yaml))) {
    for (uint32_t r = 0; r < 3; ++r) {
      server::ServerOptions options;
      options.endpoint = fmt::format("inproc://final-{}-server-{}", name, r);
      options.poll = 5ms;
      options.write_metrics = false;
      servers_.push_back(std::make_unique<server::ParamServer>(config_, r, context_, options));
    }
    resume();
  }
  ~Regions() {
    threads_.clear();
    std::filesystem::remove_all(dir_);
  }

  ParamTable table() const { return ParamTable(config_.tensors, config_.critical); }
  worker::SyncConfig sync(const std::string& region, const std::string& codec) {
    worker::SyncConfig c;
    c.region = region;
    for (uint32_t r = 0; r < 3; ++r)
      c.servers.push_back({config_.regions[r], servers_[r]->endpoint(), std::nullopt});
    c.critical_codec = c.noncritical_codec = codec;
    c.timeout = 20s;
    return c;
  }
  wire::Context& context() { return context_; }

  // The servers' loops stop (their sockets keep what arrives) so that their shards can be read,
  // and go on with resume().
  void pause() { threads_.clear(); }
  void resume() {
    for (auto& s : servers_)
      threads_.emplace_back([s = s.get()](std::stop_token st) { s->run(st); });
  }
  // While paused: the global values, the outer momentum, and every shard's version.
  std::vector<float> values(size_t n) const { return gather(n, &server::Shard::values); }
  std::vector<float> momentum(size_t n) const { return gather(n, &server::Shard::momentum); }
  std::vector<uint64_t> versions() const {
    std::vector<uint64_t> out;
    for (const auto& s : servers_)
      for (const auto& shard : s->shards()) out.push_back(shard.version());
    return out;
  }
  // The payload bytes of one fp32 copy of every shard (what the final pulls move per region).
  uint64_t fp32_bytes_of_all_shards() const {
    uint64_t bytes = 0;
    for (const auto& s : servers_)
      for (const auto& shard : s->shards())
        bytes += compression::kHeaderBytes + shard.range().count * sizeof(float);
    return bytes;
  }

 private:
  std::vector<float> gather(size_t n, ConstFloatSpan (server::Shard::*of)() const) const {
    std::vector<float> out(n);
    for (const auto& s : servers_)
      for (const auto& shard : s->shards()) {
        const auto v = (shard.*of)();
        std::copy(v.begin(), v.end(),
                  out.begin() + static_cast<std::ptrdiff_t>(shard.range().offset));
      }
    return out;
  }

  std::filesystem::path dir_;
  server::ServerConfig config_;
  wire::Context context_;
  std::vector<std::unique_ptr<server::ParamServer>> servers_;
  std::vector<std::jthread> threads_;
};

// Region r's step per round: a different ramp per region.
std::vector<float> step_of(size_t r, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.01f * float(r + 1) * float(int((i * 7 + r) % 13) - 6);
  return v;
}

// ThreeLeaders of a, b and c with `codec` for every tensor, connected.
struct ThreeLeaders {
  ThreeLeaders(Regions& d, const ParamTable& table, const std::string& codec) {
    for (const char* r : {"a", "b", "c"})
      all.push_back(std::make_unique<worker::RegionSync>(table, d.sync(r, codec), d.context()));
    for (auto& l : all) l->connect();
  }
  // Every leader's call at once (a synchronous round or the flush waits for all of them).
  template <typename F>
  auto each(F f) {
    std::vector<std::future<decltype(f(size_t{0}))>> futures;
    for (size_t r = 0; r < all.size(); ++r) futures.push_back(std::async(std::launch::async, f, r));
    std::vector<decltype(f(size_t{0}))> out;
    for (auto& fu : futures) out.push_back(fu.get());
    return out;
  }
  // Every region flushes one step of progress not pushed (its step_of) and pulls the global model.
  void flush_one_step() {
    each([&](size_t r) {
      const auto base = all[r]->base();
      std::vector<float> local(base.begin(), base.end());
      const auto step = step_of(r, local.size());
      for (size_t i = 0; i < local.size(); ++i) local[i] += step[i];
      return all[r]->flush(local).segments_owed;
    });
  }
  // A synchronous round: every region moves its copy by its step and exchanges it.
  void round() {
    each([&](size_t r) {
      auto& l = *all[r];
      std::vector<float> local(l.base().begin(), l.base().end());
      const auto step = step_of(r, local.size());
      for (size_t i = 0; i < local.size(); ++i) local[i] += step[i];
      return l.exchange(local).round;
    });
  }
  // Region r's flush, in the background, with its parameters at the global values it holds.
  std::future<worker::FlushReport> flush_async(size_t r) {
    std::vector<float> local(all[r]->base().begin(), all[r]->base().end());
    return std::async(std::launch::async, [this, r, local = std::move(local)]() mutable {
      return all[r]->flush(local);
    });
  }
  std::vector<std::unique_ptr<worker::RegionSync>> all;
};

bool same_bits(ConstFloatSpan x, ConstFloatSpan y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE(
    "after the flush of onebit with error feedback both ways, every region holds the servers' "
    "values bit for bit: the mean of the regions' parameters, residuals left out") {
  Regions d("onebit", "  downlink_codec: onebit");
  const ParamTable table = d.table();
  const size_t n = table.total_elements();
  ThreeLeaders leaders(d, table, "onebit");
  const int rounds = 6;
  for (int t = 0; t < rounds; ++t) leaders.round();
  // Half a round of progress each region never pushed: the flush owes it.
  std::vector<std::vector<float>> local(3), before(3);
  for (size_t r = 0; r < 3; ++r) {
    const auto base = leaders.all[r]->base();
    before[r].assign(base.begin(), base.end());
    local[r] = before[r];
    const auto step = step_of(r, n);
    for (size_t i = 0; i < n; ++i) local[r][i] += 0.5f * step[i];
  }
  d.pause();
  const auto values_before = d.values(n);
  d.resume();
  // Before: the regions' copies lack what the downlink residuals hold.
  CHECK_FALSE(same_bits(before[0], values_before));

  const auto reports = leaders.each([&](size_t r) { return leaders.all[r]->flush(local[r]); });
  d.pause();
  const auto values = d.values(n);
  double err = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    const double want = (double(local[0][i]) + double(local[1][i]) + double(local[2][i])) / 3.0;
    err += (values[i] - want) * (values[i] - want);
    norm += want * want;
  }
  MESSAGE("distance of the global model to the mean of the regions' parameters: ",
          std::sqrt(err / norm));
  CHECK(std::sqrt(err / norm) < 1e-6);
  for (size_t r = 0; r < 3; ++r) {
    CAPTURE(r);
    CHECK(same_bits(leaders.all[r]->base(), values));
    // Each owed every segment (the half step): fp32, the whole table once; the pulls: every
    // shard in full.
    CHECK(reports[r].bytes_pushed ==
          reports[r].segments_owed * compression::kHeaderBytes + n * sizeof(float));
    CHECK(reports[r].bytes_pulled == d.fp32_bytes_of_all_shards());
  }
}

TEST_CASE(
    "after synchronous onebit rounds the flush pushes nothing and the global model is the "
    "regions' own parameters") {
  Regions d("onebit", "  downlink_codec: onebit");
  const ParamTable table = d.table();
  const size_t n = table.total_elements();
  ThreeLeaders leaders(d, table, "onebit");
  for (int t = 0; t < 4; ++t) leaders.round();
  std::vector<std::vector<float>> before;
  for (const auto& l : leaders.all) before.emplace_back(l->base().begin(), l->base().end());
  // The same downlink payloads: every region holds the same copy, short of the servers' values.
  CHECK(same_bits(before[0], before[1]));
  CHECK(same_bits(before[0], before[2]));
  d.pause();
  CHECK_FALSE(same_bits(before[0], d.values(n)));
  d.resume();
  const auto reports = leaders.each([&](size_t r) { return leaders.all[r]->flush(before[r]); });
  d.pause();
  const auto values = d.values(n);
  double worst = 0;
  for (size_t i = 0; i < n; ++i)
    worst = std::max(worst, std::abs(double(values[i]) - double(before[0][i])) /
                                std::max(1e-3, std::abs(double(before[0][i]))));
  CHECK(worst < 1e-5);
  for (size_t r = 0; r < 3; ++r) {
    CAPTURE(r);
    CHECK(reports[r].bytes_pushed == 0);
    CHECK(same_bits(leaders.all[r]->base(), values));
  }
}

TEST_CASE("after fp32 synchronous rounds at lr 1 the flush changes nothing and pushes nothing") {
  Regions d("fp32", "");
  const ParamTable table = d.table();
  ThreeLeaders leaders(d, table, "fp32");
  for (int t = 0; t < 3; ++t) leaders.round();
  d.pause();
  const auto versions = d.versions();
  d.resume();
  std::vector<std::vector<float>> before;
  for (const auto& l : leaders.all) before.emplace_back(l->base().begin(), l->base().end());
  CHECK(same_bits(before[0], before[1]));
  CHECK(same_bits(before[0], before[2]));
  // The regions' parameters are the global values (a synchronous region takes them).
  const auto reports = leaders.each([&](size_t r) { return leaders.all[r]->flush(before[r]); });
  d.pause();
  CHECK(d.versions() == versions);  // no new version: nothing was applied
  for (size_t r = 0; r < 3; ++r) {
    CAPTURE(r);
    CHECK(same_bits(leaders.all[r]->base(), before[r]));
    CHECK(reports[r].bytes_pushed == 0);
    CHECK(reports[r].segments_owed == 0);
    CHECK(reports[r].bytes_pulled == d.fp32_bytes_of_all_shards());
  }
}

TEST_CASE("with outer lr 0.5 and momentum the flush applies lr times the mean and keeps momentum") {
  Regions d("momentum", "  optimizer: {lr: 0.5, momentum: 0.9}");
  const ParamTable table = d.table();
  const size_t n = table.total_elements();
  ThreeLeaders leaders(d, table, "fp32");
  for (int t = 0; t < 2; ++t) leaders.round();
  d.pause();
  const auto values_before = d.values(n), momentum_before = d.momentum(n);
  d.resume();
  // fp32 leaves no residual: what the flush owes is the progress not pushed, one step each.
  leaders.flush_one_step();
  d.pause();
  const auto values = d.values(n);
  CHECK(same_bits(d.momentum(n), momentum_before));
  const auto s0 = step_of(0, n), s1 = step_of(1, n), s2 = step_of(2, n);
  double err = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    const double moved = double(values[i]) - double(values_before[i]);
    const double want = 0.5 * (double(s0[i]) + double(s1[i]) + double(s2[i])) / 3.0;
    err += (moved - want) * (moved - want);
    norm += want * want;
  }
  CHECK(std::sqrt(err / norm) < 1e-5);
  for (const auto& l : leaders.all) CHECK(same_bits(l->base(), values));
}

TEST_CASE("a leader restarted after its region flushed pulls the global model and pushes nothing") {
  Regions d("restarted", "");
  const ParamTable table = d.table();
  const size_t n = table.total_elements();
  ThreeLeaders leaders(d, table, "fp32");
  leaders.round();
  leaders.flush_one_step();
  const std::vector<float> global(leaders.all[0]->base().begin(), leaders.all[0]->base().end());
  CHECK_FALSE(leaders.all[0]->flushed_before_connect());
  // Region a's leader dies after its flush (during its final evaluation, say) and starts again.
  worker::RegionSync again(table, d.sync("a", "fp32"), d.context());
  again.connect();
  CHECK(again.flushed_before_connect());
  const auto versions = d.versions();
  std::vector<float> local(n, 123.0f);  // whatever it holds now is not pushed
  const auto report = again.flush(local);
  CHECK(report.segments_owed == 0);
  CHECK(report.bytes_pushed == 0);
  CHECK(report.bytes_pulled == d.fp32_bytes_of_all_shards());
  CHECK(same_bits(again.base(), global));
  d.pause();
  CHECK(d.versions() == versions);  // the servers' values did not move
}

// Region `region`'s leader as far as its flush of every shard at the server of region `server`
// (owing nothing), where it dies: killed between its flush's messages to two servers.
void flush_at_one_server(Regions& d, const std::string& region, uint32_t server, uint64_t round) {
  const auto config = d.sync(region, "fp32");
  wire::Client client(wire::connect_dealer(d.context(), config.servers.at(server).endpoint));
  auto hello =
      client.call(wire::Hello{region, wire::kProtocolVersion, d.table().layout_hash(), {}});
  REQUIRE(hello.has_value());
  REQUIRE(std::holds_alternative<wire::HelloReply>(hello->header.body));
  for (const auto& info : std::get<wire::HelloReply>(hello->header.body).shards) {
    auto reply = client.call(wire::Push{info.id, round, 0, {}, 0, true});
    REQUIRE(reply.has_value());
    REQUIRE(std::holds_alternative<wire::PushReply>(reply->header.body));
  }
}

TEST_CASE(
    "a leader killed during its flush, restarted, trains no more rounds: it flushes the shards "
    "still owed and pulls the global model") {
  Regions d("halfflushed", "");
  const ParamTable table = d.table();
  const size_t n = table.total_elements();
  ThreeLeaders leaders(d, table, "fp32");
  leaders.round();
  // Region a's leader flushes at the server of a, then dies before it reaches b's and c's.
  leaders.all[0].reset();
  flush_at_one_server(d, "a", 0, 2);
  worker::StreamingConfig streaming;
  streaming.local_steps = 4;
  streaming.regions = 3;
  worker::LeaderSession again(table, d.sync("a", "fp32"), streaming, d.context());
  again.connect(2);
  CHECK(again.sync().flushed_before_connect());
  const auto versions_before = d.versions();
  // b and c flush as usual; the restarted a ends its run without a round: what finish() and
  // flush() push goes only to the shards it still owes.
  auto others = std::async(std::launch::async, [&] {
    return leaders.each([&](size_t r) {
      if (r == 0) return uint64_t{0};
      std::vector<float> local(leaders.all[r]->base().begin(), leaders.all[r]->base().end());
      return leaders.all[r]->flush(local).bytes_pulled;
    });
  });
  std::vector<float> local(again.sync().base().begin(), again.sync().base().end());
  CHECK(again.finish(4, local, worker::RunEnd::flush).empty());
  const auto report = again.flush(local);
  others.get();
  CHECK(report.bytes_pulled == d.fp32_bytes_of_all_shards());
  d.pause();
  const auto values = d.values(n);
  CHECK(same_bits(again.sync().base(), values));
  for (size_t r = 1; r < 3; ++r) CHECK(same_bits(leaders.all[r]->base(), values));
  CHECK(d.versions() == versions_before);  // fp32: nobody owed anything, no version made
}

TEST_CASE("the flush waits for every live region, and not for one that said goodbye") {
  Regions d("goodbye", "");
  const ParamTable table = d.table();
  ThreeLeaders leaders(d, table, "onebit");
  leaders.round();
  auto fa = leaders.flush_async(0);
  auto fb = leaders.flush_async(1);
  // c is live and has not flushed: the final pulls wait for it.
  CHECK(fa.wait_for(300ms) == std::future_status::timeout);
  leaders.all[2]->goodbye(2s);
  fa.get();
  fb.get();
  d.pause();
  const auto values = d.values(table.total_elements());
  CHECK(same_bits(leaders.all[0]->base(), values));
  CHECK(same_bits(leaders.all[1]->base(), values));
}

TEST_CASE("regions that flushed do not hold back a round another region still pushes") {
  Regions d("behind", "");
  const ParamTable table = d.table();
  const size_t n = table.total_elements();
  ThreeLeaders leaders(d, table, "onebit");
  leaders.round();
  auto fa = leaders.flush_async(0);
  auto fb = leaders.flush_async(1);
  CHECK(fa.wait_for(300ms) == std::future_status::timeout);
  // c is a round behind (after a partition, say): its last round is released without a and b,
  // which push no more rounds, rather than wait for them while they wait for c's flush.
  auto& c = *leaders.all[2];
  std::vector<float> local(c.base().begin(), c.base().end());
  const auto step = step_of(2, n);
  for (size_t i = 0; i < n; ++i) local[i] += step[i];
  auto round = std::async(std::launch::async, [&] { return c.exchange(local); });
  REQUIRE(round.wait_for(10s) == std::future_status::ready);
  CHECK(round.get().round == 2);
  auto fc = leaders.flush_async(2);
  fa.get();
  fb.get();
  fc.get();
  d.pause();
  const auto values = d.values(n);
  for (const auto& l : leaders.all) CHECK(same_bits(l->base(), values));
}

TEST_CASE("a flush to a server that never answers fails with its name, within the timeout") {
  Regions d("silent", "");
  const ParamTable table = d.table();
  const size_t n = table.total_elements();
  auto config = d.sync("a", "fp32");
  config.timeout = 500ms;
  worker::RegionSync a(table, config, d.context());
  a.connect();
  d.pause();  // every server stops reading
  std::vector<float> local(n, 1.0f);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    a.flush(local);
    FAIL("the flush returned");
  } catch (const std::exception& e) {
    CHECK(std::string(e.what()).find("region a") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
}
