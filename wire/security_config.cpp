#include "wire/security_config.hpp"

#include "core/error.hpp"

namespace geotrain::wire {

SecurityConfig parse_security_config(const YAML::Node& node, const YamlReader& in,
                                     bool allow_auto) {
  SecurityConfig s;
  if (!node || node.IsNull()) return s;
  in.check_keys(node, "security", {"curve", "keys_dir"});
  if (auto c = node["curve"]) {
    const std::string v = c.IsScalar() ? c.Scalar() : std::string();
    if (v == "auto") {
      GT_REQUIRE(allow_auto,
                 "{}: security.curve is 'auto', which only `geotrain run` resolves: set true (with "
                 "security.keys_dir) or false",
                 in.source());
      s.curve = CurveSetting::automatic;
    } else {
      GT_REQUIRE(c.IsScalar(), "{}: security.curve must be true, false or auto", in.source());
      const auto on = true_or_false(c);  // not yes/no/on/off (core/yaml_reader.hpp)
      GT_REQUIRE(on.has_value(), "{}: security.curve is '{}', allowed: true, false, auto",
                 in.source(), v);
      s.curve = *on ? CurveSetting::on : CurveSetting::off;
    }
  }
  if (auto k = node["keys_dir"]) {
    s.keys_dir = in.string(k, "security.keys_dir");
    GT_REQUIRE(!s.keys_dir.empty(), "{}: security.keys_dir is empty", in.source());
  }
  if (s.curve == CurveSetting::on && !allow_auto)
    GT_REQUIRE(!s.keys_dir.empty(),
               "{}: security.curve is true but security.keys_dir is missing (write keys with "
               "`geotrain keygen --out DIR`)",
               in.source());
  if (s.curve != CurveSetting::off)
    GT_REQUIRE(curve_supported(),
               "{}: security.curve is on, but this libzmq was built without CURVE (libsodium)",
               in.source());
  return s;
}

std::optional<ChannelOptions::CurveClient> curve_client(const SecurityConfig& security,
                                                        const std::string& region,
                                                        const std::string& server_region) {
  if (!security.curve_on()) return std::nullopt;
  const auto keys = security.keys();
  const auto mine = keys.client_keypair(region);
  return ChannelOptions::CurveClient{keys.server_public(server_region), mine.public_key,
                                     mine.secret_key};
}

}  // namespace geotrain::wire
