// CURVE on the server's socket (issue 13, item 1) and the limits that bound a misbehaving peer
// (item 6): refused clients, the log lines that say so, and a legitimate client that keeps
// being served.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "tests/server/server_fixture.hpp"
#include "wire/curve_keys.hpp"
#include "wire/handshake_check.hpp"

using namespace geotrain;
using namespace geotrain::test;

namespace {

// The server of region a on tcp loopback, its own context and thread, CURVE on or off.
class TcpServer {
 public:
  TcpServer(const server::ServerConfig& config) {
    server::ServerOptions options;
    options.endpoint = "tcp://127.0.0.1:0";
    options.poll = 5ms;
    server_ = std::make_unique<server::ParamServer>(config, 0, context_, options);
    endpoint_ = server_->endpoint();
    hash_ = server_->table_hash();
    thread_ = std::jthread([this](std::stop_token st) { server_->run(st); });
  }
  ~TcpServer() {
    thread_.request_stop();
    thread_.join();
  }
  wire::Client client(const wire::ChannelOptions& options = {}) {
    return wire::Client(wire::connect_dealer(context_, endpoint_, options));
  }
  const std::string& endpoint() const { return endpoint_; }
  uint64_t table_hash() const { return hash_; }
  int port() const { return std::stoi(endpoint_.substr(endpoint_.rfind(':') + 1)); }

 private:
  wire::Context context_;
  std::unique_ptr<server::ParamServer> server_;
  std::string endpoint_;
  uint64_t hash_ = 0;
  std::jthread thread_;
};

// Captures what the server logs while it lives.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::string text() const {
    std::string all;
    for (const auto& line : sink_->last_formatted()) all += line;
    return all;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

std::string curve_section(const std::filesystem::path& keys) {
  return fmt::format("security: {{curve: true, keys_dir: \"{}\"}}\n", keys.string());
}

// Regions a, b, c as in server_fixture.hpp, with a real clock (nobody is declared dead during a
// test), `server_extra` under server: and `top_extra` at the top level.
server::ServerConfig tcp_config(const std::filesystem::path& dir, const std::string& server_extra,
                                const std::string& top_extra = "") {
  return server::parse_server_config(fmt::format(R"(
regions: [a, b, c]
model:
  tensors: [{{name: crit.w, size: 1024}}, {{name: free.w, size: 1024}}, {{name: other.w, size: 4096}}]
  critical: ["crit.*"]
server:
  wait_for_all_regions: false
  dead_after_ms: 600000
  run_dir: "{}"
{}
{})",
                                                 dir.string(), server_extra, top_extra));
}

server::ServerConfig curve_config(const std::filesystem::path& dir) {
  wire::KeyDirectory::generate(dir / "keys", {"a", "b", "c"}, false);
  return tcp_config(dir, "", curve_section(dir / "keys"));
}

wire::ChannelOptions as_region(const std::filesystem::path& keys, const std::string& region) {
  const wire::KeyDirectory dir(keys);
  const auto mine = dir.client_keypair(region);
  wire::ChannelOptions o;
  o.curve_client =
      wire::ChannelOptions::CurveClient{dir.server_public("a"), mine.public_key, mine.secret_key};
  return o;
}

bool eventually(const std::function<bool()>& f, std::chrono::milliseconds limit = 10s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return f();
}

}  // namespace

TEST_CASE("with CURVE on, a region with its client key pushes and pulls as usual") {
  TempDir dir("curve-ok");
  TcpServer srv(curve_config(dir.path()));
  auto c = srv.client(as_region(dir.path() / "keys", "b"));
  hello(c, "b", srv.table_hash());
  pull(c, true);
  std::vector<float> delta(kShard);
  for (size_t i = 0; i < delta.size(); ++i) delta[i] = static_cast<float>(i) * 0.25f;
  push(c, 1, delta);
  const auto p = pull(c, true, 0, 0);
  // Non-critical half applied on arrival (one live region: the full delta); values match.
  CHECK(p.values[kShard - 1] == doctest::Approx(delta[kShard - 1]));
  CHECK(stats(c)["curve"]["accepted"].get<int>() >= 1);
}

