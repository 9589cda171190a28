// `geotrain keygen --out DIR [--config C | --regions a,b,c] [--force]`: writes a CURVE server
// keypair and a client keypair per region (wire/curve_keys.hpp has the file layout;
// docs/deploy.md how to distribute them). Refuses to overwrite existing keys unless --force.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <fstream>
#include <memory>
#include <sstream>

#include "cli/commands.hpp"
#include "core/deployment_keys.hpp"
#include "core/error.hpp"
#include "core/yaml_reader.hpp"
#include "wire/curve_keys.hpp"

namespace geotrain::cli {

namespace {
struct KeygenArgs {
  std::string out;
  std::string config;
  std::string regions;
  bool force = false;
};

int run_keygen(const KeygenArgs& args) {
  GT_REQUIRE(args.config.empty() != args.regions.empty(),
             "keygen: give the regions with exactly one of --config C or --regions a,b,c");
  std::vector<std::string> regions;
  if (!args.config.empty()) {
    const YamlReader in{args.config};
    std::ifstream f(args.config);
    std::stringstream text;
    text << f.rdbuf();
    const auto root = in.load_deployment_config(text.str());
    regions = read_regions(in, root);
  } else {
    std::stringstream list(args.regions);
    for (std::string r; std::getline(list, r, ',');)
      if (!r.empty()) regions.push_back(r);
  }
  const auto files = wire::KeyDirectory::generate(args.out, regions, args.force);
  spdlog::info("keygen: wrote {} key files for {} region(s) to {}", files.size(), regions.size(),
               args.out);
  for (const auto& f : files) fmt::print("{}\n", f.string());
  return 0;
}
}  // namespace

void add_keygen_command(CLI::App& app, CommandList& commands) {
  auto args = std::make_shared<KeygenArgs>();
  auto* cmd = app.add_subcommand(
      "keygen", "write CURVE keys: a server and a client keypair per region (security.keys_dir)");
  cmd->add_option("--out", args->out, "folder for the key files")->required();
  cmd->add_option("--config", args->config, "take the regions from this config")
      ->check(CLI::ExistingFile);
  cmd->add_option("--regions", args->regions, "comma-separated region names");
  cmd->add_flag("--force", args->force, "replace existing key files");
  commands.emplace_back(cmd, [args] { return run_keygen(*args); });
}

}  // namespace geotrain::cli
