#include "worker/region/server_store.hpp"

#include <cstring>

#include "core/error.hpp"
#include "worker/stopped.hpp"

namespace geotrain::worker {

ServerStore::ServerStore(wire::Context& context, const std::string& server_endpoint,
                         std::string prefix, std::chrono::milliseconds timeout,
                         const wire::ChannelOptions& options, std::stop_token stop)
    : client_(
          std::make_unique<wire::Client>(wire::connect_dealer(context, server_endpoint, options))),
      endpoint_(server_endpoint),
      prefix_(std::move(prefix)),
      timeout_(timeout),
      stop_(std::move(stop)) {}

// The request's reply, waited for in slices of 100 ms so that a stop ends the wait.
wire::Reply ServerStore::call(wire::Body body, std::chrono::milliseconds timeout,
                              const std::string& key) {
  using Clock = std::chrono::steady_clock;
  constexpr std::chrono::milliseconds kSlice{100};
  const auto id = client_->send(std::move(body));
  const auto started = Clock::now();
  std::optional<wire::Reply> reply;
  while (id && !reply) {
    if (stop_.stop_requested())
      throw Stopped(fmt::format("stopped while waiting for '{}' at the region's server at {}", key,
                                endpoint_));
    const auto left =
        timeout - std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
    if (left.count() <= 0) break;
    auto r = client_->receive(std::min(left, kSlice));
    if (r && r->header.request_id == *id) reply = std::move(r);  // else an old one, or none yet
  }
  if (!reply)
    throw SystemError(
        "rendezvous", key, __FILE__, __LINE__,
        fmt::format("no answer from the server at {} within {} ms", endpoint_, timeout.count()));
  if (auto* e = std::get_if<wire::Error>(&reply->header.body))
    throw SystemError("rendezvous", key, __FILE__, __LINE__,
                      fmt::format("server at {} refused: {}", endpoint_, e->message));
  return std::move(*reply);
}

void ServerStore::set(const std::string& key, const std::vector<char>& data) {
  Bytes value(data.size());
  std::memcpy(value.data(), data.data(), data.size());
  call(wire::KvSet{prefix_ + key, std::move(value)}, timeout_, key);
}

std::vector<char> ServerStore::get(const std::string& key) {
  auto reply = call(wire::KvGet{prefix_ + key}, timeout_, key);
  const auto* kv = std::get_if<wire::KvReply>(&reply.header.body);
  GT_REQUIRE(kv != nullptr, "rendezvous: the server answered kvGet '{}' with {}", key,
             wire::body_name(reply.header.body));
  std::vector<char> out(kv->value.size());
  std::memcpy(out.data(), kv->value.data(), out.size());
  return out;
}

std::optional<std::vector<char>> ServerStore::try_get(const std::string& key) {
  auto reply = call(wire::KvTryGet{prefix_ + key}, timeout_, key);
  if (std::holds_alternative<wire::Ack>(reply.header.body)) return std::nullopt;  // not set
  const auto* kv = std::get_if<wire::KvReply>(&reply.header.body);
  GT_REQUIRE(kv != nullptr, "rendezvous: the server answered kvTryGet '{}' with {}", key,
             wire::body_name(reply.header.body));
  return std::vector<char>(reinterpret_cast<const char*>(kv->value.data()),
                           reinterpret_cast<const char*>(kv->value.data()) + kv->value.size());
}

void ServerStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void ServerStore::wait(const std::vector<std::string>& keys,
                       const std::chrono::milliseconds& timeout) {
  for (const auto& key : keys) call(wire::KvGet{prefix_ + key}, timeout, key);  // returns once set
}

}  // namespace geotrain::worker