TEST_CASE("an unauthenticated (NULL mechanism) client is refused and the server log says so") {
  TempDir dir("curve-null");
  LogCapture log;
  TcpServer srv(curve_config(dir.path()));
  auto plain = srv.client();  // no CURVE at all
  auto r = plain.call(wire::Hello{"b", wire::kProtocolVersion, srv.table_hash(), {}}, {}, 1500ms);
  CHECK_FALSE(r.has_value());
  CHECK(eventually([&] {
    const auto text = log.text();
    return text.find("does not speak CURVE") != std::string::npos ||
           text.find("handshake failed") != std::string::npos;  // closed before the mismatch
  }));
  // The refusal names the peer: its address, or "unknown" when the connection was closed before
  // the monitor could read it (libzmq reports a failed handshake without the peer, so the
  // address is the accepted connection's, read best-effort).
  CHECK(eventually(
      [&] { return log.text().find("CURVE: refused a connection") != std::string::npos; }));
  const auto text = log.text();
  CHECK((text.find("(peer 127.0.0.1:") != std::string::npos ||
         text.find("(peer unknown)") != std::string::npos));
  // The server still serves a region with its key.
  auto good = srv.client(as_region(dir.path() / "keys", "c"));
  hello(good, "c", srv.table_hash());
  CHECK(stats(good)["curve"]["failed_handshakes"].get<int>() >= 1);
}

TEST_CASE(
    "a client whose key is not in the allow-list is refused, and so is one with a wrong "
    "server key") {
  TempDir dir("curve-wrong");
  LogCapture log;
  TcpServer srv(curve_config(dir.path()));
  // A keypair of its own: a valid CURVE client, but not one of the regions'.
  const auto stranger = wire::generate_keypair();
  wire::ChannelOptions o;
  o.curve_client =
      wire::ChannelOptions::CurveClient{wire::KeyDirectory(dir.path() / "keys").server_public("a"),
                                        stranger.public_key, stranger.secret_key};
  auto intruder = srv.client(o);
  CHECK_FALSE(
      intruder.call(wire::Hello{"b", wire::kProtocolVersion, srv.table_hash(), {}}, {}, 1500ms)
          .has_value());
  CHECK(eventually([&] {
    return log.text().find("is not in the allow-list") != std::string::npos &&
           log.text().find(stranger.public_key) != std::string::npos;
  }));
  // A region's own keypair but the wrong server key (e.g. another region's server's).
  auto confused_options = as_region(dir.path() / "keys", "b");
  confused_options.curve_client->server_public_key =
      wire::KeyDirectory(dir.path() / "keys").server_public("b");
  auto confused = srv.client(confused_options);
  CHECK_FALSE(
      confused.call(wire::Hello{"b", wire::kProtocolVersion, srv.table_hash(), {}}, {}, 1500ms)
          .has_value());
  auto good = srv.client(as_region(dir.path() / "keys", "b"));
  hello(good, "b", srv.table_hash());
  const auto s = stats(good);
  CHECK(s["curve"]["refused_key"].get<int>() >= 1);
  CHECK(s["curve"]["failed_handshakes"].get<int>() >= 2);
  CHECK(log.text().find("cryptographic error") != std::string::npos);
}

