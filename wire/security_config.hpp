// SecurityConfig: the deployment config's top-level `security:` section, read by the server,
// the worker and `geotrain run` alike.
//
//   security:
//     curve: true          # true | false | auto (auto: `geotrain run` decides; see below)
//     keys_dir: keys/      # the folder `geotrain keygen` wrote (wire/curve_keys.hpp)
//
// With curve on, every server socket is a CURVE server that accepts only the client keys of the
// configured regions (ZAP, wire/zap_authenticator.hpp), and every leader and worker connects
// as a CURVE client with its region's client keypair. A server or worker needs `keys_dir`
// with `curve: true`, and refuses `auto` (only `geotrain run` resolves it: CURVE on for WAN
// profiles other than lan, keys generated into the run folder when no keys_dir is given).
// Unknown keys and bad values are InputErrors naming the key. Plain struct.
#pragma once

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <string>

#include "core/yaml_reader.hpp"
#include "wire/channel.hpp"
#include "wire/curve_keys.hpp"

namespace geotrain::wire {

enum class CurveSetting { off, on, automatic };

struct SecurityConfig {
  CurveSetting curve = CurveSetting::off;
  std::filesystem::path keys_dir;  // empty: none given

  bool curve_on() const { return curve == CurveSetting::on; }
  KeyDirectory keys() const { return KeyDirectory(keys_dir); }
};

// `node` is root["security"] (may be undefined: the defaults). With `allow_auto` false (server,
// worker), `curve: auto` is refused and `curve: true` needs keys_dir.
SecurityConfig parse_security_config(const YAML::Node& node, const YamlReader& in, bool allow_auto);

// The CURVE client side of a connection from a process of region `region` to the server of
// `server_region` (keys read from keys_dir); nullopt when CURVE is off.
std::optional<ChannelOptions::CurveClient> curve_client(const SecurityConfig& security,
                                                        const std::string& region,
                                                        const std::string& server_region);

}  // namespace geotrain::wire
