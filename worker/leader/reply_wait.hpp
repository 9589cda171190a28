#pragma once
// How a region leader waits for a server's replies (internal to worker/leader/: ServerLink and
// LeaderShards). collect() blocks until every id has its reply or the timeout passes;
// on the way it probes a silent server with heartbeats, parks the replies of deferred shards, and
// turns an `unregistered` answer, or a `badRound` refusal of an awaited request (the server counts
// this region's rounds otherwise: a rejoin maps them again), into ServerLost; any other refusal
// is an InputError. Not thread-safe: one caller per wire::Client.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "wire/client.hpp"
#include "worker/stopped.hpp"

namespace geotrain::worker {

// The server no longer knows this region: it restarted (from a checkpoint), a new connection
// replaced ours (netsim restarted), or it declared the region dead; or one of our connections to
// it broke, or a message from it was lost, while replies were awaited
// (ReplyWait::disconnects_seen), so they may never come.
// Thrown by collect(); the caller rejoins that server and retries the round's shards there.
class ServerLost : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How long a wait may still go on with a stop requested: a healthy server's reply on a LAN comes
// well within it (so a stop at a round's end keeps that round's exchange and snapshot), while a
// worker whose server died stops within a second of SIGTERM.
inline constexpr std::chrono::milliseconds kStopGrace{500};

// What collect() does besides waiting for its ids.
struct ReplyWait {
  // With `probe` > 0, a heartbeat goes out after every `probe` of silence: a server that
  // restarted (and lost requests that were in flight) answers it with `unregistered`, which,
  // like any `unregistered` reply, throws ServerLost; a slow but healthy server answers it, and
  // the wait goes on, unless two answers in a row say the server answered an awaited request
  // whose reply has not come (none of it: Channel::receiving()): it was lost on the way, and
  // that throws ServerLost too. `on_probe` runs at every probe: RegionSync keeps its other servers
  // alive with it while this one keeps it waiting (heartbeat_others()).
  std::chrono::milliseconds probe{};
  std::function<void()> on_probe;
  // Deferred shards' requests on this connection: their replies go to `parked` (an
  // `unregistered` one throws ServerLost), not away with the replies given up on.
  std::vector<uint64_t> parked_ids;
  std::map<uint64_t, wire::Reply>* parked = nullptr;
  // Return the replies that came within the timeout instead of throwing SystemError.
  bool partial = false;
  // A stop requested while the wait has lasted kStopGrace throws Stopped (checked every 100 ms).
  std::stop_token stop;
  // The connection's count of broken connections and lost messages (wire::Channel::breaks())
  // when the requests awaited were sent on live ones: a higher count throws ServerLost, for what
  // was in them may be gone (a reset, a restarted netsim, a reply the server could not stripe
  // over a lane not yet reconnected to it) while the server still counts this region.
  std::optional<uint64_t> disconnects_seen;
  // With `probe` > 0: every answered probe moves the deadline to `timeout` from then, so the wait
  // lasts as long as the server is alive and holds the requests, and `timeout` bounds only its
  // silence (the final pull, which waits for the slowest region's flush).
  bool while_answered = false;
  // Standby shards (server.standby): a server that has answered nothing for `silent_lost` is lost
  // (ServerLost), so that the caller says hello to its standby too. `last_answer` (the link's,
  // kept across waits) is when it last answered anything, moved on by every reply.
  std::chrono::milliseconds silent_lost{};
  std::chrono::steady_clock::time_point* last_answer = nullptr;
};

// Replies of one server, by request id; throws SystemError when they do not all come within
// `timeout` (unless waiting.partial), InputError when the server refuses one (naming `what`),
// Stopped when waiting.stop is requested and the wait has lasted kStopGrace.
// Replies parked earlier for `ids` are taken first.
std::map<uint64_t, wire::Reply> collect(wire::Client& client, const std::string& region,
                                        const std::vector<uint64_t>& ids,
                                        std::chrono::milliseconds timeout, const char* what,
                                        const ReplyWait& waiting = {});

// A reply's body as the type asked for, or InputError naming what came instead.
template <typename T>
const T& body_as(const wire::Reply& r, const std::string& region) {
  const T* b = std::get_if<T>(&r.header.body);
  GT_REQUIRE(b != nullptr, "server of region {} answered with an unexpected {}", region,
             wire::body_name(r.header.body));
  return *b;
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace geotrain::worker
