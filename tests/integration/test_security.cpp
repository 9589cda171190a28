// CURVE across real links (issue 13, item 1): what netsim forwards is ciphertext, a cluster of
// real processes trains with CURVE on, and a server process logs the clients it refuses.
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>

#include "cluster.hpp"
#include "compression/factory.hpp"
#include "netsim/proxy.hpp"
#include "server/config.hpp"
#include "server/param_server.hpp"
#include "wire/client.hpp"
#include "wire/curve_keys.hpp"

using namespace geotrain;
using namespace geotrain::test;

namespace {

// A plaintext no cipher output will contain by chance: 16 bytes, repeated through the delta.
const std::string kPattern = "GEOTRAIN-SECRET!";
constexpr size_t kShard = 2048;  // shard 0: region a's half of the 4096-element table

std::vector<float> patterned(size_t n) {
  std::vector<float> v(n);
  static_assert(sizeof(float) == 4);
  for (size_t i = 0; i < n; ++i) std::memcpy(&v[i], kPattern.data() + (i % 4) * 4, 4);
  return v;  // every float is finite: the bytes are ASCII, so exponents are small
}

// One server (region a of [a, b]) behind a one-link netsim that captures every forwarded byte;
// region b pushes a patterned delta and pulls the values back through the link. Returns the
// captured bytes.
std::string run_through_netsim(bool curve, const std::filesystem::path& dir) {
  std::string security;
  wire::ChannelOptions client_options;
  if (curve) {
    wire::KeyDirectory::generate(dir / "keys", {"a", "b"}, false);
    security =
        fmt::format("security: {{curve: true, keys_dir: \"{}\"}}\n", (dir / "keys").string());
    client_options.curve_client =
        wire::curve_client(wire::SecurityConfig{wire::CurveSetting::on, dir / "keys"}, "b", "a");
  }
  const auto config = server::parse_server_config(fmt::format(R"(
regions: [a, b]
model: {{tensors: [{{name: w, size: 4096}}]}}
server: {{wait_for_all_regions: false, run_dir: "{}"}}
{})",
                                                              dir.string(), security));
  wire::Context context;
  server::ServerOptions options;
  options.endpoint = "tcp://127.0.0.1:0";
  options.write_metrics = false;
  server::ParamServer srv(config, 0, context, options);
  std::jthread loop([&](std::stop_token st) { srv.run(st); });
  const int port = std::stoi(srv.endpoint().substr(srv.endpoint().rfind(':') + 1));

  netsim::LinkConfig link;
  link.from = "b";
  link.to = "a";
  link.listen = {"127.0.0.1", 0};
  link.target = {"127.0.0.1", static_cast<uint16_t>(port)};
  link.properties.delay_ms = 1;
  link.capture_file = dir / "capture.bin";
  netsim::WanProxy proxy({link}, {});
  proxy.start();