TEST_CASE(
    "a handshake check tells a client with no key, a stranger's key or a wrong server key why "
    "it is refused, at once, and lets a client with its region's key through") {
  TempDir dir("curve-check");
  TcpServer srv(curve_config(dir.path()));
  const wire::KeyDirectory keys(dir.path() / "keys");
  const auto stranger = wire::generate_keypair();
  const auto good = as_region(keys.dir(), "b").curve_client;
  auto wrong_server = good;
  wrong_server->server_public_key = keys.server_public("b");
  const std::vector<wire::HandshakeTarget> targets = {
      {"good", srv.endpoint(), good},
      {"no keys", srv.endpoint(), std::nullopt},
      {"stranger", srv.endpoint(),
       wire::ChannelOptions::CurveClient{keys.server_public("a"), stranger.public_key,
                                         stranger.secret_key}},
      {"wrong server key", srv.endpoint(), wrong_server},
  };
  wire::Context context;
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = wire::check_handshakes(context, targets, 20s);
  const auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE(r.size() == 4);
  CHECK(r[0].outcome == wire::HandshakeOutcome::succeeded);
  for (size_t i = 1; i < r.size(); ++i) {
    INFO(targets[i].name, ": ", r[i].reason);
    CHECK(r[i].outcome == wire::HandshakeOutcome::refused);
  }
  // The reasons name the fix (or, for a hang-up without detail, the candidates).
  CHECK((r[1].reason.find("requires CURVE") != std::string::npos ||
         r[1].reason.find("may require CURVE") != std::string::npos));
  CHECK(r[2].reason.find("authenticator refused") != std::string::npos);
  CHECK((r[3].reason.find("decrypt") != std::string::npos));
  // Refused at once: well before the deadline (a few reconnect intervals at most).
  CHECK(took < 10s);
}

TEST_CASE("a handshake check against nothing listening answers no_answer at the deadline") {
  wire::Context context;
  // A port bound but not listening: every connection is refused and retried, never made.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const std::string endpoint = fmt::format("tcp://127.0.0.1:{}", ntohs(addr.sin_port));
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = wire::check_handshakes(context, {{"nobody", endpoint, std::nullopt}}, 300ms);
  CHECK(std::chrono::steady_clock::now() - t0 >= 300ms);
  REQUIRE(r.size() == 1);
  CHECK(r[0].outcome == wire::HandshakeOutcome::no_answer);
  ::close(fd);
}

TEST_CASE(
    "the security section: unknown keys, auto outside geotrain run and a missing keys_dir "
    "are errors") {
  TempDir dir("curve-config");
  auto parse = [&](const std::string& security) {
    return server::parse_server_config("regions: [a]\nmodel: {tensors: [{name: w, size: 1024}]}\n" +
                                       security);
  };
  CHECK_THROWS_WITH_AS(parse("security: {curve: true, keydir: x}"),
                       doctest::Contains("unknown key 'security.keydir'"), InputError);
  CHECK_THROWS_WITH_AS(parse("security: {curve: auto}"),
                       doctest::Contains("only `geotrain run` resolves"), InputError);
  CHECK_THROWS_WITH_AS(parse("security: {curve: true}"),
                       doctest::Contains("security.keys_dir is missing"), InputError);
  CHECK_THROWS_WITH_AS(parse("security: {curve: maybe}"),
                       doctest::Contains("allowed: true, false, auto"), InputError);
  CHECK_FALSE(parse("security: {curve: false}").security.curve_on());
  // Keys are read when the server starts: a missing key file names the file and keygen.
  auto cfg = parse(
      fmt::format("security: {{curve: true, keys_dir: \"{}\"}}", (dir.path() / "none").string()));
  wire::Context ctx;
  server::ServerOptions options;
  options.endpoint = "tcp://127.0.0.1:0";
  options.write_metrics = false;
  CHECK_THROWS_WITH_AS(server::ParamServer(cfg, 0, ctx, options),
                       doctest::Contains("geotrain keygen"), InputError);
}

