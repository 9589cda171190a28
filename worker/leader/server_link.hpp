// ServerLink: a region leader's connection to one server (ServerLinks holds one per region's
// server, worker/leader/server_links.hpp). It owns the wire::Client, when the server was last heard
// from, whether the server has lost this region (then a rejoin comes before any other request),
// the requests left in flight past an exchange (deferred shards' pushes and pulls) with the
// replies that came for them while something else was awaited (parked), and the heartbeat probe
// sent while waiting for those. Which request is whose is the shards' own
// (worker/leader/shard.hpp); the link knows request ids only.
//
// Blocking: collect() and rejoin() wait on the network up to the timeout they are given.
// Not thread-safe (one thread, RegionSync's).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "wire/client.hpp"
#include "wire/context.hpp"
#include "worker/leader/reply_wait.hpp"

namespace geotrain::worker {

// Where a server is, and how to reach it (SyncConfig::servers).
struct ServerAddress {
  std::string region;
  std::string endpoint;
  // security.curve: connect as a CURVE client (this region's keypair, that server's key).
  std::optional<wire::ChannelOptions::CurveClient> curve{};
  // server.standby: where the standby of its shards listens (server/standby.hpp), with the same
  // keys (it serves them as that server); none without standby shards.
  std::optional<std::string> standby{};
};

// A client for `server` over `streams` connections (wire::ChannelOptions::lanes), with socket
// buffers of `socket_buffer_bytes` (0: the OS default).
std::unique_ptr<wire::Client> open_server_client(wire::Context& context,
                                                 const ServerAddress& server, uint32_t streams,
                                                 int socket_buffer_bytes);
// worker.streams_per_server: auto. The round trip to `server` measured over a throwaway
// connection (waiting up to `timeout` for the server to come up), then wire::streams_for_link
// with `link_mbps` and this host's TCP window; logs the choice for region `ours`.
uint32_t choose_streams(wire::Context& context, const ServerAddress& server,
                        const std::string& ours, double link_mbps, int socket_buffer_bytes,
                        std::chrono::milliseconds timeout, const ReplyWait& how);

class ServerLink {
 public:
  using Clock = std::chrono::steady_clock;

  explicit ServerLink(std::string region) : region_(std::move(region)) {}

  // The server's region, as in the config's `regions`.
  const std::string& region() const { return region_; }
  // Whether a connection is attached (connect() attaches one to every link).
  bool open() const { return client_ != nullptr; }
  void attach(std::unique_ptr<wire::Client> client) {
    client_ = std::move(client);
    seen_disconnects_ = client_->channel().breaks();
    last_answer_ = Clock::now();
  }
  // Standby shards: a connection to the standby of the server's shards. Once a hello was
  // answered, a server silent for `takeover_after` while replies are awaited is lost
  // (ServerLost), and every rejoin says hello to both: whichever serves the shards answers (the
  // other refuses with not_serving), and the link talks to it from then on.
  void attach_standby(std::unique_ptr<wire::Client> client,
                      std::chrono::milliseconds takeover_after) {
    other_ = std::move(client);
    takeover_after_ = takeover_after;
  }
  bool has_standby() const { return other_ != nullptr; }
  // Talking to the standby now (it took the shards over).
  bool on_standby() const { return on_standby_; }

  // Sends a request; SystemError naming the server when its send queue is full.
  uint64_t send(wire::Body body, std::vector<wire::Frame> frames = {});
  // Sends a request that may be dropped (a heartbeat, a goodbye): nullopt when the queue is full.
  std::optional<uint64_t> try_send(wire::Body body) { return client_->send(std::move(body)); }
  // Sends a heartbeat if the server has not been contacted within `period`, without waiting
  // for its answer (the next collect() skips it; a server that lost this region says so at the
  // next request). Counts as contact.
  void heartbeat_if_quiet(std::chrono::milliseconds period);

  // The replies to `ids` (reply_wait.hpp's collect() with `how`): replies to the requests left
  // in flight, and to how.parked_ids, are parked meanwhile, and those parked earlier for `ids`
  // are taken first. Any reply counts as contact. Throws what collect() throws (ServerLost,
  // SystemError, InputError, Stopped).
  std::map<uint64_t, wire::Reply> collect(const std::vector<uint64_t>& ids,
                                          std::chrono::milliseconds timeout, const char* what,
                                          ReplyWait how = {});

