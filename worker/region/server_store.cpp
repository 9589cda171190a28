#include "worker/region/server_store.hpp"

#include <cstring>

#include "core/error.hpp"

namespace geotrain::worker {

ServerStore::ServerStore(zmq::context_t& context, const std::string& server_endpoint,
                         std::string prefix, std::chrono::milliseconds timeout,
                         const wire::ChannelOptions& options)
    : client_(
          std::make_unique<wire::Client>(wire::connect_dealer(context, server_endpoint, options))),
      endpoint_(server_endpoint),
      prefix_(std::move(prefix)),
      timeout_(timeout) {}

wire::Reply ServerStore::call(wire::Body body, std::chrono::milliseconds timeout,
                              const std::string& key) {
  auto reply = client_->call(std::move(body), {}, timeout);
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

void ServerStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void ServerStore::wait(const std::vector<std::string>& keys,
                       const std::chrono::milliseconds& timeout) {
  for (const auto& key : keys) call(wire::KvGet{prefix_ + key}, timeout, key);  // returns once set
}

}  // namespace geotrain::worker