TEST_CASE(
    "keygen writes a server and a client keypair per region, secrets 0600, and refuses to "
    "overwrite") {
  TempDir dir("keygen");
  const auto files = wire::KeyDirectory::generate(dir.path() / "k", {"x", "y"}, false);
  CHECK(files.size() == 8);
  const wire::KeyDirectory keys(dir.path() / "k");
  CHECK(keys.server_keypair("x").public_key != keys.client_keypair("x").public_key);
  CHECK(keys.client_public("y").size() == wire::kZ85KeyChars);
  const auto perms = std::filesystem::status(keys.file("server", "x", true)).permissions();
  CHECK((perms & std::filesystem::perms::all) ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
  const auto before = keys.server_public("x");
  CHECK_THROWS_WITH_AS(wire::KeyDirectory::generate(dir.path() / "k", {"x"}, false),
                       doctest::Contains("--force"), InputError);
  CHECK(keys.server_public("x") == before);
  wire::KeyDirectory::generate(dir.path() / "k", {"x"}, true);
  CHECK(keys.server_public("x") != before);
}

TEST_CASE("a message larger than max_message_bytes and one with too many frames are refused") {
  TempDir dir("limits");
  TcpServer cluster(tcp_config(dir.path(), "  max_message_bytes: 65536"));
  auto c = cluster.client();
  hello(c, "a", cluster.table_hash());
  // One frame above the limit: ZMQ_MAXMSGSIZE drops the connection before the frame is
  // buffered, so no reply ever comes; the server goes on.
  {
    auto big = cluster.client();
    std::vector<wire::Frame> frames;
    frames.emplace_back(size_t{65536 + 1024});
    auto id = big.send(wire::Heartbeat{}, std::move(frames));
    REQUIRE(id);
    CHECK_FALSE(big.receive(500ms).has_value());
  }
  // Frames each under the limit but together over it: refused as tooLarge, nothing changed.
  {
    std::vector<wire::Frame> frames;
    for (int i = 0; i < 3; ++i) frames.emplace_back(size_t{30000});
    auto r = expect_reply(c, wire::Heartbeat{}, std::move(frames));
    REQUIRE(std::holds_alternative<wire::Error>(r.header.body));
    CHECK(std::get<wire::Error>(r.header.body).code == wire::ErrorCode::too_large);
  }
  // More frames than any request may have: refused by count (the extra frames are drained
  // and dropped by the channel, never kept).
  {
    std::vector<wire::Frame> frames;
    for (size_t i = 0; i < server::kMaxSegments + 10; ++i) frames.emplace_back(size_t{1});
    auto r = expect_reply(c, wire::Heartbeat{}, std::move(frames));
    REQUIRE(std::holds_alternative<wire::Error>(r.header.body));
    CHECK(std::get<wire::Error>(r.header.body).code == wire::ErrorCode::too_large);
    CHECK(std::get<wire::Error>(r.header.body).message.find("frames") != std::string::npos);
  }
  CHECK(stats(c)["regions"]["a"]["pushes"].get<int>() == 0);
}

TEST_CASE(
    "a client opening connections without end is bounded: idle connections are closed "
    "after the handshake interval while a legitimate client is served") {
  TempDir dir("flood");
  TcpServer srv(tcp_config(dir.path(), "  handshake_ms: 300"));
  auto c = srv.client();
  hello(c, "a", srv.table_hash());
  // The misbehaving client: many TCP connections that never send a ZMTP greeting.
  constexpr int kConnections = 300;
  std::vector<int> fds;
  for (int i = 0; i < kConnections; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(srv.port()));
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    fds.push_back(fd);
  }
  // The legitimate client is served all along.
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t round = 1; round <= 20; ++round) {  // push and pull REQUIRE their replies
    CHECK(push(c, round, filled(kShard, 0.001f)).round == round);
    pull(c, true);
  }
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  // Every flood connection is closed by the server once handshake_ms has passed.
  std::this_thread::sleep_for(1s);
  int closed = 0;
  for (int fd : fds) {
    timeval tv{2, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[256];
    ssize_t n = 0;
    do n = ::recv(fd, buf, sizeof buf, 0);  // the server's greeting, then end of stream
    while (n > 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) ++closed;
    ::close(fd);
  }
  CHECK(closed == kConnections);
  hello(c, "a", srv.table_hash());
}

