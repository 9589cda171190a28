// One site per cluster (launcher/run/site_files.hpp): the files `geotrain site` writes. The
// Slurm script runs for real in test_slurm; here what no test can run: the Kubernetes manifests
// (parsed, their kinds, names, ports, commands and mounts), the systemd unit, the shell syntax,
// the key files a site holds, and the refusals.
#include <doctest/doctest.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <fstream>

#include "core/error.hpp"
#include "launcher/run/site_files.hpp"
#include "tests/run_binary.hpp"
#include "tests/temp_dir.hpp"

using namespace geotrain;

namespace {

launcher::SiteSpec spec(bool keys) {
  launcher::SiteSpec s;
  s.region = "eu-west";
  s.workers = 4;
  s.endpoint = "tcp://10.0.0.2:7101";
  s.config_text = "regions: [us-east, eu-west]\nworker: {workers_per_region: 4}\n";
  s.binary = "/opt/geotrain/bin/geotrain";
  if (keys) s.keys = {{"server-eu-west.secret", "S\n"}, {"client-us-east.public", "P\n"}};
  return s;
}

const std::string& text_of(const std::vector<launcher::SiteFile>& files, const std::string& name) {
  for (const auto& f : files)
    if (f.name == name) return f.text;
  FAIL("no file ", name);
  static const std::string none;
  return none;
}

}  // namespace

