// geotrain_fuzz_seeds: writes the generated part of the seed corpus (fuzz/corpus/).
//
//   geotrain_fuzz_seeds SOURCE_DIR [OUT_DIR]     (OUT_DIR defaults to SOURCE_DIR/fuzz/corpus)
//
// Valid inputs for each target, made with the project's own encoders, so that fuzzing starts
// from inputs that pass every check and mutates from there:
//   wire_header/    one encoded frame 0 per message type
//   codec_decode/   a payload of every factory codec at several sizes ([0x00][0x01][payload])
//   codec_zstd/     the same as inner payloads ([0x00][0x01][inner]) and whole zstd payloads
//   checkpoint/     a checkpoint written by CheckpointStore::write (fuzz/checkpoint.cpp's format)
//   server_message/ conversations with the fuzz target's server (fuzz/server_harness.hpp): pushes
//                   and pulls of every shape, several regions, parking, kv, the other requests
//   *_config/       copies of the configs in SOURCE_DIR/configs
// Each generated seed is checked to be accepted by its decoder before it is written. Files
// named crash-* in the corpus are regression inputs kept by hand; this program never touches
// them. Deterministic: running it again writes the same bytes.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "compression/codec.hpp"
#include "compression/factory.hpp"
#include "core/error.hpp"
#include "fuzz/checkpoint_layout.hpp"
#include "fuzz/server_harness.hpp"
#include "server/checkpoint.hpp"
#include "wire/messages.hpp"

using namespace geotrain;
namespace fs = std::filesystem;

namespace {

std::string as_string(const void* data, size_t size) {
  return std::string(static_cast<const char*>(data), size);
}

void write(const fs::path& file, const std::string& bytes) {
  fs::create_directories(file.parent_path());
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  GT_ASSERT(out.good(), "cannot write {}", file.string());
}

std::string read(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  GT_ASSERT(in.good(), "cannot read {}", file.string());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// "topk:ratio=0.01" -> "topk-ratio-0.01": a file name.
std::string file_stem(std::string spec) {
  for (char& c : spec)
    if (c == ':' || c == '=' || c == ',' || c == '+') c = '-';
  return spec;
}

size_t write_wire(const fs::path& out) {
  const std::vector<wire::Segment> segments{{0, 120}, {300, 92}};
  const std::vector<std::pair<std::string, wire::Body>> messages{
      {"hello",
       wire::Hello{"us-east", wire::kProtocolVersion, 0x1234abcd, {"ef-downlink", "full-pull"}}},
      {"hello-reply",
       wire::HelloReply{"eu-west", {{0, 0, 4096}, {1, 4096, 1024}}, 7, 1000, {"ef-downlink"}}},
      {"heartbeat", wire::Heartbeat{}},
      {"push", wire::Push{1, 12, 11, segments}},
      {"push-reply", wire::PushReply{1, 12, 2, 1500}},
      {"pull", wire::PullRequest{0, 11, false, 12}},
      {"pull-reply", wire::PullReply{0, 12, 12, true, segments}},
      {"error", wire::Error{wire::ErrorCode::bad_shard, "shard 9 is not served here"}},
      {"stats-request", wire::StatsRequest{}},
      {"stats-reply", wire::StatsReply{R"({"rounds":3})"}},
      {"checkpoint", wire::CheckpointRequest{}},
      {"checkpoint-reply", wire::CheckpointReply{40}},
      {"shutdown", wire::Shutdown{}},
      {"ack", wire::Ack{}},
      {"goodbye", wire::Goodbye{}},
      {"kv-set", wire::KvSet{"gloo/us-east/0", Bytes{std::byte{1}, std::byte{2}, std::byte{3}}}},
      {"kv-get", wire::KvGet{"gloo/us-east/0"}},
      {"kv-try-get", wire::KvTryGet{"gloo/us-east/join/1"}},
      {"heartbeat-reply", wire::HeartbeatReply{{3, 4, 5}}},
      {"kv-reply", wire::KvReply{"gloo/us-east/0", Bytes{std::byte{4}, std::byte{5}}}},
      {"replica", wire::Replica{{{0, 12, 3, true}, {1, 7, 3, false, true, 6}}, 1}},
      {"take-back", wire::TakeBack{}},
  };
  GT_ASSERT(messages.size() == std::variant_size_v<wire::Body>, "a message type has no seed");
  uint64_t id = 1;
  for (const auto& [name, body] : messages) {
    const auto frame = wire::encode_header({id++, body});
    (void)wire::decode_header(frame);  // accepted
    write(out / "wire_header" / ("seed-" + name + ".bin"), as_string(frame.data(), frame.size()));
  }
  return messages.size();
}

std::vector<float> values(size_t n) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i)
    x[i] = i % 11 == 0
               ? 0.0f
               : std::sin(0.37f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 5));
  return x;
}