namespace {

// An independent ZMTP 3.0 client over a raw TCP socket (RFC 23, NULL mechanism), written by hand
// so that the flood below does not go through libzmq on the client side.
class RawZmtpPeer {
 public:
  // Completes the NULL handshake (REQUIREs the server's READY), or with `may_be_refused` records
  // what the server answered instead (its ERROR command's reason, or "closed").
  explicit RawZmtpPeer(int port, bool may_be_refused = false)
      : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    REQUIRE(fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    // Greeting: signature, version 3.0, mechanism NULL, as-server 0, filler.
    std::string greeting(64, '\0');
    greeting[0] = '\xff';
    greeting[9] = '\x7f';
    greeting[10] = 3;
    std::memcpy(&greeting[12], "NULL", 4);
    write_all(greeting);
    REQUIRE(read_exact(64).substr(12, 4) == "NULL");
    // READY with Socket-Type DEALER.
    const std::string ready =
        std::string("\x05READY\x0bSocket-Type", 18) + std::string("\x00\x00\x00\x06", 4) + "DEALER";
    write_all(std::string(1, '\x04') + static_cast<char>(ready.size()) + ready);
    const std::string flags_size = read_exact(2, may_be_refused);
    if (flags_size.size() < 2) {
      refusal_ = "closed";
      return;
    }
    REQUIRE(flags_size[0] == '\x04');
    const std::string command = read_exact(static_cast<uint8_t>(flags_size[1]), may_be_refused);
    if (command.substr(0, 6) == "\x05READY") return;
    REQUIRE(may_be_refused);
    // ERROR command (RFC 23): name, then the reason as a short string.
    REQUIRE(command.substr(0, 6) ==
            "\x05"
            "ERROR");
    refusal_ = command.size() > 7 ? command.substr(7) : "ERROR";
  }
  bool ready() const { return refusal_.empty(); }
  const std::string& refusal() const { return refusal_; }
  ~RawZmtpPeer() { ::close(fd_); }

  // One single-frame message (frame 0 only).
  void send(const wire::Frame& frame) {
    REQUIRE(frame.size() < 256);
    write_all(std::string(1, '\0') + static_cast<char>(frame.size()) +
              std::string(static_cast<const char*>(frame.data()), frame.size()));
  }
  // The single-frame messages that have arrived, without waiting for more.
  std::vector<wire::Header> received() {
    char buf[4096];
    ssize_t n = 0;
    while ((n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT)) > 0) in_.append(buf, n);
    std::vector<wire::Header> out;
    while (in_.size() >= 2 && in_.size() >= 2u + static_cast<uint8_t>(in_[1])) {
      REQUIRE(in_[0] == '\0');  // short, last frame: the server's replies here are one frame
      const size_t len = static_cast<uint8_t>(in_[1]);
      out.push_back(wire::decode_header(wire::Frame(in_.data() + 2, len)));
      in_.erase(0, 2 + len);
    }
    return out;
  }

 private:
  void write_all(const std::string& bytes) {
    const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    const std::string why = n < 0 ? std::strerror(errno) : "short";
    INFO("send: ", why);
    REQUIRE(n == static_cast<ssize_t>(bytes.size()));
  }
  // n bytes; with `may_end`, what came before the server closed the connection.
  std::string read_exact(size_t n, bool may_end = false) {
    std::string out(n, '\0');
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::recv(fd_, out.data() + got, n - got, 0);
      if (r <= 0 && may_end) return out.substr(0, got);
      REQUIRE(r > 0);
      got += static_cast<size_t>(r);
    }
    return out;
  }
  int fd_;
  std::string in_;
  std::string refusal_;
};

}  // namespace

