// Fuzz target: the server's handling of every message a peer can send (server::ParamServer:
// hello, push, pull, heartbeat, stats, checkpoint, shutdown, the key-value exchange, and every
// reply type sent to it by mistake), behind the wire decoder: the checks of each field where it
// is used (shard, round, base version, segments against frames, codec ids, payload headers and
// checksums, codec bodies, staleness gate, parking), membership and liveness, and the replies.
//
// Input:
//   [setup] then records until the input ends.
//   setup bits 0-1: the server configuration (fuzz::server_yaml: ssp bound 0; bound 1 with
//                   compressed pulls; quorum with momentum; two shards with checkpoints)
//         bits 2-3: peers 0..n-1 say hello as regions a, b, c before the records (n = 0..3)
//         bit 4:    set each payload frame's body length and checksum (fix_header) before it is
//                   sent, so that mutations of payload headers and bodies reach the codecs
//   record: [op]
//     op & 0x80:    advance the server's clock by (op & 0x7f) x 20 ms, then one server step
//     otherwise:    one message from peer (op & 3) % 3 of 1 + ((op >> 2) & 7) frames, each
//                   [u16 little-endian length][bytes]; frame 0 is the header; one server step
// A server per input (fuzz::ServerHarness: inproc, manual clock), driven from this thread.
//
// Contracts checked: no exception escapes the server's step (a bad message is an Error reply,
// not a throw); every reply the server sends decodes (wire::decode_header); a step whose replies
// are all Error replies leaves every shard's version, released round, gate clocks and values as
// they were; a Shutdown ends the conversation as it would end the server's loop.
// Seeds are conversations made by fuzz/make_seeds.cpp.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <array>
#include <map>

#include "compression/payload.hpp"
#include "fuzz/codec_check.hpp"
#include "fuzz/fuzz_target.hpp"
#include "fuzz/server_harness.hpp"
#include "server/config.hpp"

using namespace geotrain;

namespace {

struct ShardState {
  uint64_t version = 0;
  uint64_t released = 0;
  std::vector<uint64_t> clocks;
  std::vector<float> values;
  bool operator==(const ShardState&) const = default;
};

std::vector<ShardState> snapshot(const server::ParamServer& s) {
  std::vector<ShardState> out;
  for (const auto& shard : s.shards())
    out.push_back({shard.version(), shard.released_round(), shard.gate().clocks(),
                   std::vector<float>(shard.values().begin(), shard.values().end())});
  return out;
}

const server::ServerConfig& config(uint8_t variant) {
  static const std::array<server::ServerConfig, 4> configs = [] {
    std::array<server::ServerConfig, 4> c;
    for (uint8_t v = 0; v < 4; ++v)
      c[v] = server::parse_server_config(fuzz::server_yaml(v, fuzz::scratch_dir() / "run"));
    return c;
  }();
  return configs.at(variant & 3);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static uint64_t inputs = 0;
  // One context for many inputs (a context per input would start and stop its threads every
  // time), renewed every kInputsPerContext: ZeroMQ closes sockets on its reaper thread, after the
  // input that closed them, and on a loaded machine the closed ones can pile up to the context's
  // 1023-socket limit ("Too many open files", found by this target after 78,585 inputs).
  // Terminating the context waits until every socket is closed, so the pile is bounded, and a
  // socket the server failed to close would hang here (a -timeout report) instead of piling up.
  constexpr uint64_t kInputsPerContext = 64;
  static std::unique_ptr<wire::Context> context;
  if (inputs % kInputsPerContext == 0) {
    context.reset();
    context = std::make_unique<wire::Context>();
  }
  if (inputs == 0) spdlog::set_level(spdlog::level::off);  // the server logs every join and refusal
  fuzz::InputReader in(data, size);
  const uint8_t setup = in.byte();
  const bool fix = setup & 0x10;
  fuzz::ServerHarness harness(*context, config(setup), fmt::format("fuzz-server-{}", inputs++));
  const char* regions[] = {"a", "b", "c"};
  for (size_t p = 0; p < ((setup >> 2) & 3u); ++p) harness.hello(p, regions[p]);

  std::vector<fuzz::ServerHarness::Received> replies;
  bool go_on = true;
  while (go_on && in.remaining() > 0) {
    const uint8_t op = in.byte();
    const auto before = snapshot(harness.server());
    replies.clear();
    if (op & 0x80) {
      go_on = harness.advance((op & 0x7f) * fuzz::kClockStepMs, replies);
      continue;  // deaths and grace windows change state without any reply
    }
    const size_t peer = (op & 3u) % fuzz::kPeers;
    const size_t count = 1 + ((op >> 2) & 7u);
    std::vector<wire::Frame> frames;
    for (size_t f = 0; f < count; ++f) {
      const uint8_t lo = in.byte(), hi = in.byte();
      const auto bytes = in.take(lo | (size_t{hi} << 8));
      wire::Frame frame(bytes.data(), bytes.size());
      if (fix && f > 0)
        fuzz::fix_header(ByteSpan(static_cast<std::byte*>(frame.data()), frame.size()));
      frames.push_back(std::move(frame));
    }
    go_on = harness.send(peer, std::move(frames), replies);
    const bool all_errors =
        !replies.empty() && std::all_of(replies.begin(), replies.end(), [](const auto& r) {
          return std::holds_alternative<wire::Error>(r.reply.header.body);
        });
    if (all_errors)
      GT_FUZZ_CHECK(snapshot(harness.server()) == before,
                    "a message refused with an error reply changed a shard");
  }
  return 0;
}