// n elements as the squarest matrix they make: what a codec that factorises matrices encodes.
compression::MatrixShape squarest(size_t n) {
  size_t cols = 1;
  for (size_t c = 1; c * c <= n; ++c)
    if (n % c == 0) cols = c;
  return {n / cols, cols};
}

size_t write_codecs(const fs::path& out) {
  std::vector<std::string> specs;
  for (const std::string& spec : compression::standard_codec_specs()) {
    const std::string base = spec.substr(0, spec.find('+'));
    if (std::find(specs.begin(), specs.end(), base) == specs.end()) specs.push_back(base);
  }
  // Several chunks in small payloads, too.
  for (const char* extra : {"int8:chunk=32", "int4:chunk=32", "onebit:chunk=32"})
    specs.push_back(extra);
  size_t count = 0;
  for (const auto& spec : specs) {
    for (size_t n : {size_t{1}, size_t{37}, size_t{300}, size_t{1500}}) {
      auto codec = compression::make_codec(spec);
      Bytes payload;
      codec->encode_matrix(values(n), squarest(n), 0, payload);
      if (payload.size() > 4096) continue;  // small seeds mutate faster
      std::vector<float> y(n);
      codec->decode(payload, y);  // accepted
      const std::string stem = fmt::format("seed-{}-n{}", file_stem(spec), n);
      const std::string body = as_string(payload.data(), payload.size());
      write(out / "codec_decode" / (stem + ".bin"), std::string("\x00\x01", 2) + body);
      write(out / "codec_zstd" / (stem + ".bin"), std::string("\x00\x01", 2) + body);
      auto zstd = compression::make_codec(spec + "+zstd");
      Bytes packed;
      zstd->encode_matrix(values(n), squarest(n), 0, packed);
      zstd->decode(packed, y);  // accepted
      write(out / "codec_zstd" / (stem + "-raw.bin"),
            std::string("\x00\x11", 2) + as_string(packed.data(), packed.size()));
      count += 3;
    }
  }
  // powersgd's second format: a span's pieces (a 10 x 12 matrix, 7 other values, a 3 x 5 matrix)
  // in one payload, as a server sends a shard's change.
  const std::vector<compression::SpanPiece> pieces = {{120, {10, 12}}, {7, {}}, {15, {3, 5}}};
  Bytes payload;
  compression::make_codec("powersgd:rank=2")->encode_pieces(values(142), pieces, 0, payload);
  std::vector<float> y(142);
  compression::decode_payload(payload, y);  // accepted
  write(out / "codec_decode" / "seed-powersgd-pieces-n142.bin",
        std::string("\x00\x01", 2) + as_string(payload.data(), payload.size()));
  return count + 1;
}

size_t write_checkpoint(const fs::path& out) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("geotrain-seeds-{}", ::getpid());
  fs::remove_all(dir);
  server::CheckpointState state{40, fuzz::kCheckpointStateHash, {}};
  for (const auto& range : fuzz::checkpoint_ranges()) {
    server::ShardSnapshot s{range, 17 + range.id, 40, values(range.count), values(range.count)};
    for (float& m : s.momentum) m *= 0.5f;
    state.shards.push_back(std::move(s));
  }
  server::CheckpointStore store(dir, 1);
  const fs::path folder = store.write(state);
  (void)store.load(folder, fuzz::kCheckpointStateHash, fuzz::checkpoint_ranges());  // accepted
  std::string input = read(folder / "manifest.json");
  for (const auto& range : fuzz::checkpoint_ranges())
    input += std::string(fuzz::kCheckpointSeparator) +
             read(folder / fmt::format("shard-{}.bin", range.id));
  fs::remove_all(dir);
  write(out / "checkpoint" / "seed-checkpoint.bin", std::string(1, '\x00') + input);
  write(out / "checkpoint" / "seed-checkpoint-fixed.bin", std::string(1, '\x01') + input);
  return 2;
}

// Builds a server_message input and plays it against the target's server as it goes, so that a
// seed can use what the server answered (shard ranges, versions) and is checked to be accepted:
// every message is answered, and with no Error unless the seed means one (`expect_error`).
class Recorder {
 public:
  Recorder(uint8_t variant, uint8_t registered, bool fix)
      : config_(server::parse_server_config(fuzz::server_yaml(
            variant, fs::temp_directory_path() / fmt::format("geotrain-seeds-{}", ::getpid())))),
        harness_(context_, config_, "seeds"),
        input_(variant, registered, fix) {
    const char* regions[] = {"a", "b", "c"};
    for (uint8_t p = 0; p < registered; ++p) shards_ = harness_.hello(p, regions[p]).shards;
  }
  ~Recorder() { fs::remove_all(config_.run_dir); }

