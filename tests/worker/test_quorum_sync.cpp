// Leaders (RegionSync) against in-process ParamServers under the quorum consistency policy
// (server/consistency.hpp): a slow region's round is released without it after the grace window,
// its late delta joins the next merge, and every delta weighs by the tokens its leader sends.
#include <doctest/doctest.h>

#include <future>
#include <thread>

#include "server/param_server.hpp"
#include "worker/leader/region_sync.hpp"

using namespace geotrain;
using namespace std::chrono_literals;

namespace {

// Regions a and b, each server owning half of crit.w (critical, 1024) + free.w (2048).
class QuorumDeployment {
 public:
  explicit QuorumDeployment(const std::filesystem::path& dir)
      : dir_(dir),
        config_(server::parse_server_config(fmt::format(R"(
regions: [a, b]
model:
  tensors: [{{name: crit.w, size: 1024}}, {{name: free.w, size: 2048}}]
  critical: ["crit.*"]
server:
  dead_after_ms: 60000
  run_dir: "{}"
  consistency: {{policy: quorum, quorum: 1, grace_ms: 1000, weighting: tokens}}
)",
                                                        dir.string()))) {
    for (uint32_t r = 0; r < 2; ++r) {
      server::ServerOptions options;
      options.endpoint = fmt::format("inproc://quorum-server-{}", r);
      options.poll = 5ms;
      options.write_metrics = false;
      servers_.push_back(std::make_unique<server::ParamServer>(config_, r, context_, options));
    }
    for (auto& s : servers_) threads_.emplace_back([&s](std::stop_token st) { s->run(st); });
  }
  ~QuorumDeployment() {
    for (auto& t : threads_) t.request_stop();
    threads_.clear();
    std::filesystem::remove_all(dir_);
  }

  ParamTable table() const { return ParamTable(config_.tensors, config_.critical); }
  worker::SyncConfig sync(const std::string& region, uint64_t tokens) {
    worker::SyncConfig c;
    c.region = region;
    for (uint32_t r = 0; r < 2; ++r)
      c.servers.push_back({config_.regions[r], servers_[r]->endpoint(), std::nullopt});
    c.critical_codec = c.noncritical_codec = "fp32";
    c.tokens_per_round = tokens;
    c.timeout = 20s;
    return c;
  }
  wire::Context& context() { return context_; }

 private:
  std::filesystem::path dir_;
  server::ServerConfig config_;
  wire::Context context_;
  std::vector<std::unique_ptr<server::ParamServer>> servers_;
  std::vector<std::jthread> threads_;
};

std::vector<float> plus(std::span<const float> base, float d) {
  std::vector<float> v(base.begin(), base.end());
  for (float& x : v) x += d;
  return v;
}

}  // namespace

TEST_CASE(
    "leaders under a quorum: the slow region's late delta joins the next merge, weighted by its "
    "tokens") {
  QuorumDeployment d(std::filesystem::temp_directory_path() /
                     fmt::format("geotrain-quorum-sync-{}", ::getpid()));
  const ParamTable table = d.table();
  worker::RegionSync a(table, d.sync("a", 1), d.context());  // 1 token per round
  worker::RegionSync b(table, d.sync("b", 3), d.context());  // 3 tokens per round
  a.connect();
  b.connect();
  const size_t crit = 0, free = 1024;  // an element of crit.w and one of free.w

  // Round 1: only a exchanges; the quorum of 1 releases it after the 1 s grace window.
  const auto t0 = std::chrono::steady_clock::now();
  a.exchange(plus(a.base(), 2.0f));
  CHECK(std::chrono::steady_clock::now() - t0 >= 1000ms);
  CHECK(a.base()[crit] == 2.0f);  // a's delta alone
  CHECK(a.base()[free] == 1.0f);  // non-critical on arrival: 2 / (2 live regions)
  // b's round 1 comes late: accepted, and its pull is answered at once, without its own delta.
  b.exchange(plus(b.base(), 2.0f));  // from b's base of zeros
  CHECK(b.base()[crit] == 2.0f);
  CHECK(b.base()[free] == 2.0f);  // 2/2 + 2/2

  // Round 2, both in time: a's 1 (1 token), b's late 2 and its 0 (3 tokens each):
  // (1*1 + 3*2 + 3*0) / 7 = 1.
  auto fa = std::async(std::launch::async, [&] { return a.exchange(plus(a.base(), 1.0f)); });
  b.exchange(plus(b.base(), 0.0f));
  fa.get();
  CHECK(a.base()[crit] == 3.0f);
  CHECK(b.base()[crit] == 3.0f);
  CHECK(a.base()[free] == doctest::Approx(2.5f));  // + 1/2 + 0/2
}
