// In-process server cluster for the server suites: one ParamServer on inproc:// run by a
// jthread, scripted region clients (DEALER) in the test thread, and a manual clock the test
// advances to decide when a silent region counts as dead.
#pragma once

#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "compression/codecs.hpp"
#include "compression/factory.hpp"
#include "server/param_server.hpp"
#include "tests/temp_dir.hpp"
#include "wire/client.hpp"

namespace geotrain::test {

using namespace std::chrono_literals;

inline constexpr size_t kShard = 2048, kCrit = 1024;

// Regions a, b, c; the server of region a owns shard 0 = [0, 2048): crit.w (critical, elements
// 0..1023) then free.w (non-critical, 1024..2047). Shards 1 and 2 hold other.w.
inline server::ServerConfig small_config(const std::filesystem::path& run_dir, uint32_t bound = 1,
                                         const std::string& extra = "") {
  return server::parse_server_config(fmt::format(R"(
regions: [a, b, c]
model:
  tensors: [{{name: crit.w, size: 1024}}, {{name: free.w, size: 1024}}, {{name: other.w, size: 4096}}]
  critical: ["crit.*"]
server:
  shards_per_region: 1
  staleness_bound: {}
  dead_after_ms: 1000
  heartbeat_ms: 100
  run_dir: "{}"
{}
)",
                                                 bound, run_dir.string(), extra));
}

// For suites about two regions (or one) of the three: regions that never register do not count.
inline constexpr const char* kOnlyRegistered = "  wait_for_all_regions: false";

struct ManualClock {
  std::shared_ptr<std::atomic<int64_t>> ms = std::make_shared<std::atomic<int64_t>>(0);
  server::Clock clock() const {
    auto p = ms;
    return
        [p] { return std::chrono::steady_clock::time_point(std::chrono::milliseconds(p->load())); };
  }
  void set(int64_t t) { ms->store(t); }
};

class Cluster {
 public:
  explicit Cluster(const server::ServerConfig& config, uint32_t region = 0) : config_(config) {
    server::ServerOptions options;
    options.endpoint = fmt::format("inproc://server-{}", reinterpret_cast<uintptr_t>(this));
    options.clock = clock_.clock();
    options.poll = 5ms;
    server_ = std::make_unique<server::ParamServer>(config, region, context_, options);
    endpoint_ = server_->endpoint();
    hash_ = server_->table_hash();
    thread_ = std::jthread([this](std::stop_token st) { server_->run(st); });
  }
  ~Cluster() {
    if (!thread_.joinable()) return;  // stop() joined it
    thread_.request_stop();
    thread_.join();
  }

  wire::Client client() { return wire::Client(wire::connect_dealer(context_, endpoint_)); }
  uint64_t table_hash() const { return hash_; }
  ManualClock& clock() { return clock_; }
  wire::Context& context() { return context_; }
  // Stops the loop; the server's state may be read afterwards.
  const server::ParamServer& stop() {
    thread_.request_stop();
    thread_.join();
    return *server_;
  }

 private:
  server::ServerConfig config_;
  wire::Context context_;
  ManualClock clock_;
  std::unique_ptr<server::ParamServer> server_;
  std::string endpoint_;
  uint64_t hash_ = 0;
  std::jthread thread_;
};

inline wire::Reply expect_reply(wire::Client& c, wire::Body body,
                                std::vector<wire::Frame> payloads = {}) {
  auto r = c.call(std::move(body), std::move(payloads), 20s);
  REQUIRE_MESSAGE(r.has_value(), "no reply within 20 s");
  return std::move(*r);
}

template <typename T>
const T& as(const wire::Reply& r) {
  if (auto* e = std::get_if<wire::Error>(&r.header.body)) FAIL("error reply: " << e->message);
  REQUIRE(std::holds_alternative<T>(r.header.body));
  return std::get<T>(r.header.body);
}

inline wire::HelloReply hello(wire::Client& c, const std::string& region, uint64_t hash) {
  auto r = expect_reply(c, wire::Hello{region, wire::kProtocolVersion, hash, {}});
  return as<wire::HelloReply>(r);
}

inline Bytes encode(const std::vector<float>& v, const std::string& spec = "fp32") {
  Bytes out;
  compression::make_codec(spec)->encode(v, out);
  return out;
}

// A push of one segment over the whole shard (the payload's header says its codec and count).
inline wire::Push push_header(uint32_t shard, uint64_t round, uint64_t base, const Bytes& payload) {
  return wire::Push{shard, round, base, {{0, payload.size()}}};
}

inline std::vector<wire::Frame> frames(Bytes payload) {
  std::vector<wire::Frame> f;
  f.push_back(wire::frame_from_bytes(std::move(payload)));
  return f;
}

// Sends a whole-shard fp32 push (with `skip`, sitting out the rounds before `round`: wire::Push);
// returns the request id (reply not awaited).
inline uint64_t send_push(wire::Client& c, uint64_t round, const std::vector<float>& delta,
                          uint64_t base = 0, bool skip = false) {
  auto payload = encode(delta);
  auto h = push_header(0, round, base, payload);
  h.skip = skip;
  auto id = c.send(h, frames(std::move(payload)));
  REQUIRE(id.has_value());
  return *id;
}

inline wire::PushReply push(wire::Client& c, uint64_t round, const std::vector<float>& delta) {
  auto payload = encode(delta);
  auto h = push_header(0, round, 0, payload);
  auto r = expect_reply(c, h, frames(std::move(payload)));
  return as<wire::PushReply>(r);
}

// The next reply that comes on `c` (within 20 s), which must answer request `id`.
inline wire::Reply next_reply(wire::Client& c, uint64_t id) {
  auto r = c.receive(20s);
  REQUIRE_MESSAGE(r.has_value(), "no reply within 20 s");
  CHECK(r->header.request_id == id);
  return std::move(*r);
}

// A reply's first payload, decoded into n values.
inline std::vector<float> payload_values(const wire::Reply& r, size_t n = kShard) {
  std::vector<float> v(n);
  compression::decode_payload(wire::frame_bytes(r.payloads.at(0)), v);
  return v;
}

struct Pulled {
  wire::PullReply header;
  std::vector<float> values;
  compression::CodecId codec;  // what the payload's header says
};

inline Pulled pull(wire::Client& c, bool full, uint64_t since = 0, uint64_t min_round = 0,
                   uint64_t n = kShard) {
  auto r = expect_reply(c, wire::PullRequest{0, since, full, min_round});
  REQUIRE(r.payloads.size() == 1);
  const auto bytes = wire::frame_bytes(r.payloads[0]);
  Pulled p{as<wire::PullReply>(r), std::vector<float>(n), compression::parse_header(bytes).codec};
  compression::decode_payload(bytes, p.values);
  return p;
}

inline nlohmann::json stats(wire::Client& c) {
  auto r = expect_reply(c, wire::StatsRequest{});
  return nlohmann::json::parse(as<wire::StatsReply>(r).json);
}

inline std::vector<float> filled(size_t n, float v) { return std::vector<float>(n, v); }

}  // namespace geotrain::test
