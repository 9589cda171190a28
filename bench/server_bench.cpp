#include "bench/server_bench.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <zmq.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "bench/codec_bench.hpp"
#include "compression/factory.hpp"
#include "core/check_zmq.hpp"
#include "core/error.hpp"
#include "netsim/probe.hpp"
#include "server/param_server.hpp"
#include "wire/client.hpp"
#include "wire/security_config.hpp"

namespace geotrain::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Timing {
  double median_s = 0;
  size_t count = 0;
};

// Round trips of `a` and `b` in alternating turns of about kTurn each, until `seconds` have
// passed and each has at least 5 timed: a change of load on the (shared) machine then hits both
// alike, where timing one after the other would let it fall on one side only and swing their
// ratio. Turns rather than single round trips, so that each side runs in its steady state (its
// own buffers in cache) as it would alone. Two warm-up round trips each first (connection set-up,
// first touch of buffers).
constexpr double kTurn = 0.025;

template <typename A, typename B>
std::pair<Timing, Timing> time_alternately(double seconds, A&& a, B&& b) {
  for (int i = 0; i < 2; ++i) {
    a();
    b();
  }
  std::vector<double> sa, sb;
  auto turn = [](auto& f, std::vector<double>& samples) {
    const auto begin = Clock::now();
    do {
      const auto t0 = Clock::now();
      f();
      samples.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    } while (std::chrono::duration<double>(Clock::now() - begin).count() < kTurn);
  };
  const auto start = Clock::now();
  while (sa.size() < 5 || sb.size() < 5 ||
         std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    turn(a, sa);
    turn(b, sb);
  }
  Timing ta{netsim::median(sa), sa.size()}, tb{netsim::median(sb), sb.size()};
  return {ta, tb};
}

// A frame that borrows `bytes` (no copy, no free): the buffer outlives every send of it.
zmq::message_t borrowed_frame(const Bytes& bytes) {
  return zmq::message_t(const_cast<std::byte*>(bytes.data()), bytes.size(), nullptr, nullptr);
}

std::string endpoint_for(const std::string& transport, const std::string& name) {
  if (transport == "tcp") return "tcp://127.0.0.1:0";
  GT_REQUIRE(transport == "inproc", "transport '{}' is not allowed: use tcp or inproc", transport);
  return "inproc://bench-" + name;
}

// Raw ZeroMQ reference: a ROUTER that answers each request [header, payload?] with
// [header, reply payload of the size the request's header names]. No protocol beyond that.
class RawEcho {
 public:
  RawEcho(wire::Context& context, const std::string& endpoint, size_t max_reply)
      : socket_(context.zmq(), zmq::socket_type::router), reply_(max_reply) {
    int linger = 0;
    GT_ZMQ_CHECK(zmq_setsockopt(socket_.handle(), ZMQ_LINGER, &linger, sizeof linger));
    GT_ZMQ_CHECK(zmq_bind(socket_.handle(), endpoint.c_str()));
    char last[256];
    size_t len = sizeof last;
    GT_ZMQ_CHECK(zmq_getsockopt(socket_.handle(), ZMQ_LAST_ENDPOINT, last, &len));
    endpoint_ = last;
    thread_ = std::jthread([this](std::stop_token stop) { loop(stop); });
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  void loop(std::stop_token stop) {
    while (!stop.stop_requested()) {
      zmq_pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq_poll(&item, 1, 20) <= 0) continue;
      std::vector<zmq::message_t> parts;
      bool more = true;
      while (more) {
        zmq::message_t part;
        GT_ZMQ_CHECK(zmq_msg_recv(part.handle(), socket_.handle(), 0));
        more = part.more();
        parts.push_back(std::move(part));
      }
      uint64_t reply_bytes = 0;
      GT_ASSERT(parts.size() >= 2 && parts[1].size() >= sizeof reply_bytes,
                "raw echo: bad request");
      std::memcpy(&reply_bytes, parts[1].data(), sizeof reply_bytes);
      GT_ASSERT(reply_bytes <= reply_.size(), "raw echo: reply of {} bytes asked", reply_bytes);
      socket_.send(std::move(parts[0]), zmq::send_flags::sndmore);
      socket_.send(std::move(parts[1]),
                   reply_bytes ? zmq::send_flags::sndmore : zmq::send_flags::none);
      if (reply_bytes) {
        zmq::message_t payload(reply_.data(), reply_bytes, nullptr, nullptr);
        socket_.send(std::move(payload), zmq::send_flags::none);
      }
    }
  }

