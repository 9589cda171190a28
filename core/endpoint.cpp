#include "core/endpoint.hpp"

#include <algorithm>
#include <cctype>

#include "core/error.hpp"

namespace geotrain {

void require_endpoint(const std::string& endpoint, const std::string& what) {
  const std::string named = what.empty() ? "endpoint" : what;
  const bool scheme = endpoint.starts_with("tcp://") || endpoint.starts_with("inproc://") ||
                      endpoint.starts_with("ipc://");
  GT_REQUIRE(scheme && endpoint.find("://") + 3 < endpoint.size(),
             "{} '{}' is not allowed: use tcp://host:port, inproc://name or ipc://path", named,
             endpoint);
  if (!endpoint.starts_with("tcp://")) return;
  const std::string address = endpoint.substr(6);
  const auto colon = address.rfind(':');  // after an IPv6 host's brackets, the port's colon
  GT_REQUIRE(colon != std::string::npos && colon > 0 && colon + 1 < address.size(),
             "{} '{}' has no port: use tcp://host:port", named, endpoint);
  const std::string port = address.substr(colon + 1);
  if (port == "*") return;
  const bool digits =
      port.size() <= 5 &&
      std::all_of(port.begin(), port.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
  GT_REQUIRE(digits && std::stoul(port) <= 65535, "{} '{}' has port '{}', allowed: 0 to 65535 or *",
             named, endpoint, port);
}

}  // namespace geotrain
