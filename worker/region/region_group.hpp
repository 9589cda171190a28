// RegionGroup: a region's CPU workers as an elastic group, which outlives a dead member and takes
// a restarted one back (docs/run.md, "When a worker dies").
//
// Every worker has a fixed slot: its rank in the region as launched, 0 .. slots-1. The group is
// one Communicator over the members alive at an epoch; a member's rank in it is its slot's place
// among the members. Slot 0 is the region's leader: a group never forms without it (when it
// dies, the others wait for it in regroup() until it is started again: lead_again()).
//
// When a collective fails (GroupBroken: a member died and its sockets closed, or a timeout), every
// member calls regroup(): the communicator is dropped at once (so that a member still waiting on
// this one fails as well), each announces itself under the next epoch, and the leader waits up to
// `window` for the members it knew, then names the new members; all connect again. A member left
// out (it announced itself too late) gets a SystemError and leaves; it comes back as a joiner. A
// restarted worker joins through join(): it asks under its slot and waits until the leader admits
// it, which the leader does at its next regroup; joiners_waiting() (the leader, at a round
// boundary, non-blocking) says when to call one. close() (the leader, when training ends) tells
// waiting joiners that no admission will come.
//
// A leader that dies is started again alone (lead_again()): the members waiting in regroup() give
// it their state, and it leads again.
//
// Keys under the store's prefix: e<k>/alive/<slot>, e<k>/members ("0,2"), e<k>/gloo/...,
// e<k>/fresh_leader, epoch (the newest the leader formed), waiting/<slot> (the epoch a member
// waits at, set again every second while it waits), join/<slot> (the joiner's nonce),
// admit/<slot>/<nonce> (the epoch it joins), closed. About 2 x members + 2 keys a regroup: the
// server's store (4096 keys) holds hundreds of regroups.
//
// Blocking: the constructors and regroup() (the store's waits end on its stop: Stopped). Not
// thread-safe: the trainer's thread.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "worker/region/communicator.hpp"

namespace gloo::rendezvous {
class Store;
}  // namespace gloo::rendezvous

namespace geotrain::worker {

class ServerStore;

class RegionGroup {
 public:
  // Builds the member's communicator over `store` (a PrefixStore for the epoch) at `rank` of
  // `size` (ModelBackend::connect_region).
  using Connect =
      std::function<std::unique_ptr<Communicator>(gloo::rendezvous::Store&, int rank, int size)>;

  // What a regroup changed.
  struct Change {
    uint64_t epoch = 0;
    std::vector<uint32_t> members, lost, joined;
    double seconds = 0;  // from the call to the new communicator
    // The leader was started again (lead_again()): it has no state of its own; the members give
    // it theirs (worker/run/region_resync.hpp).
    bool fresh_leader = false;
  };

  // The group as launched: epoch 0, every slot. Borrows `store`, which outlives the group.
  RegionGroup(ServerStore& store, uint32_t slot, uint32_t slots, Connect connect);
  // A restarted worker: asks to join and waits until the leader admits it (nullopt: the leader
  // closed the group, training is over) or `admission` has passed (SystemError).
  static std::optional<RegionGroup> join(ServerStore& store, uint32_t slot, uint32_t slots,
                                         Connect connect, std::chrono::milliseconds admission);
  // A leader started again after its death (slot 0): the members that outlived it wait in
  // regroup() at the next epoch; it names them once every other slot is there, or after `settle`
  // (for the last of them to notice the death), marks the epoch's leader fresh, and connects.
  // nullopt when no member is left.
  static std::optional<RegionGroup> lead_again(ServerStore& store, uint32_t slots, Connect connect,
                                               std::chrono::milliseconds settle);

  RegionGroup(RegionGroup&&) noexcept;
  RegionGroup& operator=(RegionGroup&&) noexcept;
  ~RegionGroup();

  Communicator& comm() { return *comm_; }
  bool connected() const { return comm_ != nullptr; }
  bool leader() const { return slot_ == 0; }
  uint32_t slot() const { return slot_; }
  uint32_t size() const { return static_cast<uint32_t>(members_.size()); }
  uint64_t epoch() const { return epoch_; }
  const std::vector<uint32_t>& members() const { return members_; }

  // Drops the communicator (its sockets close, so members waiting on this one fail at once).
  void disconnect() { comm_.reset(); }
  // The leader: whether a restarted worker asks to join (one non-blocking look per missing slot).
  bool joiners_waiting();
  // Collective over the survivors (see above); `window`: how long the leader waits for the
  // members it knew. GroupBroken when connecting fails (a member died meanwhile: call it again),
  // SystemError when this member was left out or the leader named no members within the store's
  // timeout.
  Change regroup(std::chrono::milliseconds window);
  // The leader: no more admissions (joiners waiting or to come leave).
  void close();

 private:
  RegionGroup(ServerStore& store, uint32_t slot, uint32_t slots, Connect connect, uint64_t epoch,
              std::vector<uint32_t> members);
  void connect_at(uint64_t epoch);
  // This member is alive and waits at `epoch`: e<epoch>/alive/<slot>, waiting/<slot>.
  void announce(uint64_t epoch);
  // A member's wait for the leader's list of `epoch`'s members (up to the store's timeout),
  // announcing itself again every second: a server restarted meanwhile has lost its keys.
  std::string await_members(uint64_t epoch);
  // The leader: joiners asking now, slot -> nonce, not admitted before.
  std::map<uint32_t, std::string> joiners();

  ServerStore* store_;
  uint32_t slot_, slots_;
  Connect connect_;
  uint64_t epoch_ = 0;
  std::vector<uint32_t> members_;
  std::map<uint32_t, std::string> admitted_;  // the leader: slot -> the nonce it admitted last
  std::unique_ptr<Communicator> comm_;
};

}  // namespace geotrain::worker