  {
    wire::Client c(wire::connect_dealer(
        context, fmt::format("tcp://127.0.0.1:{}", proxy.listen_port(0)), client_options));
    auto call = [&](wire::Body body, std::vector<wire::Frame> payloads = {}) {
      auto r = c.call(std::move(body), std::move(payloads), 20s);
      REQUIRE(r.has_value());
      if (auto* e = std::get_if<wire::Error>(&r->header.body)) FAIL(e->message);
      return std::move(*r);
    };
    call(wire::Hello{"b", wire::kProtocolVersion, srv.table_hash(), {}});
    call(wire::PullRequest{0, 0, true, 0});
    Bytes payload;
    const auto delta = patterned(kShard);
    compression::make_codec("fp32")->encode(delta, payload);
    const auto bytes = payload.size();
    std::vector<wire::Frame> frames;
    frames.push_back(wire::frame_from_bytes(std::move(payload)));
    call(wire::Push{0, 1, 0, {{0, bytes}}}, std::move(frames));
    auto pulled = call(wire::PullRequest{0, 0, true, 0});
    // The values came back as sent (lr 1, no momentum: theta = delta).
    std::vector<float> values(kShard);
    compression::decode_payload(wire::frame_bytes(pulled.payloads.at(0)), values);
    CHECK(std::memcmp(values.data(), delta.data(), kShard * sizeof(float)) == 0);
  }
  proxy.stop();
  loop.request_stop();
  loop.join();
  std::ifstream in(dir / "capture.bin", std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("with CURVE on, no parameter bytes are readable in netsim's forwarded stream") {
  TempDir plain_dir("capture-plain"), curve_dir("capture-curve");
  const auto plain = run_through_netsim(false, plain_dir.path());
  const auto curve = run_through_netsim(true, curve_dir.path());
  // Both runs moved the delta up and the values down: 8 KiB each way at least.
  CHECK(plain.size() > 2 * kShard * sizeof(float));
  CHECK(curve.size() > 2 * kShard * sizeof(float));
  // Without CURVE the pattern crosses the link in clear (so this test can fail)...
  CHECK(plain.find(kPattern) != std::string::npos);
  // ...with CURVE it is nowhere, nor either 8-byte half of it.
  CHECK(curve.find(kPattern) == std::string::npos);
  CHECK(curve.find(kPattern.substr(0, 8)) == std::string::npos);
  CHECK(curve.find(kPattern.substr(8, 8)) == std::string::npos);
}

TEST_CASE("a two-region cluster of real processes trains with CURVE on every server link") {
  TempDir dir("curve-cluster");
  wire::KeyDirectory::generate(dir.path() / "keys", {"us", "eu"}, false);
  Cluster c;
  c.regions = {"us", "eu"};
  c.workers = 2;  // the workers' rendezvous at their region's server is CURVE too
  c.worker_yaml =
      "  rounds: 3\n  local_steps: 2\n  critical_codec: fp32\n  noncritical_codec: int8\n";
  c.top_yaml =
      fmt::format("security: {{curve: true, keys_dir: \"{}\"}}\n", (dir.path() / "keys").string());
  const auto out = run_cluster(c, dir.path());
  require_success(out);
  for (const auto& r : c.regions)
    CHECK(events(dir.path() / fmt::format("worker-{}-0.metrics.jsonl", r), "round").size() == 3);
  std::ifstream f(dir.path() / "server-us.log");
  const std::string log(std::istreambuf_iterator<char>(f), {});
  CHECK(log.find("(CURVE, keys from") != std::string::npos);
}

TEST_CASE("a server process refuses an unauthenticated client and its log says so") {
  TempDir dir("curve-refuse");
  wire::KeyDirectory::generate(dir.path() / "keys", {"us"}, false);
  Cluster c;
  c.regions = {"us"};
  c.top_yaml =
      fmt::format("security: {{curve: true, keys_dir: \"{}\"}}\n", (dir.path() / "keys").string());
  const int port = free_port();
  const auto config = dir.path() / "config.yaml";
  std::ofstream(config) << config_text(c, dir.path(), {port});
  Process server({"server", "--config", config.string(), "--region", "us"},
                 dir.path() / "server.log");
  wire::Context context;
  wire::Client plain(wire::connect_dealer(context, fmt::format("tcp://127.0.0.1:{}", port)));
  CHECK_FALSE(plain.call(wire::Hello{"us", wire::kProtocolVersion, 0, {}}, {}, 3s).has_value());
  std::string log;
  for (int i = 0; i < 100 && log.find("CURVE: refused a connection") == std::string::npos; ++i) {
    std::this_thread::sleep_for(50ms);
    log = server.log();
  }
  CHECK(log.find("CURVE: refused a connection") != std::string::npos);
  // The reason: a mechanism mismatch, or, when libzmq closed the connection before reporting the
  // mismatch (seen in CI), a handshake that did not complete.
  CHECK((log.find("does not speak CURVE") != std::string::npos ||
         log.find("handshake failed") != std::string::npos));
  server.terminate();
  CHECK(server.wait(20s).value_or(-1) == 0);
}
