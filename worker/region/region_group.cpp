#include "worker/region/region_group.hpp"

#include <fmt/ranges.h>
#include <gloo/rendezvous/prefix_store.h>

#include <algorithm>
#include <charconv>
#include <random>
#include <set>
#include <thread>

#include "core/error.hpp"
#include "worker/region/server_store.hpp"

namespace geotrain::worker {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kGroupPoll{10};  // between the leader's looks at the store

std::vector<char> store_value(const std::string& s) { return {s.begin(), s.end()}; }
std::string store_text(const std::vector<char>& v) { return {v.begin(), v.end()}; }

std::string members_text(const std::vector<uint32_t>& members) {
  return fmt::format("{}", fmt::join(members, ","));
}

// A number the store holds ("what" names it): InputError when it is not one.
uint64_t number(const std::string& s, const char* what) {
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  GT_REQUIRE(ec == std::errc() && end == s.data() + s.size() && !s.empty(),
             "region group: {} '{}' is not a number", what, s);
  return value;
}

std::vector<uint32_t> parse_members(const std::string& s, uint32_t slots) {
  std::vector<uint32_t> out;
  size_t at = 0;
  while (at < s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    const uint64_t slot = number(s.substr(at, comma - at), "member slot");
    GT_REQUIRE(slot < slots, "region group: member slot {} in '{}' is not below {}", slot, s,
               slots);
    out.push_back(static_cast<uint32_t>(slot));
    at = comma + 1;
  }
  GT_REQUIRE(!out.empty() && out.front() == 0, "region group: members '{}' lack the leader", s);
  return out;
}

std::string epoch_key(uint64_t epoch, const std::string& rest) {
  return fmt::format("e{}/{}", epoch, rest);
}

std::string fresh_nonce() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}

}  // namespace

RegionGroup::RegionGroup(ServerStore& store, uint32_t slot, uint32_t slots, Connect connect,
                         uint64_t epoch, std::vector<uint32_t> members)
    : store_(&store),
      slot_(slot),
      slots_(slots),
      connect_(std::move(connect)),
      epoch_(epoch),
      members_(std::move(members)) {}

RegionGroup::RegionGroup(ServerStore& store, uint32_t slot, uint32_t slots, Connect connect)
    : RegionGroup(store, slot, slots, std::move(connect), 0, {}) {
  GT_REQUIRE(slot < slots, "region group: slot {} is not below {}", slot, slots);
  for (uint32_t s = 0; s < slots; ++s) members_.push_back(s);
  connect_at(0);
}

RegionGroup::RegionGroup(RegionGroup&&) noexcept = default;
RegionGroup& RegionGroup::operator=(RegionGroup&&) noexcept = default;
RegionGroup::~RegionGroup() = default;

std::optional<RegionGroup> RegionGroup::join(ServerStore& store, uint32_t slot, uint32_t slots,
                                             Connect connect, std::chrono::milliseconds admission) {
  GT_REQUIRE(slot > 0 && slot < slots, "region group: slot {} cannot join (1 .. {})", slot,
             slots - 1);
  const std::string nonce = fresh_nonce();
  const auto deadline = Clock::now() + admission;
  const std::string admit = fmt::format("admit/{}/{}", slot, nonce);
  auto asked = Clock::time_point{};
  while (true) {
    // Asked again every second: a server restarted meanwhile has lost its keys.
    if (Clock::now() - asked > std::chrono::seconds(1)) {
      store.set(fmt::format("join/{}", slot), store_value(nonce));
      asked = Clock::now();
    }
    if (auto epoch = store.try_get(admit)) {
      const uint64_t e = number(store_text(*epoch), "admitted epoch");
      auto members = parse_members(store_text(store.get(epoch_key(e, "members"))), slots);
      RegionGroup group(store, slot, slots, std::move(connect), e, std::move(members));
      group.connect_at(e);
      return group;
    }
    if (store.try_get("closed")) return std::nullopt;
    if (Clock::now() > deadline)
      throw SystemError("rendezvous", admit, __FILE__, __LINE__,
                        fmt::format("the region's leader did not admit slot {} within {} ms", slot,
                                    admission.count()));
    std::this_thread::sleep_for(5 * kGroupPoll);
  }
}

void RegionGroup::connect_at(uint64_t epoch) {
  const auto at = std::find(members_.begin(), members_.end(), slot_);
  GT_ASSERT(at != members_.end(), "slot {} connects to a group it is not in", slot_);
  gloo::rendezvous::PrefixStore prefixed(epoch_key(epoch, "gloo"), *store_);
  comm_ = connect_(prefixed, static_cast<int>(at - members_.begin()),
                   static_cast<int>(members_.size()));
}

std::map<uint32_t, std::string> RegionGroup::joiners() {
  std::map<uint32_t, std::string> out;
  for (uint32_t s = 1; s < slots_; ++s) {
    if (std::find(members_.begin(), members_.end(), s) != members_.end()) continue;
    auto nonce = store_->try_get(fmt::format("join/{}", s));
    if (!nonce) continue;
    const auto it = admitted_.find(s);
    if (it != admitted_.end() && it->second == store_text(*nonce)) continue;
    // Admitted by an earlier leader of this region (the admission is in the store): not again.
    if (store_->try_get(fmt::format("admit/{}/{}", s, store_text(*nonce)))) {
      admitted_[s] = store_text(*nonce);
      continue;
    }
    out[s] = store_text(*nonce);
  }
  return out;
}

void RegionGroup::announce(uint64_t epoch) {
  store_->set(epoch_key(epoch, fmt::format("alive/{}", slot_)), store_value("1"));
  store_->set(fmt::format("waiting/{}", slot_), store_value(std::to_string(epoch)));
}

