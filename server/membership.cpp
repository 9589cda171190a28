#include "server/membership.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"

namespace geotrain::server {

Membership::Membership(std::vector<std::string> regions, std::chrono::milliseconds dead_after,
                       bool wait_for_all, TimePoint start, std::chrono::milliseconds join_within)
    : names_(std::move(regions)),
      dead_after_(dead_after),
      join_within_(std::max(dead_after, join_within)),
      regions_(names_.size()) {
  for (auto& st : regions_) {
    st.counted = wait_for_all;
    st.last_seen = start;
  }
}

Membership::Joined Membership::join(const std::string& peer, uint32_t r, TimePoint now) {
  if (auto it = peers_.find(peer); it != peers_.end() && it->second != r)
    GT_REQUIRE(false, "this connection is already registered as region '{}'",
               names_.at(it->second));
  auto& st = regions_.at(r);
  Joined out;
  out.rejoined = st.ever_joined;
  if (st.peer && *st.peer != peer) {
    peers_.erase(*st.peer);
    out.old_peer = st.peer;
  }
  st.peer = peer;
  st.counted = true;
  st.ever_joined = true;
  st.last_seen = now;
  peers_[peer] = r;
  return out;
}

std::optional<uint32_t> Membership::region_of(const std::string& peer) const {
  auto it = peers_.find(peer);
  if (it == peers_.end()) return std::nullopt;
  return it->second;
}

void Membership::excuse(std::chrono::milliseconds stalled, TimePoint now) {
  for (auto& st : regions_) st.last_seen = std::min(st.last_seen + stalled, now);
}

std::vector<Membership::Death> Membership::expire(TimePoint now) {
  std::vector<Death> out;
  for (uint32_t r = 0; r < regions_.size(); ++r) {
    auto& st = regions_[r];
    if (!st.counted || now - st.last_seen <= (st.ever_joined ? dead_after_ : join_within_))
      continue;
    out.push_back(drop(r, st.ever_joined
                              ? fmt::format("silent for more than {} ms", dead_after_.count())
                              : fmt::format("never registered within {} ms of the server's start",
                                            join_within_.count())));
  }
  return out;
}

Membership::Death Membership::leave(uint32_t r) { return drop(r, "said goodbye"); }

Membership::Death Membership::drop(uint32_t r, std::string why) {
  auto& st = regions_.at(r);
  Death d{r, st.peer, std::move(why)};
  if (st.peer) peers_.erase(*st.peer);
  st.peer.reset();
  st.counted = false;
  return d;
}

std::vector<bool> Membership::live() const {
  std::vector<bool> out(regions_.size());
  for (size_t r = 0; r < regions_.size(); ++r) out[r] = regions_[r].counted;
  return out;
}

}  // namespace geotrain::server
