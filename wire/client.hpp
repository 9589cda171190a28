// Client: a region leader's end of the protocol over a DEALER channel. Sends requests with
// fresh request ids and matches replies by id (replies to requests it gave up on are dropped).
//
// Owns its channel. Blocking: call() waits up to its timeout; send()/receive() split the two
// halves for callers that keep several requests in flight. Not thread-safe (one thread).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "wire/channel.hpp"
#include "wire/messages.hpp"

namespace geotrain::wire {

struct Reply {
  Header header;
  std::vector<Frame> payloads;
};

class Client {
 public:
  explicit Client(std::unique_ptr<Channel> channel) : channel_(std::move(channel)) {}

  // Sends `body` with the payload frames; returns the request id, nullopt when the channel is full.
  std::optional<uint64_t> send(Body body, std::vector<Frame> payloads = {});
  // Sends an already encoded frame list as is (tests use it to send malformed messages).
  bool send_raw(std::vector<Frame> frames);
  // Next reply, or nullopt after `timeout`. A reply whose header cannot be decoded throws
  // WireError.
  std::optional<Reply> receive(std::chrono::milliseconds timeout);
  // send() then wait for the reply with that id.
  std::optional<Reply> call(Body body, std::vector<Frame> payloads = {},
                            std::chrono::milliseconds timeout = std::chrono::seconds(10));

  Channel& channel() { return *channel_; }

 private:
  std::unique_ptr<Channel> channel_;
  uint64_t next_id_ = 1;
};

}  // namespace geotrain::wire