  zmq::socket_t socket_;
  Bytes reply_;  // the bytes every reply borrows
  std::string endpoint_;
  std::jthread thread_;  // last: joined before the socket closes
};

struct Sizes {
  size_t push_header = 0, push_payload = 0, push_reply_header = 0;
  size_t pull_header = 0, pull_reply_header = 0, pull_payload = 0;
};

// A ParamServer owning one shard of `elements` fp32 values on its own thread, and one region
// client doing push+pull round trips against it, one request at a time: the push, its reply, then
// the pull and its reply. (A leader sends its pull right behind its push,
// worker/leader/region_sync.cpp; one request at a time keeps each exchange comparable with one raw
// request/reply.)
class ServerSession {
 public:
  // keys_dir non-empty: CURVE on (the keys of region "bench" in it).
  ServerSession(wire::Context& context, const std::string& transport, const std::string& codec,
                size_t elements, const std::filesystem::path& keys_dir = {})
      : elements_(elements) {
    config_.regions = {"bench"};
    // A session waits while the others are timed (the raw echo, the CURVE twin, a busy machine):
    // never declare its region dead for that.
    config_.dead_after = std::chrono::hours(24);
    // Sessions share a context one after another; a connection cap (one ZAP handler per context)
    // is not what this measures. The CURVE twin has its own context and handler.
    config_.max_connections_per_address = 0;
    if (!keys_dir.empty()) config_.security = {wire::CurveSetting::on, keys_dir};
    config_.tensors = {{"w", elements}};
    config_.shard.downlink_codec = codec;
    config_.max_message_bytes =
        std::max<int64_t>(int64_t{64} << 20, static_cast<int64_t>(8 * elements));
    config_.run_dir =
        std::filesystem::temp_directory_path() / "geotrain-bench-server";  // never written
    server::ServerOptions options;
    options.endpoint = endpoint_for(
        transport, "server-" + codec + std::to_string(elements) + (keys_dir.empty() ? "" : "-c"));
    options.write_metrics = false;
    server_ = std::make_unique<server::ParamServer>(config_, 0, context, options);
    loop_ = std::jthread([this](std::stop_token stop) { server_->run(stop); });
    wire::ChannelOptions client_options;
    client_options.curve_client = wire::curve_client(config_.security, "bench", "bench");
    client_ = std::make_unique<wire::Client>(
        wire::connect_dealer(context, server_->endpoint(), client_options));
    must(client_->call(wire::Hello{"bench", wire::kProtocolVersion, server_->table_hash(), {}}),
         "hello");
    version_ = std::get<wire::PullReply>(
                   must(client_->call(wire::PullRequest{0, 0, true, 0}), "pull").header.body)
                   .version;

    std::vector<float> delta(elements);
    fill_gradient_like(delta, "gaussian", 7);
    compression::make_codec(codec)->encode(delta, payload_);
    sizes_.push_payload = payload_.size();
    round_trip();  // measures the frame sizes
  }
  const Sizes& sizes() const { return sizes_; }

  void round_trip() {
    ++round_;
    const bool first = round_ == 1;  // frame sizes are measured once, outside the timed loop
    wire::Push push{0, round_, version_, {{0, payload_.size()}}};
    if (first) sizes_.push_header = wire::encode_header(wire::Header{0, push}).size();
    std::vector<wire::Frame> frames;
    frames.push_back(wire::Frame::borrowed(payload_));
    auto pushed = must(client_->call(std::move(push), std::move(frames)), "push");
    if (first) sizes_.push_reply_header = wire::encode_header(pushed.header).size();
    wire::PullRequest pull{0, version_, false, 0};
    if (first) sizes_.pull_header = wire::encode_header(wire::Header{0, pull}).size();
    auto pulled = must(client_->call(pull), "pull");
    version_ = std::get<wire::PullReply>(pulled.header.body).version;
    if (first) {
      sizes_.pull_reply_header = wire::encode_header(pulled.header).size();
      sizes_.pull_payload = pulled.payloads.at(0).size();
    }
  }

