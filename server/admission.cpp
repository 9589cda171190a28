#include "server/admission.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/error.hpp"

namespace geotrain::server {

Admission admit_clients(const ServerConfig& config, uint32_t region, wire::Context& context,
                        wire::ZapAuthenticator* given, wire::ChannelOptions& channel) {
  wire::ZapPolicy policy;
  policy.curve = config.security.curve_on();
  policy.max_connections_per_address = config.max_connections_per_address;
  if (policy.curve) {
    const auto keys = config.security.keys();
    for (const auto& r : config.regions)
      policy.allowed[keys.client_public(r)] = fmt::format("the client key of region {}", r);
    channel.curve_server =
        wire::ChannelOptions::CurveServer{keys.server_keypair(config.regions[region]).secret_key};
  }
  Admission a;
  a.curve = policy.curve;
  a.authenticator = given;
  if (!a.authenticator && (policy.curve || policy.max_connections_per_address > 0)) {
    try {
      a.own = std::make_unique<wire::ZapAuthenticator>(context, policy);
    } catch (const SystemError& e) {
      // The context's ZAP address is taken: another server of this process answers ZAP. With
      // CURVE that is an error (which keys would it admit?); the cap alone is only not enforced
      // here. `geotrain run` and `geotrain serve` run one server per process.
      if (policy.curve) throw;
      spdlog::warn(
          "server {}: server.max_connections_per_address is not enforced: {} (another "
          "server in this process answers ZAP)",
          config.regions[region], e.what());
    }
    if (a.own) {
      a.authenticator = a.own.get();
      // One monitor per authenticator: a shared one (several servers in a context) logs ZAP
      // refusals only, and counts no connections for the cap.
      channel.monitor_endpoint = a.authenticator->monitor_endpoint();
    }
  }
  channel.zap_null = !policy.curve && a.authenticator != nullptr;
  return a;
}

}  // namespace geotrain::server