  uint64_t table_hash() { return harness_.server().table_hash(); }
  const std::vector<wire::ShardInfo>& shards() const { return shards_; }

  std::vector<fuzz::ServerHarness::Received> say(size_t peer, wire::Body body,
                                                 const std::vector<Bytes>& payloads = {},
                                                 bool expect_error = false) {
    const wire::Header header{next_id_++, std::move(body)};
    std::vector<std::string> frames;
    std::vector<wire::Frame> messages;
    messages.push_back(wire::encode_header(header));
    for (const auto& p : payloads) {
      frames.push_back(as_string(p.data(), p.size()));
      messages.emplace_back(p.data(), p.size());
    }
    input_.message(peer, header, frames);
    std::vector<fuzz::ServerHarness::Received> replies;
    harness_.send(peer, std::move(messages), replies);
    for (const auto& r : replies) {
      const auto* e = std::get_if<wire::Error>(&r.reply.header.body);
      GT_ASSERT(expect_error || e == nullptr, "seed message {} refused: {}", header.request_id,
                e ? e->message : "");
    }
    return replies;
  }
  void advance(int64_t ms) {
    input_.advance(ms);
    std::vector<fuzz::ServerHarness::Received> replies;
    harness_.advance(ms, replies);
  }
  const std::string& bytes() const { return input_.bytes(); }

 private:
  server::ServerConfig config_;
  wire::Context context_;
  fuzz::ServerHarness harness_;
  fuzz::Conversation input_;
  std::vector<wire::ShardInfo> shards_;
  uint64_t next_id_ = 100;
};

// A push of `spec`-encoded deltas over `segments` ({offset, count} in the shard) of shard `info`.
std::pair<wire::Push, std::vector<Bytes>> make_push(
    const wire::ShardInfo& info, uint64_t round, uint64_t base_version, const std::string& spec,
    const std::vector<std::pair<uint64_t, uint64_t>>& segments, uint64_t tokens = 0) {
  auto codec = compression::make_codec(spec);
  wire::Push push{info.id, round, base_version, {}, tokens};
  std::vector<Bytes> payloads;
  for (const auto& [offset, count] : segments) {
    Bytes payload;
    auto x = values(count);
    for (float& v : x) v *= 0.01f;
    codec->encode(x, payload);
    push.segments.push_back({offset, static_cast<uint64_t>(payload.size())});
    payloads.push_back(std::move(payload));
  }
  return {std::move(push), std::move(payloads)};
}

template <typename T>
const T& reply_as(const std::vector<fuzz::ServerHarness::Received>& replies) {
  for (const auto& r : replies)
    if (const T* b = std::get_if<T>(&r.reply.header.body)) return *b;
  GT_ASSERT(false, "a seed message got no reply of the expected type");
  std::abort();
}