 private:
  static wire::Reply must(std::optional<wire::Reply> r, const char* what) {
    GT_REQUIRE(r.has_value(), "bench server: no reply to {}", what);
    if (auto* e = std::get_if<wire::Error>(&r->header.body))
      GT_REQUIRE(false, "bench server: {}: {}", what, e->message);
    return std::move(*r);
  }

  size_t elements_;
  server::ServerConfig config_;
  std::unique_ptr<server::ParamServer> server_;
  std::unique_ptr<wire::Client> client_;
  Bytes payload_;
  uint64_t version_ = 0, round_ = 0;
  Sizes sizes_;
  std::jthread loop_;  // last: stopped and joined before the server and client go
};

// The same frames and bytes through raw DEALER/ROUTER request/reply.
class RawSession {
 public:
  RawSession(wire::Context& context, const std::string& transport, const std::string& name,
             const Sizes& sizes)
      : sizes_(sizes),
        echo_(context, endpoint_for(transport, "raw-" + name),
              std::max(sizes.pull_payload, size_t{1})),
        dealer_(context.zmq(), zmq::socket_type::dealer),
        push_payload_(sizes.push_payload) {
    int linger = 0;
    GT_ZMQ_CHECK(zmq_setsockopt(dealer_.handle(), ZMQ_LINGER, &linger, sizeof linger));
    GT_ZMQ_CHECK(zmq_connect(dealer_.handle(), echo_.endpoint().c_str()));
  }

  void round_trip() {
    exchange(sizes_.push_header, &push_payload_, 0);
    exchange(sizes_.pull_header, nullptr, sizes_.pull_payload);
  }

 private:
  void exchange(size_t header, const Bytes* payload, uint64_t reply_bytes) {
    zmq::message_t h(std::max(header, sizeof reply_bytes));
    std::memcpy(h.data(), &reply_bytes, sizeof reply_bytes);
    dealer_.send(std::move(h), payload ? zmq::send_flags::sndmore : zmq::send_flags::none);
    if (payload) dealer_.send(borrowed_frame(*payload), zmq::send_flags::none);
    bool more = true;
    while (more) {
      zmq::message_t part;
      GT_ZMQ_CHECK(zmq_msg_recv(part.handle(), dealer_.handle(), 0));
      more = part.more();
    }
  }

  Sizes sizes_;
  RawEcho echo_;
  zmq::socket_t dealer_;
  Bytes push_payload_;
};

// CURVE keys of region "bench" for one run, in a fresh temporary folder removed afterwards.
struct TempKeys {
  std::filesystem::path path;
  TempKeys()
      : path(std::filesystem::temp_directory_path() /
             fmt::format("geotrain-bench-keys-{}", ::getpid())) {
    std::filesystem::remove_all(path);
    wire::KeyDirectory::generate(path, {"bench"}, false);
  }
  ~TempKeys() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempKeys(const TempKeys&) = delete;
  TempKeys& operator=(const TempKeys&) = delete;
};

void print_table(const std::vector<ServerBenchResult>& results) {
  fmt::print("{:<7} {:<7} {:>10} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10}  {}\n", "link", "codec",
             "shard", "wire B/rt", "srv MB/s", "raw MB/s", "srv/raw", "srv rtt us", "raw rtt us",
             "note");
  for (const auto& r : results)
    fmt::print("{:<7} {:<7} {:>10} {:>11} {:>10.1f} {:>10.1f} {:>10.2f} {:>10.0f} {:>10.0f}  {}\n",
               r.transport, r.codec, r.bytes, r.wire_bytes, r.server_mbps, r.raw_zmq_mbps, r.ratio,
               r.server_rtt_us, r.raw_rtt_us, r.note);
  bool any_curve = false;
  for (const auto& r : results) any_curve = any_curve || r.has_curve;
  if (!any_curve) return;
  fmt::print("\nCURVE: the same server with CURVE on, timed alternately with it off\n");
  fmt::print("{:<7} {:<7} {:>10} {:>11} {:>11} {:>12}\n", "link", "codec", "shard", "curve MB/s",
             "curve/plain", "curve rtt us");
  for (const auto& r : results)
    if (r.has_curve)
      fmt::print("{:<7} {:<7} {:>10} {:>11.1f} {:>11.2f} {:>12.0f}\n", r.transport, r.codec,
                 r.bytes, r.curve_mbps, r.curve_ratio, r.curve_rtt_us);
}

}  // namespace

