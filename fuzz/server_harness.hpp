// The server the server_message fuzz target talks to, shared with the seed generator
// (fuzz/make_seeds.cpp) so that its seeds are conversations the server accepts.
//
// ServerHarness owns one ParamServer on inproc:// of the caller's wire::Context (one per process:
// a context per input would cost its threads' start and stop every time), kPeers region clients
// (DEALER) and a manual clock, all driven from one thread: send() queues a message from
// one peer, then runs the server's step() once (the message is in the server's queue by then:
// inproc delivers on send) and collects every reply the peers received. Nothing blocks beyond
// that one step. One harness per fuzz input, so that no state leaks from one input to the next;
// the run folder (metrics off, checkpoints) is emptied when a harness is made.
//
// The input format (fuzz/server_message.cpp) is written by Conversation, here too.
#pragma once

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/config.hpp"
#include "server/param_server.hpp"
#include "wire/client.hpp"

namespace geotrain::fuzz {

inline constexpr size_t kPeers = 3;          // DEALER clients; regions a, b, c
inline constexpr size_t kMaxFuzzFrames = 8;  // frames per message an input can describe
inline constexpr int64_t kClockStepMs = 20;  // an input's clock op advances (op & 0x7f) x this

// Server configurations an input chooses from (setup byte, bits 0-1). A small table (256
// elements, chunk 32) so that a full fp32 push fits in a fuzz input.
inline std::string server_yaml(uint8_t variant, const std::filesystem::path& run_dir) {
  static const char* const kServer[4] = {
      // 0: synchronous rounds, every configured region waited for from the start.
      "  staleness_bound: 0\n",
      // 1: bounded staleness, compressed pulls with server-side EF, inverse weighting.
      "  staleness_bound: 1\n  wait_for_all_regions: false\n  downlink_codec: int8\n"
      "  staleness_weighting: inverse\n  downlink_codecs: {b: onebit}\n",
      // 2: quorum merging with tokens, an outer optimizer with Nesterov momentum.
      "  staleness_bound: 1\n  wait_for_all_regions: false\n"
      "  consistency: {policy: quorum, quorum: 2, grace_ms: 100, weighting: tokens}\n"
      "  optimizer: {lr: 0.7, momentum: 0.9, nesterov: true}\n  downlink_codec: topk:ratio=0.1\n",
      // 3: two shards per region, a checkpoint every released round, a small message limit.
      "  staleness_bound: 2\n  wait_for_all_regions: false\n  shards_per_region: 2\n"
      "  checkpoint: {every: 1, keep: 2}\n  max_message_bytes: 4096\n",
  };
  return fmt::format(R"(
regions: [a, b, c]
model:
  tensors: [{{name: crit.w, size: 64}}, {{name: free.w, size: 64}}, {{name: other.w, size: 128}}]
  critical: ["crit.*"]
server:
  chunk: 32
  dead_after_ms: 1000
  heartbeat_ms: 100
  run_dir: "{}"
{})",
                     run_dir.string(), kServer[variant & 3]);
}

class ServerHarness {
 public:
  // `name`: the inproc endpoint's, unique in `context`.
  ServerHarness(wire::Context& context, const server::ServerConfig& config,
                const std::string& name) {
    std::filesystem::remove_all(config.run_dir);
    std::filesystem::create_directories(config.run_dir);
    server::ServerOptions options;
    options.endpoint = "inproc://" + name;
    auto now = now_;
    options.clock = [now] {
      return std::chrono::steady_clock::time_point(std::chrono::milliseconds(now->load()));
    };
    options.write_metrics = false;
    server_ = std::make_unique<server::ParamServer>(config, 0, context, options);
    wire::ChannelOptions peer;
    peer.send_hwm = peer.receive_hwm = 1000;  // replies are collected after every step
    for (auto& c : clients_)
      c = std::make_unique<wire::Client>(wire::connect_dealer(context, *options.endpoint, peer));
  }

  server::ParamServer& server() { return *server_; }
  wire::Client& client(size_t peer) { return *clients_.at(peer); }

  struct Received {
    size_t peer = 0;
    wire::Reply reply;
  };

  // Sends `frames` as one message from `peer` and runs one server step. False once the server
  // has received a Shutdown (its loop would end).
  bool send(size_t peer, std::vector<wire::Frame> frames, std::vector<Received>& replies) {
    if (!client(peer).send_raw(std::move(frames))) return true;  // peer's queue full: not sent
    return step(replies);
  }
  // Advances the clock, then one server step (liveness sweep, grace windows, parked retries).
  bool advance(int64_t ms, std::vector<Received>& replies) {
    now_->fetch_add(ms);
    return step(replies);
  }
  // Registers `peer` as `region` with the right table hash; the reply must be HelloReply.
  wire::HelloReply hello(size_t peer, const std::string& region) {
    std::vector<wire::Frame> frames;
    frames.push_back(wire::encode_header(
        {1, wire::Hello{region, wire::kProtocolVersion, server_->table_hash(), {}}}));
    std::vector<Received> replies;
    send(peer, std::move(frames), replies);
    GT_ASSERT(replies.size() == 1 &&
                  std::holds_alternative<wire::HelloReply>(replies.front().reply.header.body),
              "the harness's hello as region {} was not answered with helloReply", region);
    return std::get<wire::HelloReply>(replies.front().reply.header.body);
  }

 private:
  bool step(std::vector<Received>& replies) {
    const bool go_on = server_->step(std::chrono::milliseconds(0));
    for (size_t p = 0; p < kPeers; ++p)
      while (auto r = client(p).receive(std::chrono::milliseconds(0)))
        replies.push_back({p, std::move(*r)});
    return go_on;
  }

  std::shared_ptr<std::atomic<int64_t>> now_ = std::make_shared<std::atomic<int64_t>>(0);
  std::unique_ptr<server::ParamServer> server_;
  std::array<std::unique_ptr<wire::Client>, kPeers> clients_;
};

// Writes an input of the server_message target (format in fuzz/server_message.cpp).
class Conversation {
 public:
  // variant: server_yaml's; registered: peers 0..registered-1 say hello as a, b, c first;
  // fix: set every payload frame's body length and checksum.
  Conversation(uint8_t variant, uint8_t registered, bool fix) {
    bytes_.push_back(static_cast<char>((variant & 3) | ((registered & 3) << 2) | (fix ? 0x10 : 0)));
  }
  Conversation& message(size_t peer, const wire::Header& header,
                        const std::vector<std::string>& payloads = {}) {
    const auto frame0 = wire::encode_header(header);
    GT_ASSERT(payloads.size() + 1 <= kMaxFuzzFrames, "too many frames for a fuzz input");
    bytes_.push_back(static_cast<char>(peer % kPeers + 4 * payloads.size()));
    frame(std::string(static_cast<const char*>(frame0.data()), frame0.size()));
    for (const auto& p : payloads) frame(p);
    return *this;
  }
  Conversation& advance(int64_t ms) {
    bytes_.push_back(static_cast<char>(0x80 | std::min<int64_t>(ms / kClockStepMs, 0x7f)));
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  void frame(const std::string& f) {
    GT_ASSERT(f.size() <= 0xffff, "a frame of {} bytes is too large for a fuzz input", f.size());
    bytes_.push_back(static_cast<char>(f.size() & 0xff));
    bytes_.push_back(static_cast<char>(f.size() >> 8));
    bytes_ += f;
  }
  std::string bytes_;
};

}  // namespace geotrain::fuzz
