// A region's server on inproc:// for worker tests that need its key-value exchange (the Gloo
// rendezvous, the elastic group's keys): one region `a`, a 64-element model, polled every 5 ms on
// a thread of its own. store() opens a ServerStore on it under "gloo/a/".
#pragma once

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "server/param_server.hpp"
#include "worker/region/server_store.hpp"

namespace geotrain::test {

using namespace std::chrono_literals;

struct RegionServer {
  std::filesystem::path dir;
  wire::Context context;
  std::unique_ptr<server::ParamServer> srv;
  std::jthread loop;

  explicit RegionServer(const std::string& name)
      : dir(std::filesystem::temp_directory_path() /
            fmt::format("geotrain-{}-{}", name, ::getpid())) {
    auto config = server::parse_server_config(fmt::format(R"(
regions: [a]
model: {{tensors: [{{name: w, size: 64}}]}}
server: {{run_dir: "{}"}}
)",
                                                          dir.string()));
    server::ServerOptions options;
    options.endpoint = "inproc://" + name;
    options.write_metrics = false;
    options.poll = 5ms;
    srv = std::make_unique<server::ParamServer>(config, 0, context, options);
    loop = std::jthread([this](std::stop_token st) { srv->run(st); });
  }
  ~RegionServer() {
    loop.request_stop();
    loop.join();
    std::filesystem::remove_all(dir);
  }
  std::unique_ptr<worker::ServerStore> store() {
    return std::make_unique<worker::ServerStore>(context, srv->endpoint(), "gloo/a/", 20s);
  }
};

}  // namespace geotrain::test