size_t write_server_messages(const fs::path& out) {
  const fs::path dir = out / "server_message";
  size_t count = 0;
  auto save = [&](const std::string& name, const Recorder& r) {
    write(dir / ("seed-" + name + ".bin"), r.bytes());
    ++count;
  };
  {  // One region: hello, full fp32 pushes and pulls, then compressed pulls since a version.
    Recorder r(1, 0, false);
    const auto hello = reply_as<wire::HelloReply>(
        r.say(0, wire::Hello{"a", wire::kProtocolVersion, r.table_hash(), {"kv"}}));
    const auto& s = hello.shards.front();
    auto [p1, f1] = make_push(s, 1, 0, "fp32", {{0, s.count}});
    r.say(0, p1, f1);
    const auto full = reply_as<wire::PullReply>(r.say(0, wire::PullRequest{s.id, 0, true, 1}));
    auto [p2, f2] = make_push(s, 2, full.version, "fp32", {{0, s.count}});
    r.say(0, p2, f2);
    r.say(0, wire::PullRequest{s.id, full.version, false, 2});
    r.say(0, wire::Heartbeat{});
    save("one-region-fp32", r);
  }
  {  // Segments of several codecs side by side, with gaps; checksums fixed by the target.
    Recorder r(1, 1, true);
    const auto& s = r.shards().front();
    const uint64_t q = s.count / 4;
    for (const char* spec : {"int8", "int4", "onebit", "fp16", "bf16", "topk:ratio=0.1", "fp4"}) {
      Recorder one(1, 1, true);
      auto [p, f] = make_push(s, 1, 0, spec, {{0, q}, {2 * q, q}});
      one.say(0, p, f);
      one.say(0, wire::PullRequest{s.id, 0, true, 0});
      save(fmt::format("segments-{}", file_stem(spec)), one);
    }
    auto [p, f] = make_push(s, 1, 0, "int8+zstd", {{q, 2 * q}});
    r.say(0, p, f);
    save("segments-int8-zstd", r);
  }
  {  // Two regions in synchronous rounds: the first push waits (parked) for the second.
    Recorder r(0, 2, false);
    const auto& s = r.shards().front();
    auto [p1, f1] = make_push(s, 1, 0, "fp32", {{0, s.count}});
    r.say(0, p1, f1);
    r.say(0, wire::PullRequest{s.id, 0, true, 1});
    r.advance(600);
    r.say(0, wire::Heartbeat{});
    r.say(1, wire::Heartbeat{});
    r.advance(600);  // region c, never registered, is declared dead; a and b spoke 600 ms ago
    r.say(1, p1, f1);
    r.say(1, wire::PullRequest{s.id, 0, true, 1});
    save("two-regions-sync", r);
  }
  {  // Quorum: two of three regions release a round after the grace window; tokens weigh.
    Recorder r(2, 3, false);
    const auto& s = r.shards().front();
    auto [p1, f1] = make_push(s, 1, 0, "fp32", {{0, s.count}}, 1000);
    r.say(0, p1, f1);
    auto [p2, f2] = make_push(s, 1, 0, "fp32", {{0, s.count}}, 3000);
    r.say(1, p2, f2);
    r.advance(200);
    r.say(2, wire::PullRequest{s.id, 0, true, 1});
    r.say(0, wire::PullRequest{s.id, 0, true, 1});
    save("quorum", r);
  }
  {  // Two shards, a checkpoint every round, a checkpoint request and stats.
    Recorder r(3, 1, false);
    for (const auto& s : r.shards()) {
      auto [p, f] = make_push(s, 1, 0, "fp32", {{0, s.count}});
      r.say(0, p, f);
    }
    r.say(0, wire::CheckpointRequest{});
    r.say(0, wire::StatsRequest{});
    save("two-shards-checkpoint", r);
  }
  {  // The key-value exchange, open to unregistered peers: a get that waits for its set.
    Recorder r(1, 0, false);
    r.say(1, wire::KvGet{"gloo/a/0"});
    r.say(2, wire::KvSet{"gloo/a/0", Bytes{std::byte{1}, std::byte{2}}});
    r.say(1, wire::KvGet{"gloo/a/0"});
    save("kv", r);
  }
  {  // Refusals: unregistered, wrong table hash, unknown region, replies sent as requests.
    Recorder r(1, 0, false);
    r.say(0, wire::Heartbeat{}, {}, true);
    r.say(0, wire::Hello{"a", wire::kProtocolVersion, r.table_hash() ^ 1, {}}, {}, true);
    r.say(0, wire::Hello{"nowhere", wire::kProtocolVersion, r.table_hash(), {}}, {}, true);
    r.say(0, wire::Hello{"a", wire::kProtocolVersion, r.table_hash(), {}});
    r.say(0, wire::PushReply{0, 1, 0, 0}, {}, true);
    r.say(0, wire::Ack{}, {}, true);
    r.say(0, wire::PullRequest{99, 0, true, 0}, {}, true);
    r.say(1, wire::Hello{"a",
                         wire::kProtocolVersion,
                         r.table_hash(),
                         {}});  // a second connection replaces the first
    r.say(1, wire::Shutdown{});
    save("refusals-shutdown", r);
  }
  return count;
}

size_t copy_configs(const fs::path& source, const fs::path& out) {
  size_t count = 0;
  auto copy = [&](const fs::path& file, const char* target, const std::string& prefix = "") {
    write(out / target / ("seed-" + file.stem().string() + ".yaml"), prefix + read(file));
    ++count;
  };
  const fs::path configs = source / "configs";
  for (const auto& e : fs::recursive_directory_iterator(configs)) {
    if (!e.is_regular_file() || e.path().extension() != ".yaml") continue;
    const auto folder = e.path().parent_path().filename().string();
    if (folder == "wan") {
      const bool is_profile = e.path().filename() != "example-netsim.yaml";
      copy(e.path(), "netsim_config", std::string(1, is_profile ? '\x01' : '\x00'));
    } else if (folder == "sweeps") {
      copy(e.path(), "sweep_config");
    } else {
      for (const char* target : {"server_config", "worker_config", "run_config"})
        copy(e.path(), target);
    }
  }
  return count;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s SOURCE_DIR [OUT_DIR]\n", argv[0]);
    return 2;
  }
  const fs::path source = argv[1];
  const fs::path out = argc == 3 ? fs::path(argv[2]) : source / "fuzz" / "corpus";
  const size_t n = write_wire(out) + write_codecs(out) + write_checkpoint(out) +
                   write_server_messages(out) + copy_configs(source, out);
  std::printf("wrote %zu seeds under %s\n", n, out.c_str());
  return 0;
}