TEST_CASE(
    "a site's Kubernetes manifests: config, keys, server behind a headless Service, workers") {
  const auto files = launcher::site_files(spec(true));
  const auto docs = YAML::LoadAll(text_of(files, "k8s.yaml"));
  REQUIRE(docs.size() == 5);
  std::vector<std::string> kinds;
  for (const auto& d : docs) kinds.push_back(d["kind"].as<std::string>());
  CHECK(kinds == std::vector<std::string>{"ConfigMap", "Secret", "Service", "StatefulSet", "Job"});
  // The ConfigMap holds the config as written; the Secret the site's key files.
  CHECK(docs[0]["data"]["geo.yaml"].as<std::string>() == spec(true).config_text);
  CHECK(docs[1]["stringData"]["server-eu-west.secret"].as<std::string>() == "S");
  // The Service and the server listen on the endpoint's port.
  CHECK(docs[2]["spec"]["clusterIP"].as<std::string>() == "None");
  CHECK(docs[2]["spec"]["ports"][0]["port"].as<int>() == 7101);
  const auto server = docs[3]["spec"]["template"]["spec"]["containers"][0];
  CHECK(server["ports"][0]["containerPort"].as<int>() == 7101);
  const auto cmd = server["command"].as<std::vector<std::string>>();
  CHECK(cmd == std::vector<std::string>{"/opt/geotrain/bin/geotrain", "server", "--config",
                                        "/etc/geotrain/geo.yaml", "--region", "eu-west",
                                        "--endpoint", "tcp://*:7101", "--set",
                                        "security.keys_dir=/etc/geotrain/keys"});
  CHECK(server["volumeMounts"][1]["mountPath"].as<std::string>() == "/etc/geotrain/keys");
  CHECK(
      docs[3]["spec"]["template"]["spec"]["volumes"][1]["secret"]["secretName"].as<std::string>() ==
      "geotrain-eu-west-keys");
  // The workers: an indexed Job of the region's count, rank = JOB_COMPLETION_INDEX.
  const auto job = docs[4]["spec"];
  CHECK(job["completionMode"].as<std::string>() == "Indexed");
  CHECK(job["completions"].as<int>() == 4);
  CHECK(job["parallelism"].as<int>() == 4);
  const auto worker =
      job["template"]["spec"]["containers"][0]["command"].as<std::vector<std::string>>();
  CHECK(worker[1] == "worker");
  CHECK(std::find(worker.begin(), worker.end(), "--rank") == worker.end());
  // Without keys: no Secret, no keys mount, no keys_dir.
  const auto plain = YAML::LoadAll(text_of(launcher::site_files(spec(false)), "k8s.yaml"));
  REQUIRE(plain.size() == 4);
  CHECK(plain[2]["kind"].as<std::string>() == "StatefulSet");
  CHECK(plain[2]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"].size() == 1);
}

TEST_CASE("a site's Slurm script and systemd unit: shell syntax, the region's tasks, restarts") {
  const auto files = launcher::site_files(spec(true));
  const auto& slurm = text_of(files, "slurm.sh");
  CHECK(files[0].executable);
  CHECK(slurm.find("#SBATCH --ntasks=5\n") != std::string::npos);  // 4 workers and the server
  CHECK(slurm.find("srun --ntasks=4 --exact --kill-on-bad-exit=1") != std::string::npos);
  CHECK(slurm.find("--resume --generation") != std::string::npos);
  CHECK(slurm.find("for try in $(seq 0 2)") != std::string::npos);  // 3 tries
  geotrain::test::TempDir dir("site");
  std::ofstream(dir.path() / "slurm.sh") << slurm;
  CHECK(std::system(("bash -n " + (dir.path() / "slurm.sh").string()).c_str()) == 0);
  const auto& unit = text_of(files, "geotrain-server.service");
  CHECK(unit.find("ExecStart=/opt/geotrain/bin/geotrain server --config /etc/geotrain/geo.yaml "
                  "--region eu-west --set security.keys_dir=/etc/geotrain/keys\n") !=
        std::string::npos);
  CHECK(unit.find("Restart=always") != std::string::npos);
  CHECK(text_of(files, "geo.yaml") == spec(true).config_text);
}

TEST_CASE("a site holds its own secrets and every public key; bad input is refused by name") {
  CHECK(launcher::site_key_files("b", {"a", "b"}) ==
        std::vector<std::string>{"server-b.secret", "client-b.secret", "server-a.public",
                                 "client-a.public", "server-b.public", "client-b.public"});
  auto s = spec(false);
  s.region = "EU_west";
  CHECK_THROWS_WITH_AS(launcher::site_files(s), doctest::Contains("must be a DNS label"),
                       InputError);
  s = spec(false);
  s.endpoint = "ipc:///tmp/server";
  CHECK_THROWS_WITH_AS(launcher::site_files(s), doctest::Contains("not tcp://HOST:PORT"),
                       InputError);
  s.endpoint = "tcp://host:0";
  CHECK_THROWS_AS(launcher::site_files(s), InputError);
  s = spec(false);
  s.tries = 0;
  CHECK_THROWS_WITH_AS(launcher::site_files(s), doctest::Contains("--tries is 0"), InputError);
}

TEST_CASE("geotrain site writes a region's files and only its own secrets, from keygen's folder") {
  geotrain::test::TempDir dir("site-cli");
  const auto config = dir.path() / "geo.yaml";
  std::ofstream(config) << "regions: [a, b]\n"
                           "model: {arch: \"784-32-10\"}\n"
                           "server: {endpoints: {a: \"tcp://10.0.0.1:7101\", b: "
                           "\"tcp://10.0.0.2:7102\"}}\n"
                           "security: {curve: true, keys_dir: \""
                        << (dir.path() / "keys").string()
                        << "\"}\n"
                           "worker: {workers_per_region: {a: 2, b: 3}}\n";
  const auto keygen = geotrain::test::run_binary("keygen --out " + (dir.path() / "keys").string() +
                                                 " --config " + config.string());
  REQUIRE_MESSAGE(keygen.code == 0, keygen.text);
  const auto site = dir.path() / "site-b";
  const auto out = geotrain::test::run_binary("site --config " + config.string() +
                                              " --region b --out " + site.string());
  INFO(out.text);
  REQUIRE(out.code == 0);
  CHECK(out.text.find("3 workers, server at tcp://10.0.0.2:7102, CURVE keys") != std::string::npos);
  for (const char* f : {"slurm.sh", "geotrain-server.service", "k8s.yaml", "geo.yaml"})
    CHECK_MESSAGE(std::filesystem::exists(site / f), f);
  CHECK(std::filesystem::exists(site / "keys" / "server-b.secret"));
  CHECK_FALSE(std::filesystem::exists(site / "keys" / "server-a.secret"));  // a's, not b's
  CHECK_FALSE(std::filesystem::exists(site / "keys" / "client-a.secret"));
  CHECK(std::filesystem::exists(site / "keys" / "server-a.public"));
  const auto perms = std::filesystem::status(site / "keys" / "client-b.secret").permissions();
  CHECK((perms & std::filesystem::perms::group_read) == std::filesystem::perms::none);
  // A region the config does not have, named.
  const auto bad = geotrain::test::run_binary("site --config " + config.string() +
                                              " --region c --out " + site.string());
  CHECK(bad.code != 0);
  CHECK(bad.text.find("--region c is not one of the config's regions") != std::string::npos);
}