std::string RegionGroup::await_members(uint64_t epoch) {
  const auto deadline = Clock::now() + store_->timeout();
  auto announced = Clock::now();
  while (true) {
    if (auto members = store_->try_get(epoch_key(epoch, "members"))) return store_text(*members);
    if (Clock::now() > deadline)
      throw SystemError("rendezvous", epoch_key(epoch, "members"), __FILE__, __LINE__,
                        fmt::format("the region's leader named no members of epoch {} within {} "
                                    "ms",
                                    epoch, store_->timeout().count()));
    // Again every second: a server restarted meanwhile (from its checkpoint) has lost its keys.
    if (Clock::now() - announced > std::chrono::seconds(1)) {
      announce(epoch);
      announced = Clock::now();
    }
    std::this_thread::sleep_for(kGroupPoll);
  }
}

std::optional<RegionGroup> RegionGroup::lead_again(ServerStore& store, uint32_t slots,
                                                   Connect connect,
                                                   std::chrono::milliseconds settle) {
  const auto t0 = Clock::now();
  // The epoch the members wait at: the newest any says it waits at (waiting/<slot>, set again every
  // second, so a server restarted meanwhile has it again), else one past the last the dead leader
  // formed (`epoch`).
  const auto waited_at = [&] {
    uint64_t newest = 0;
    for (uint32_t s = 1; s < slots; ++s)
      if (auto e = store.try_get(fmt::format("waiting/{}", s)))
        newest = std::max(newest, number(store_text(*e), "waiting epoch"));
    return newest;
  };
  const auto last = store.try_get("epoch");
  uint64_t next = std::max(waited_at(), (last ? number(store_text(*last), "epoch") : 0) + 1);
  const auto announced = [&](uint64_t epoch) {
    std::vector<uint32_t> alive;
    for (uint32_t s = 1; s < slots; ++s)
      if (store.try_get(epoch_key(epoch, fmt::format("alive/{}", s)))) alive.push_back(s);
    return alive;
  };
  std::vector<uint32_t> alive = announced(next);
  // Members still noticing the death announce themselves within the settle time; once every
  // other slot has, nobody is left to wait for.
  const auto everyone = [&] { return alive.size() + 1 == slots; };
  while ((!everyone() && Clock::now() - t0 < settle) ||
         (alive.empty() && Clock::now() - t0 < 4 * settle)) {
    std::this_thread::sleep_for(kGroupPoll);
    next = std::max(next, waited_at());
    while (!announced(next + 1).empty()) ++next;
    alive = announced(next);
  }
  if (alive.empty()) return std::nullopt;  // nobody to take the region's state from
  RegionGroup group(store, 0, slots, std::move(connect), next, {0});
  group.members_.insert(group.members_.end(), alive.begin(), alive.end());
  store.set(epoch_key(next, "fresh_leader"), store_value("1"));
  store.set(epoch_key(next, "members"), store_value(members_text(group.members_)));
  store.set("epoch", store_value(std::to_string(next)));
  group.connect_at(next);
  return group;
}

bool RegionGroup::joiners_waiting() {
  GT_ASSERT(leader(), "only the leader admits joiners");
  return members_.size() < slots_ && !joiners().empty();
}

RegionGroup::Change RegionGroup::regroup(std::chrono::milliseconds window) {
  const auto t0 = Clock::now();
  comm_.reset();  // closes this member's sockets: members still waiting on it fail now
  const uint64_t next = epoch_ + 1;
  announce(next);
  Change change;
  change.epoch = next;
  if (leader()) {
    // The members it knew, as they announce themselves; joiners asking now.
    std::set<uint32_t> waiting(members_.begin() + 1, members_.end());
    std::set<uint32_t> alive{0};
    const auto deadline = t0 + window;
    while (!waiting.empty()) {
      for (auto it = waiting.begin(); it != waiting.end();)
        if (store_->try_get(epoch_key(next, fmt::format("alive/{}", *it)))) {
          alive.insert(*it);
          it = waiting.erase(it);
        } else {
          ++it;
        }
      if (waiting.empty() || Clock::now() > deadline) break;
      std::this_thread::sleep_for(kGroupPoll);
    }
    change.lost.assign(waiting.begin(), waiting.end());
    for (const auto& [slot, nonce] : joiners()) {
      alive.insert(slot);
      change.joined.push_back(slot);
      admitted_[slot] = nonce;
    }
    members_.assign(alive.begin(), alive.end());
    store_->set(epoch_key(next, "members"), store_value(members_text(members_)));
    store_->set("epoch", store_value(std::to_string(next)));  // for a leader started again
    for (const auto slot : change.joined)
      store_->set(fmt::format("admit/{}/{}", slot, admitted_[slot]),
                  store_value(std::to_string(next)));
  } else {
    auto members = parse_members(await_members(next), slots_);
    if (std::find(members.begin(), members.end(), slot_) == members.end())
      throw SystemError("rendezvous", epoch_key(next, "members"), __FILE__, __LINE__,
                        fmt::format("slot {} was left out of the region's group at epoch {} "
                                    "(it announced itself after the leader's window); it "
                                    "rejoins when restarted",
                                    slot_, next));
    for (const auto m : members_)
      if (std::find(members.begin(), members.end(), m) == members.end()) change.lost.push_back(m);
    for (const auto m : members)
      if (std::find(members_.begin(), members_.end(), m) == members_.end())
        change.joined.push_back(m);
    members_ = std::move(members);
    change.fresh_leader = store_->try_get(epoch_key(next, "fresh_leader")).has_value();
  }
  epoch_ = next;
  change.members = members_;
  connect_at(next);
  change.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return change;
}

void RegionGroup::close() {
  GT_ASSERT(leader(), "only the leader closes the group");
  store_->set("closed", store_value("1"));
}

}  // namespace geotrain::worker