std::string server_bench_note(const std::string& transport, const std::string& codec,
                              size_t shard_bytes, size_t push_payload) {
  if (transport != "tcp") return "no target: raw inproc ZeroMQ passes a pointer";
  if (codec != "fp32")
    // The server decodes, updates and encodes the whole shard whatever the codec, so per wire
    // byte it works (shard bytes / payload bytes) times as hard as with fp32.
    return fmt::format(
        "no target: compressed, {:.0f}x the server work per wire byte of fp32",
        static_cast<double>(shard_bytes) / static_cast<double>(std::max<size_t>(push_payload, 1)));
  if (push_payload < 1000000) return "no target: under 1 MB, latency-bound";
  return "target >= 0.8";
}

std::vector<ServerBenchResult> measure_server(const ServerBenchOptions& options) {
  for (const auto& c : options.codecs)
    compression::make_codec(c);  // reject bad specs before measuring
  for (const auto& t : options.transports) endpoint_for(t, "check");
  for (size_t s : options.sizes)
    GT_REQUIRE(s >= 4096 && s % 4 == 0,
               "bench server: size {} must be a multiple of 4, at least 4096", s);
  std::optional<TempKeys> keys;
  if (options.curve) keys.emplace();
  wire::Context context;
  std::vector<ServerBenchResult> results;
  const size_t total = options.transports.size() * options.codecs.size() * options.sizes.size();
  for (const auto& transport : options.transports) {
    for (const auto& codec : options.codecs) {
      for (size_t bytes : options.sizes) {
        if (!options.json)
          spdlog::info("[{}/{}] {} {} {} bytes", results.size() + 1, total, transport, codec,
                       bytes);
        ServerSession server(context, transport, codec, bytes / 4);
        const Sizes sizes = server.sizes();
        RawSession raw_session(context, transport, codec + std::to_string(bytes), sizes);
        const auto [srv, raw] = time_alternately(
            options.seconds, [&] { server.round_trip(); }, [&] { raw_session.round_trip(); });
        ServerBenchResult r;
        r.transport = transport;
        r.codec = codec;
        r.bytes = bytes;
        r.wire_bytes = sizes.push_payload + sizes.pull_payload;
        // Medians: on a shared machine a few descheduled round trips would swing the means.
        r.server_mbps = static_cast<double>(r.wire_bytes) / srv.median_s / 1e6;
        r.raw_zmq_mbps = static_cast<double>(r.wire_bytes) / raw.median_s / 1e6;
        r.ratio = r.server_mbps / r.raw_zmq_mbps;
        r.server_rtt_us = srv.median_s * 1e6;
        r.raw_rtt_us = raw.median_s * 1e6;
        r.server_round_trips = srv.count;
        r.raw_round_trips = raw.count;
        r.note = server_bench_note(transport, codec, bytes, sizes.push_payload);
        if (options.curve && transport == "tcp") {
          // Its own context: one ZAP handler per context (wire/zap_authenticator.hpp).
          wire::Context curve_context;
          ServerSession curve(curve_context, transport, codec, bytes / 4, keys->path);
          const auto [plain, secured] = time_alternately(
              options.seconds, [&] { server.round_trip(); }, [&] { curve.round_trip(); });
          r.has_curve = true;
          r.curve_mbps = static_cast<double>(r.wire_bytes) / secured.median_s / 1e6;
          r.curve_rtt_us = secured.median_s * 1e6;
          r.curve_ratio = plain.median_s / secured.median_s;
        }
        results.push_back(r);
      }
    }
  }
  return results;
}

std::size_t rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6));
  return 0;
}

