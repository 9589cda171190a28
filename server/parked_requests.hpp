// ParkedRequests: the requests a server holds until what they wait for has happened: a push
// beyond the staleness gate, a pull of a round not released yet, a key-value get of a key not set
// yet. Bounded, so that no peer can grow it without end: at most `per_peer` requests of one
// peer (the protocol's wire::max_waiting_per_peer of the server's shards), and at most
// kMaxParkedUnregistered of all peers that are no registered region together (the key-value
// exchange is open to every peer; a region's own requests are never refused for theirs). Requests
// are retried in the order they came.
//
// Holds envelopes only: the server decides what a request is and whether it is done. Single-
// threaded: the server loop's thread only.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "wire/channel.hpp"
#include "wire/messages.hpp"

namespace geotrain::server {

// Parked requests of all peers that are not a registered region together (key-value gets).
inline constexpr size_t kMaxParkedUnregistered = 1024;

class ParkedRequests {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  explicit ParkedRequests(size_t per_peer = wire::kMaxWaitingPerPeer) : per_peer_(per_peer) {}
  struct Request {
    wire::Envelope envelope;
    TimePoint since;  // when it was first parked (the server's clock)
  };

  // Parks `env`, or says why not (the `busy` refusal's message) when its peer is at a bound.
  // `registered(peer)`: whether a peer is a registered region's.
  std::optional<std::string> park(wire::Envelope env, TimePoint now,
                                  const std::function<bool(const std::string&)>& registered);
  // Takes out every request of `peer` (it left, died or joined again from another connection).
  std::vector<Request> take_peer(const std::string& peer);
  // Offers the requests to `finished`, oldest first, until none finishes: one that finishes
  // (`finished` returns true: answered, or refused) leaves the list, and the pass starts again
  // from the oldest, since what it changed may release the ones before it.
  void retry(const std::function<bool(Request&)>& finished);

  size_t size() const { return requests_.size(); }

 private:
  size_t per_peer_;
  std::vector<Request> requests_;
};

}  // namespace geotrain::server
