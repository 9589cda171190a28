// ServerStore: Gloo's rendezvous store (gloo::rendezvous::Store) over the key-value exchange of
// the region's server (wire KvSet / KvGet), so that a region's workers find each other with no
// shared filesystem and no other service: the server they already know is the meeting point.
//
// Owns one wire::Client (a DEALER to the server). Blocking: get() and wait() block until every
// key is set (the server holds the request until then), up to `timeout`, then throw
// SystemError; a stop requested on `stop` (SIGTERM) ends any of them within 0.1 s by throwing
// Stopped (worker/stopped.hpp): a worker told to stop does not wait out the timeout for
// a peer or a server that will not come. Not thread-safe: one thread (Gloo calls the store from the
// thread that builds the context). `options` carry the CURVE client keys when security.curve is on.
// Keys are prefixed with `prefix` (e.g. "gloo/us-east/") to keep regions and runs apart.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "wire/client.hpp"
#include "wire/context.hpp"

namespace geotrain::worker {

class ServerStore final : public gloo::rendezvous::Store {
 public:
  ServerStore(wire::Context& context, const std::string& server_endpoint, std::string prefix,
              std::chrono::milliseconds timeout = std::chrono::seconds(60),
              const wire::ChannelOptions& options = {}, std::stop_token stop = {});

  void set(const std::string& key, const std::vector<char>& data) override;
  // The key's value if someone has set it, nullopt if not: does not wait for it (one round trip;
  // SystemError when the server does not answer within the timeout).
  std::optional<std::vector<char>> try_get(const std::string& key);
  std::chrono::milliseconds timeout() const { return timeout_; }
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  wire::Reply call(wire::Body body, std::chrono::milliseconds timeout, const std::string& key);

  std::unique_ptr<wire::Client> client_;
  std::string endpoint_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
  std::stop_token stop_;
};

}  // namespace geotrain::worker