TEST_CASE(
    "a client that completes the handshake on connection after connection holds a bounded share "
    "of the server: its waiting requests are capped, the rest refused busy, and a region is "
    "served throughout") {
  TempDir dir("flood-ready");
  // Without the per-address cap (tested below), so that all 300 connections complete.
  TcpServer srv(tcp_config(dir.path(), "  max_connections_per_address: 0"));
  auto c = srv.client();
  hello(c, "a", srv.table_hash());
  // 300 connections, each a new peer that parks kMaxParkedPerPeer key-value gets for keys no one
  // sets: 1200 requests would wait, more than the 1024 that peers of no region may park in all.
  constexpr size_t kConnections = 300;
  std::vector<std::unique_ptr<RawZmtpPeer>> peers;
  for (size_t i = 0; i < kConnections; ++i) {
    peers.push_back(std::make_unique<RawZmtpPeer>(srv.port()));
    for (size_t k = 0; k < wire::kMaxWaitingPerPeer; ++k)
      peers.back()->send(
          wire::encode_header({k + 1, wire::KvGet{fmt::format("never/{}/{}", i, k)}}));
  }
  const size_t sent = kConnections * wire::kMaxWaitingPerPeer;
  REQUIRE(sent > server::kMaxParkedUnregistered);
  CHECK(eventually(
      [&] { return stats(c)["parked"].get<size_t>() == server::kMaxParkedUnregistered; }));
  // The region is served while they wait.
  for (uint64_t round = 1; round <= 5; ++round) {
    push(c, round, filled(kShard, 0.001f));
    pull(c, true);
  }
  // Every request beyond the bound was answered `busy` at once, on its own connection.
  size_t busy = 0;
  CHECK(eventually([&] {
    for (auto& p : peers)
      for (const auto& h : p->received()) {
        const auto* e = std::get_if<wire::Error>(&h.body);
        REQUIRE(e != nullptr);
        CHECK(e->code == wire::ErrorCode::busy);
        ++busy;
      }
    return busy == sent - server::kMaxParkedUnregistered;
  }));
  CHECK(busy == sent - server::kMaxParkedUnregistered);
  CHECK(stats(c)["parked"].get<size_t>() == server::kMaxParkedUnregistered);
}

TEST_CASE(
    "server.max_connections_per_address: a client that completes the handshake on connection "
    "after connection holds at most the cap, the rest are refused at the handshake, and the "
    "address may connect again once it closes some") {
  TempDir dir("cap");
  LogCapture log;
  constexpr size_t kCap = 16;
  TcpServer srv(tcp_config(dir.path(), fmt::format("  max_connections_per_address: {}", kCap)));
  auto c = srv.client();  // the region: one of the cap's connections from 127.0.0.1
  hello(c, "a", srv.table_hash());
  std::vector<std::unique_ptr<RawZmtpPeer>> peers;
  size_t ready = 0;
  std::string refusal;
  for (size_t i = 0; i < 3 * kCap; ++i) {
    peers.push_back(std::make_unique<RawZmtpPeer>(srv.port(), true));
    if (peers.back()->ready())
      ++ready;
    else
      refusal = peers.back()->refusal();
  }
  CHECK(ready == kCap - 1);  // the cap, less the region's own connection
  CHECK(refusal == "400");   // libzmq's NULL mechanism sends the ZAP status code as the reason
  CHECK(log.text().find("connections open from that address, limit 16") != std::string::npos);
  auto st = stats(c);
  CHECK(st["connections"]["refused_over_cap"].get<size_t>() == 2 * kCap + 1);
  CHECK(st["connections"]["max_per_address"] == kCap);
  // The region is served throughout.
  for (uint64_t round = 1; round <= 3; ++round) {
    push(c, round, filled(kShard, 0.001f));
    pull(c, true);
  }
  // Closing connections frees their share: a new connection from the address completes.
  peers.clear();
  CHECK(eventually([&] { return stats(c)["connections"]["open"].get<size_t>() == 1; }));
  RawZmtpPeer again(srv.port(), true);
  CHECK(again.ready());
}