  // A request that stays in flight past the exchange that sent it (a deferred shard's); its
  // reply is parked until collect_in_flight() asks for it.
  void leave_in_flight(uint64_t id) { in_flight_.insert(id); }
  bool has_in_flight() const { return !in_flight_.empty(); }
  // Replies to the in-flight `ids` that come within `wait` (at most one heartbeat period per
  // call), without throwing for the others. A server silent for a heartbeat period is probed
  // (one probe per period; its answer parked like the rest), so that a server that restarted
  // and lost those requests is found out (ServerLost). Ids answered are no longer in flight.
  std::map<uint64_t, wire::Reply> collect_in_flight(const std::vector<uint64_t>& ids,
                                                    std::chrono::milliseconds wait,
                                                    std::chrono::milliseconds heartbeat,
                                                    ReplyWait how);

  // Which of the in-flight `ids` have been answered by now: collect_in_flight() without waiting,
  // the replies parked again (still in flight) for whoever asks for them next.
  std::set<uint64_t> look_in_flight(const std::vector<uint64_t>& ids,
                                    std::chrono::milliseconds heartbeat, ReplyWait how);

  // The server answered `unregistered` (or lost us otherwise): what was in flight will not be
  // answered. rejoin() before any other request.
  void lose();
  bool lost() const { return lost_; }
  // Hello (`hello`), re-sent after every `heartbeat` without an answer (one sent while the
  // server was down may have died with the old connection), until answered or `timeout`
  // (SystemError); `while_waiting` runs at every send. InputError when the server refuses it.
  // The link is no longer lost afterwards. Returns the server's answer. A stop requested on
  // `stop` while the wait has lasted kStopGrace throws Stopped.
  wire::HelloReply rejoin(const wire::Hello& hello, std::chrono::milliseconds timeout,
                          std::chrono::milliseconds heartbeat,
                          const std::function<void()>& while_waiting, std::stop_token stop = {});
  // The same, but nullopt when `timeout` passes unanswered (the server is still away; the link
  // stays lost, and a later rejoin says hello again).
  std::optional<wire::HelloReply> try_rejoin(const wire::Hello& hello,
                                             std::chrono::milliseconds timeout,
                                             std::chrono::milliseconds heartbeat,
                                             const std::function<void()>& while_waiting,
                                             std::stop_token stop = {});

  // Contact: when the server last answered or was sent a heartbeat.
  void heard_from() { last_contact_ = Clock::now(); }
  bool quiet_for(std::chrono::milliseconds period) const {
    return Clock::now() - last_contact_ >= period;
  }

  // Its hello reply names the "flush" capability (RegionSync::flush()).
  bool offers_flush() const { return flush_; }
  void set_offers_flush(bool on) { flush_ = on; }

 private:
  std::string region_;
  std::unique_ptr<wire::Client> client_;
  Clock::time_point last_contact_{};
  bool lost_ = false;
  std::vector<uint64_t> hellos_sent_;  // since the link was lost, unanswered (try_rejoin)
  // Standby shards: the connection not in use (the standby's, or the primary's once the standby
  // serves), its unanswered hellos, and when the one in use last answered anything.
  std::unique_ptr<wire::Client> other_;
  std::vector<uint64_t> other_hellos_;
  std::chrono::milliseconds takeover_after_{};
  bool on_standby_ = false;
  bool joined_ = false;  // a hello answered: from then on a silent server is lost (takeover_after)
  Clock::time_point last_answer_{};
  uint64_t seen_disconnects_ = 0;  // the channel's breaks() when last in step (attach, rejoin)
  bool flush_ = false;
  std::set<uint64_t> in_flight_;
  std::map<uint64_t, wire::Reply> parked_;
  // The probe collect_in_flight() sent, and when: one unanswered for a heartbeat period (it may
  // have died with a broken connection) is replaced.
  std::optional<uint64_t> probe_;
  Clock::time_point probe_sent_{};
};

}  // namespace geotrain::worker
