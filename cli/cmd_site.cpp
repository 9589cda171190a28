// `geotrain site --config C --region R --out DIR [--binary B] [--tries N] [--keys K]
// [--image I]`: the files one site (one cluster, its own scheduler) needs to run its region of a
// deployment: a Slurm batch script, a systemd unit for the server, Kubernetes manifests, the
// config, and with CURVE the site's keys (launcher/run/site_files.hpp; docs/deploy.md, "One site
// per cluster").
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "launcher/run/run_settings.hpp"
#include "launcher/run/site_files.hpp"
#include "worker/config.hpp"

namespace geotrain::cli {

namespace {

namespace fs = std::filesystem;

struct SiteArgs {
  std::string config;
  std::string region;
  std::string out;
  std::string binary = "geotrain";
  uint32_t tries = 3;
  std::string keys;
  std::string image = "geotrain:latest";
};

void write_file(const fs::path& file, const std::string& text, fs::perms mode) {
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << text;
    GT_REQUIRE(out.good(), "site: cannot write '{}'", file.string());
  }
  fs::permissions(file, mode);
}

int run_site(const SiteArgs& args) {
  const auto config = worker::load_worker_config(args.config);
  GT_REQUIRE(
      std::find(config.regions.begin(), config.regions.end(), args.region) != config.regions.end(),
      "site: --region {} is not one of the config's regions", args.region);
  launcher::SiteSpec spec;
  spec.region = args.region;
  spec.workers = config.workers.in(args.region);
  GT_REQUIRE(config.server_endpoints.count(args.region),
             "site: server.endpoints names no server for region {}", args.region);
  spec.endpoint = config.server_endpoints.at(args.region);
  spec.config_text = launcher::read_text_file(args.config);
  spec.binary = args.binary;
  spec.tries = args.tries;
  spec.image = args.image;
  // CURVE: the keygen folder (--keys, else security.keys_dir when CURVE is on).
  const std::string keys = !args.keys.empty()           ? args.keys
                           : config.security.curve_on() ? config.security.keys_dir.string()
                                                        : std::string();
  for (const auto& name : launcher::site_key_files(args.region, config.regions))
    if (!keys.empty())
      spec.keys.emplace_back(name, launcher::read_text_file(fs::path(keys) / name));
  const auto files = launcher::site_files(spec);

  const fs::path out(args.out);
  fs::create_directories(out);
  for (const auto& f : files)
    write_file(out / f.name, f.text,
               f.executable ? fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec
                            : fs::perms::owner_read | fs::perms::owner_write |
                                  fs::perms::group_read | fs::perms::others_read);
  if (!spec.keys.empty()) {
    fs::create_directories(out / "keys");
    fs::permissions(out / "keys", fs::perms::owner_all);
    for (const auto& [name, text] : spec.keys)
      write_file(out / "keys" / name, text,
                 name.ends_with(".secret") ? fs::perms::owner_read | fs::perms::owner_write
                                           : fs::perms::owner_read | fs::perms::owner_write |
                                                 fs::perms::group_read | fs::perms::others_read);
  }
  std::printf("site %s: %zu files in %s (%u workers, server at %s%s)\n", args.region.c_str(),
              files.size() + (spec.keys.empty() ? 0 : spec.keys.size()), out.string().c_str(),
              spec.workers, spec.endpoint.c_str(), spec.keys.empty() ? "" : ", CURVE keys");
  std::printf(
      "  Slurm: cd %s && sbatch slurm.sh; systemd: geotrain-server.service; "
      "Kubernetes: kubectl apply -f k8s.yaml\n",
      out.string().c_str());
  return 0;
}

}  // namespace

void add_site_command(CLI::App& app, CommandList& commands) {
  auto args = std::make_shared<SiteArgs>();
  auto* cmd = app.add_subcommand(
      "site",
      "the files one site needs to run its region: Slurm script, systemd unit, Kubernetes "
      "manifests, config and keys");
  cmd->add_option("--config", args->config, "the deployment config (the same at every site)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--region", args->region, "the region this site runs")->required();
  cmd->add_option("--out", args->out, "the folder to write the site's files to")->required();
  cmd->add_option("--binary", args->binary,
                  "the geotrain binary at the site (default: geotrain, on PATH)");
  cmd->add_option("--tries", args->tries,
                  "the workers' step is started at most this many times (default 3)")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--keys", args->keys,
                  "the keygen folder to take the site's CURVE keys from (default: "
                  "security.keys_dir when security.curve is on)")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--image", args->image,
                  "the container image (Kubernetes; default "
                  "geotrain:latest)");
  commands.emplace_back(cmd, [args] { return run_site(*args); });
}

}  // namespace geotrain::cli