ServerSoakResult soak_server(const ServerBenchOptions& options) {
  GT_REQUIRE(options.duration > 0, "bench server: --duration must be positive");
  ServerSoakResult soak;
  soak.transport = "tcp";
  soak.codec = options.codecs.front();
  soak.bytes = *std::max_element(options.sizes.begin(), options.sizes.end());
  soak.curve = options.curve;
  std::optional<TempKeys> keys;
  if (options.curve) keys.emplace();
  wire::Context context;
  ServerSession session(context, soak.transport, soak.codec, soak.bytes / 4,
                        keys ? keys->path : std::filesystem::path());
  // Warm-up: pools filled, buffers touched; then the reading that counts as the start.
  for (int i = 0; i < 20; ++i) session.round_trip();
  soak.rss_start_kib = soak.rss_max_kib = rss_kib();
  const auto start = Clock::now();
  auto next_reading = start + std::chrono::seconds(1);
  for (;;) {
    session.round_trip();
    ++soak.round_trips;
    const auto now = Clock::now();
    if (now >= next_reading) {
      soak.rss_max_kib = std::max(soak.rss_max_kib, rss_kib());
      next_reading += std::chrono::seconds(1);
      if (std::chrono::duration<double>(now - start).count() >= options.duration) break;
    }
  }
  soak.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  soak.rss_end_kib = rss_kib();
  soak.rss_max_kib = std::max(soak.rss_max_kib, soak.rss_end_kib);
  return soak;
}

int run_server_bench(const ServerBenchOptions& options) {
  const std::size_t rss_at_start = rss_kib();
  const auto results = measure_server(options);
  std::optional<ServerSoakResult> soak;
  if (options.duration > 0) soak = soak_server(options);
  const std::size_t rss_at_end = rss_kib();
  if (options.json) {
    nlohmann::json doc;
    doc["device"] = cpu_name();
    doc["seconds"] = options.seconds;
    doc["target"] =
        "server_vs_raw >= 0.8 for tcp, fp32, payloads of 1 MB and up (rows whose note is \"target "
        ">= 0.8\")";
    doc["sizes"] = nlohmann::json::array();
    for (const auto& r : results)
      doc["sizes"].push_back({{"bytes", r.bytes},
                              {"transport", r.transport},
                              {"codec", r.codec},
                              {"wire_bytes", r.wire_bytes},
                              {"server_mbps", r.server_mbps},
                              {"raw_zmq_mbps", r.raw_zmq_mbps},
                              {"ratio", r.ratio},
                              {"server_vs_raw", r.ratio},
                              {"server_rtt_us", r.server_rtt_us},
                              {"raw_rtt_us", r.raw_rtt_us},
                              {"server_round_trips", r.server_round_trips},
                              {"raw_round_trips", r.raw_round_trips},
                              {"note", r.note}});
    if (options.curve) {
      auto& rows = doc["sizes"];
      for (size_t i = 0; i < results.size(); ++i)
        if (results[i].has_curve) {
          rows[i]["curve_mbps"] = results[i].curve_mbps;
          rows[i]["curve_rtt_us"] = results[i].curve_rtt_us;
          rows[i]["curve_ratio"] = results[i].curve_ratio;
        }
    }
    doc["rss_kib_at_start"] = rss_at_start;
    doc["rss_kib_at_end"] = rss_at_end;
    if (soak)
      doc["soak"] = {{"transport", soak->transport},
                     {"codec", soak->codec},
                     {"bytes", soak->bytes},
                     {"curve", soak->curve},
                     {"seconds", soak->seconds},
                     {"round_trips", soak->round_trips},
                     {"rss_start_kib", soak->rss_start_kib},
                     {"rss_end_kib", soak->rss_end_kib},
                     {"rss_max_kib", soak->rss_max_kib}};
    fmt::print("{}\n", doc.dump(2));
  } else {
    fmt::print(
        "geotrain bench server: push+pull round trips, one at a time, {:.1f} s per measurement, on "
        "{}\n",
        options.seconds, cpu_name());
    fmt::print(
        "MB/s = payload bytes of push + pull reply (wire B/rt) per median round trip, 10^6 B/s\n");
    fmt::print(
        "The issue's target, server at least 0.8 of raw ZeroMQ, applies to tcp, fp32, payloads of "
        "1 MB and up\n");
    print_table(results);
    if (soak)
      fmt::print(
          "\nsoak: {:.0f} s of push+pull round trips ({}, {}, {} bytes{}), {} round trips; RSS "
          "{} KiB at its start, {} KiB at its end (max {} KiB)\n",
          soak->seconds, soak->transport, soak->codec, soak->bytes, soak->curve ? ", CURVE" : "",
          soak->round_trips, soak->rss_start_kib, soak->rss_end_kib, soak->rss_max_kib);
    fmt::print("RSS of this process: {} KiB at start, {} KiB at end\n", rss_at_start, rss_at_end);
  }
  return 0;
}

}  // namespace geotrain::bench
