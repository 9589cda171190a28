// Membership: which regions a server counts, which connection speaks for each, and when a
// silent region is declared dead.
//
// A region is *counted* (it holds back synchronous rounds and the staleness gate) while it is
// registered and not silent for more than dead_after. With wait_for_all set, every configured
// region is counted from the start, registered or not, so the first region to arrive cannot run
// ahead of the others; a region that never registers is declared dead after join_within (or
// dead_after, if longer) counted from the server's start: a worker's start-up may take longer
// than the silence that marks a running region dead. Without it, a region counts only from its
// first hello. A dead region counts again once it says hello.
//
// Owns the routing id (peer) of each registered region. Plain value type: nothing blocks, not
// thread-safe (the server loop owns it). Times come from the caller (the server's clock).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace geotrain::server {

using TimePoint = std::chrono::steady_clock::time_point;

class Membership {
 public:
  Membership(std::vector<std::string> regions, std::chrono::milliseconds dead_after,
             bool wait_for_all, TimePoint start,
             std::chrono::milliseconds join_within = std::chrono::milliseconds(0));

  struct Joined {
    bool rejoined = false;                // the region had registered before
    std::optional<std::string> old_peer;  // the connection it replaced, now forgotten
  };
  // Registers `peer` as region r at `now`. InputError when this peer already speaks for another
  // region (nothing changes then).
  Joined join(const std::string& peer, uint32_t r, TimePoint now);
  // The region a registered peer speaks for.
  std::optional<uint32_t> region_of(const std::string& peer) const;
  const std::optional<std::string>& peer(uint32_t r) const { return regions_.at(r).peer; }
  void seen(uint32_t r, TimePoint now) { regions_.at(r).last_seen = now; }
  // When region r's last message came (its hello, for a region never heard from since; the
  // server's start for one never registered), moved on by excuse().
  TimePoint last_seen(uint32_t r) const { return regions_.at(r).last_seen; }

  struct Death {
    uint32_t region = 0;
    std::optional<std::string> peer;  // its connection, forgotten now (none if it never registered)
    std::string why;
  };
  // The server itself did not run for `stalled` (SIGSTOP, starvation) before `now`: that time
  // is not the regions' silence. Moves every region's last_seen on by it, never past `now`.
  void excuse(std::chrono::milliseconds stalled, TimePoint now);
  // The server restored a checkpoint: the regions were running before it restarted, so a
  // region's first hello is due within dead_after like any silence, not join_within (a region
  // that ended meanwhile would otherwise hold the others' final pulls for join_within).
  void regions_were_running() { join_within_ = dead_after_; }
  // Declares dead every counted region silent for more than dead_after at `now` (one that never
  // registered: join_within, if longer).
  std::vector<Death> expire(TimePoint now);
  // Region r said goodbye: it is no longer counted and its peer is forgotten, as for a death (a
  // later hello counts it again).
  Death leave(uint32_t r);

  // Per region: counted (holds rounds and the gate).
  std::vector<bool> live() const;
  bool registered(uint32_t r) const { return regions_.at(r).peer.has_value(); }
  size_t size() const { return regions_.size(); }

 private:
  // Region r is no longer counted and its peer is forgotten (a death, or a goodbye).
  Death drop(uint32_t r, std::string why);

  struct RegionState {
    std::optional<std::string> peer;
    bool counted = false;
    bool ever_joined = false;
    TimePoint last_seen;
  };
  std::vector<std::string> names_;
  std::chrono::milliseconds dead_after_;
  std::chrono::milliseconds join_within_;  // at least dead_after_
  std::vector<RegionState> regions_;
  std::map<std::string, uint32_t> peers_;  // routing id -> region
};

}  // namespace geotrain::server
