// The geotrain binary, run as a user would: exit codes, --version, the benches' JSON contracts,
// and a real `geotrain server` process spoken to over loopback tcp.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>

#include "compression/codecs.hpp"
#include "compression/factory.hpp"
#include "server/config.hpp"
#include "tests/run_binary.hpp"
#include "tests/temp_dir.hpp"
#include "wire/client.hpp"

namespace {

struct Result {
  int code;
  std::string out;
};

Result run(const std::string& args, const std::string& env = "") {
  auto r = geotrain::test::run_binary(args, env);
  return {r.code, std::move(r.text)};
}

}  // namespace

TEST_CASE("geotrain --version names the program and the build") {
  auto r = run("--version");
  CHECK(r.code == 0);
  CHECK(r.out.rfind("geotrain ", 0) == 0);
}

TEST_CASE("geotrain with no subcommand fails and shows the usage") {
  auto r = run("");
  CHECK(r.code != 0);
  CHECK(r.out.find("bench") != std::string::npos);
}

TEST_CASE("an unknown subcommand is named, with the nearest one and the list, and exits 2") {
  auto r = run("trian");
  CHECK(r.code == 2);
  CHECK(r.out.find("geotrain: error: unknown subcommand 'trian'; the subcommands are bench, ") !=
        std::string::npos);
  CHECK(r.out.find(", run, ") != std::string::npos);
  CHECK(r.out.find("did you mean") == std::string::npos);  // three edits from run: no guess
  r = run("--log-level warn swep configs/sweeps/overlap.yaml");
  CHECK(r.code == 2);
  CHECK(r.out.find("unknown subcommand 'swep' (did you mean 'sweep'?); the subcommands are") !=
        std::string::npos);
}

TEST_CASE("usage errors exit 2, like config errors; --help and --version exit 0") {
  auto r = run("run --bogus");
  CHECK(r.code == 2);
  CHECK(r.out.find("--bogus") != std::string::npos);
  r = run("sweep");  // its sweep file is required
  CHECK(r.code == 2);
  CHECK(r.out.find("sweep is required") != std::string::npos);
  r = run("--log-level");
  CHECK(r.code == 2);
  CHECK(run("--help").code == 0);
  CHECK(run("run --help").code == 0);
  CHECK(run("--version").code == 0);
}

TEST_CASE("geotrain bench codecs --json prints the documented fields for every codec") {
  auto r = run("--log-level warn bench codecs --elements 65536 --repeat 1 --no-gpu --json");
  REQUIRE(r.code == 0);
  auto doc = nlohmann::json::parse(r.out);
  CHECK(doc["elements"] == 65536);
  CHECK(doc["memcpy_gbps"].get<double>() > 0);
  CHECK(doc["device"].is_string());
  REQUIRE(doc["codecs"].size() >= 20);
  bool saw_onebit_ef = false;
  for (const auto& c : doc["codecs"]) {
    for (const char* key : {"name", "bits_per_element", "encode_gbps", "decode_gbps",
                            "encode_vs_memcpy", "decode_vs_memcpy", "rel_error"})
      REQUIRE(c.contains(key));
    CHECK(c["encode_gbps"].get<double>() > 0);
    if (c["name"] == "onebit" && c["error_feedback"] == true) {
      saw_onebit_ef = true;
      CHECK(c["bits_per_element"].get<double>() <= 1.05);
    }
  }
  CHECK(saw_onebit_ef);
}

TEST_CASE("a bad codec spec is reported with what is allowed, and a non-zero exit") {
  auto r = run("bench codecs --elements 4096 --codecs int3 --json");
  CHECK(r.code == 2);
  CHECK(r.out.find("unknown codec 'int3'") != std::string::npos);
}

TEST_CASE("geotrain bench server --json reports server and raw ZeroMQ throughput and their ratio") {
  auto r =
      run("--log-level warn bench server --sizes 4096 65536 --codecs fp32 onebit --transports tcp "
          "--seconds 0.01 --json");
  REQUIRE(r.code == 0);
  auto doc = nlohmann::json::parse(r.out);
  REQUIRE(doc["sizes"].size() == 4);  // 2 sizes x 2 codecs x 1 transport
  for (const auto& s : doc["sizes"]) {
    for (const char* key :
         {"bytes", "transport", "codec", "wire_bytes", "server_mbps", "raw_zmq_mbps", "ratio",
          "server_vs_raw", "server_rtt_us", "raw_rtt_us"})
      REQUIRE(s.contains(key));
    CHECK(s["transport"] == "tcp");
    CHECK(s["server_mbps"].get<double>() > 0);
    CHECK(s["raw_zmq_mbps"].get<double>() > 0);
    CHECK(s["ratio"].get<double>() ==
          doctest::Approx(s["server_mbps"].get<double>() / s["raw_zmq_mbps"].get<double>()));
    CHECK(s["server_round_trips"].get<int>() >= 5);
    // push + pull reply payloads: fp32 carries 4 bytes per element each way, onebit far fewer
    const auto bytes = s["bytes"].get<size_t>();
    if (s["codec"] == "fp32")
      CHECK(s["wire_bytes"].get<size_t>() > 2 * bytes);
    else
      CHECK(s["wire_bytes"].get<size_t>() * 16 < 2 * bytes);
  }
}

TEST_CASE("geotrain bench netsim --json reports the proxy's cost against the direct path") {
  auto r = run("--log-level warn bench netsim --profiles scarce --seconds 0.2 --json");
  REQUIRE(r.code == 0);
  auto doc = nlohmann::json::parse(r.out);
  REQUIRE(doc.contains("proxy"));
  const auto& rtt = doc["proxy"]["rtt_us"];
  const auto& fwd = doc["proxy"]["forwarding_gbs"];
  for (const char* key : {"direct", "proxied", "ratio"}) {
    REQUIRE(rtt.contains(key));
    REQUIRE(fwd.contains(key));
    CHECK(rtt[key].get<double>() > 0);
    CHECK(fwd[key].get<double>() > 0);
  }
  CHECK(rtt["added"].get<double>() ==
        doctest::Approx(rtt["proxied"].get<double>() - rtt["direct"].get<double>()));
  CHECK(doc["proxy"]["bytes"].get<uint64_t>() == uint64_t{1} << 28);  // at least a quarter GiB
  CHECK(doc["proxy"]["complete"].get<bool>());
  // scarce has one pair of regions, a link each way: 5 ms one way (10 ms round trip).
  REQUIRE(doc["links"].size() == 2);
  for (const auto& link : doc["links"]) {
    CHECK(link["profile"] == "scarce");
    CHECK(link["rtt_ms"]["configured"].get<double>() == 10.0);
    CHECK(link["rtt_ms"]["measured"].get<double>() >= 10.0);  // a delay is never short
    CHECK(link["bandwidth_mbps"]["intact"].get<bool>());
  }

  auto without =
      run("--log-level warn bench netsim --profiles scarce --seconds 0.2 --json "
          "--no-proxy-cost");
  REQUIRE(without.code == 0);
  CHECK_FALSE(nlohmann::json::parse(without.out).contains("proxy"));
}

TEST_CASE(
    "bad input to server, keygen, chaos and compare is refused with exit 2, writing nothing; "
    "compare reads a null in a summary as not measured") {
  namespace fs = std::filesystem;
  geotrain::test::TempDir tmp("cli-bad-input");
  const auto run_dir = tmp.path() / "server-run";
  const auto config = tmp.path() / "server.yaml";
  std::ofstream(config) << "regions: [a]\nmodel:\n  tensors: [{name: w, size: 2048}]\nserver:\n"
                           "  run_dir: \"" +
                               run_dir.string() + "\"\n";
  // A port past 65535 used to be wrapped by the socket into another port, after the metrics log
  // was written; a region without an endpoint was found after it too.
  auto r =
      run("server --config " + config.string() + " --region a --endpoint tcp://127.0.0.1:99999");
  CHECK(r.code == 2);
  CHECK(r.out.find("(--endpoint) 'tcp://127.0.0.1:99999' has port '99999'") != std::string::npos);
  r = run("server --config " + config.string() + " --region a");
  CHECK(r.code == 2);
  CHECK(r.out.find("server.endpoints has no entry for region 'a'") != std::string::npos);
  CHECK_FALSE(fs::exists(run_dir));
  // A config that is not a mapping, named as such (not yaml-cpp's words).
  std::ofstream(tmp.path() / "scalar.yaml") << "just a string\n";
  r = run("server --config " + (tmp.path() / "scalar.yaml").string() + " --region a");
  CHECK(r.code == 2);
  CHECK(r.out.find("scalar.yaml: the config must be a mapping") != std::string::npos);

  r = run("keygen --out " + (tmp.path() / "keys").string() + " --regions a,b,a");
  CHECK(r.code == 2);
  CHECK(r.out.find("region 'a' is named twice") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp.path() / "keys"));

  r = run("chaos --config " + config.string() + " --seed -1 --out " + (tmp.path() / "c").string());
  CHECK(r.code == 2);
  CHECK(r.out.find("--seed") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp.path() / "c"));
  // A reference folder that is not there used to be found only after the chaos run.
  std::ofstream(tmp.path() / "mlp.yaml") << "regions: [a]\nmodel: {arch: 784-10}\n";
  r = run("chaos --config " + (tmp.path() / "mlp.yaml").string() + " --reference " +
          (tmp.path() / "no-such-run").string() + " --out " + (tmp.path() / "c").string());
  CHECK(r.code == 2);
  CHECK(r.out.find("no-such-run' is not a run folder") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp.path() / "c"));

  // compare: a null in a summary reads as a value not measured, not as a type error; an output
  // folder that is a file is named.
  for (const char* name : {"one", "two"}) {
    fs::create_directories(tmp.path() / name);
    std::ofstream(tmp.path() / name / "config.yaml") << "regions: [a]\nmodel: {arch: 784-10}\n";
  }
  std::ofstream(tmp.path() / "one" / "summary.json")
      << R"({"status": "completed", "model": "mlp", "final_test_accuracy": 0.88})";
  std::ofstream(tmp.path() / "two" / "summary.json")
      << R"({"status": null, "model": null, "final_test_accuracy": null, "wall_seconds": null})";
  const std::string runs = (tmp.path() / "one").string() + " " + (tmp.path() / "two").string();
  r = run("compare " + runs + " --no-plots --out " + (tmp.path() / "cmp").string());
  CHECK_MESSAGE(r.code == 0, r.out);
  CHECK(r.out.find("88.00") != std::string::npos);
  std::ofstream(tmp.path() / "afile") << "x";
  r = run("compare " + runs + " --no-plots --out " + (tmp.path() / "afile").string());
  CHECK(r.code == 2);
  CHECK(r.out.find("cannot create the comparison's folder") != std::string::npos);
}

TEST_CASE(
    "geotrain server serves hello, push, pull and shutdown over loopback tcp, exits 0 and writes "
    "its metrics") {
  using namespace geotrain;
  test::TempDir tmp("cli-server");
  const auto run_dir = tmp.path() / "run";
  const auto config_path = tmp.path() / "server.yaml";
  const std::string yaml =
      "regions: [a]\nmodel:\n  tensors: [{name: w, size: 2048}]\nserver:\n  run_dir: \"" +
      run_dir.string() + "\"\n";
  std::ofstream(config_path) << yaml;
  const auto config = server::parse_server_config(yaml);
  const uint64_t table_hash = ParamTable(config.tensors, config.critical).layout_hash();

  // Port 0: the kernel picks a free port (no race with other tests); the server logs where it
  // bound.
  const std::string command = "timeout 60 " + std::string(GEOTRAIN_BINARY) + " server --config " +
                              config_path.string() +
                              " --region a --endpoint tcp://127.0.0.1:0 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string endpoint, log;
  std::array<char, 4096> line;
  while (endpoint.empty() && fgets(line.data(), line.size(), pipe)) {
    log += line.data();
    std::string l = line.data();
    if (auto at = l.find("tcp://127.0.0.1:"); at != std::string::npos) {
      endpoint = l.substr(at);
      endpoint.erase(endpoint.find_last_not_of(" \r\n") + 1);
    }
  }
  REQUIRE_MESSAGE(!endpoint.empty(), "the server never said where it listens:\n" << log);
  CHECK(endpoint != "tcp://127.0.0.1:0");

  {
    wire::Context context;
    wire::Client client(wire::connect_dealer(context, endpoint));
    auto reply = [&](wire::Body body, std::vector<wire::Frame> payloads = {}) {
      auto r = client.call(std::move(body), std::move(payloads), std::chrono::seconds(20));
      REQUIRE_MESSAGE(r.has_value(), "no reply within 20 s");
      if (auto* e = std::get_if<wire::Error>(&r->header.body)) FAIL("error reply: " << e->message);
      return std::move(*r);
    };
    auto welcome = std::get<wire::HelloReply>(
        reply(wire::Hello{"a", wire::kProtocolVersion, table_hash, {}}).header.body);
    REQUIRE(welcome.shards.size() == 1);
    CHECK(welcome.shards[0].count == 2048);
    auto full = std::get<wire::PullReply>(reply(wire::PullRequest{0, 0, true, 0}).header.body);
    Bytes payload;
    compression::make_codec("fp32")->encode(std::vector<float>(2048, 0.5f), payload);
    std::vector<wire::Frame> frames;
    wire::Push push{0, 1, full.version, {{0, payload.size()}}};
    frames.push_back(wire::frame_from_bytes(std::move(payload)));
    CHECK(std::get<wire::PushReply>(reply(push, std::move(frames)).header.body).round == 1);
    auto pulled = reply(wire::PullRequest{0, full.version, false, 1});
    std::vector<float> change(2048);
    compression::decode_payload(wire::frame_bytes(pulled.payloads.at(0)), change);
    CHECK(change[0] == 0.5f);
    CHECK(change[2047] == 0.5f);
    CHECK(std::holds_alternative<wire::Ack>(reply(wire::Shutdown{}).header.body));
  }
  while (fgets(line.data(), line.size(), pipe)) log += line.data();
  const int status = pclose(pipe);
  REQUIRE(WIFEXITED(status));
  CHECK_MESSAGE(WEXITSTATUS(status) == 0, log);

  std::ifstream metrics(run_dir / "server-a.metrics.jsonl");
  REQUIRE(metrics.good());
  bool joined = false;
  nlohmann::json last_stats;
  std::string record;
  while (std::getline(metrics, record)) {
    auto j = nlohmann::json::parse(record);
    if (j["event"] == "membership" && j["change"] == "joined") joined = true;
    if (j["event"] == "stats") last_stats = j;
  }
  CHECK(joined);
  REQUIRE(!last_stats.is_null());
  CHECK(last_stats["regions"]["a"]["pushes"] == 1);
  CHECK(last_stats["regions"]["a"]["pulls"] == 2);
}

TEST_CASE(
    "without --region a server or worker takes its place from the launcher's rank, and says what "
    "is wrong") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("geotrain-cli-rank-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto config = dir / "c.yaml";
  std::ofstream(config)
      << "regions: [a, b]\nmodel: {arch: \"784-10\"}\n"
         "server: {endpoints: {a: \"tcp://127.0.0.1:1\", b: \"tcp://127.0.0.1:2\"}}\n";
  auto r = run("server --config " + config.string(), "SLURM_PROCID=7");
  CHECK(r.code == 2);
  CHECK(r.out.find("SLURM_PROCID=7: there are only 2 regions") != std::string::npos);
  r = run("worker --config " + config.string(), "RANK=two");
  CHECK(r.code == 2);
  CHECK(r.out.find("RANK='two' is not a process rank") != std::string::npos);
  r = run("worker --config " + config.string(),
          "env -u SLURM_PROCID -u OMPI_COMM_WORLD_RANK -u PMI_RANK -u PMIX_RANK -u RANK -u "
          "JOB_COMPLETION_INDEX");
  CHECK(r.code == 2);
  CHECK(r.out.find("--region is missing and no launcher rank is set") != std::string::npos);
  // With --region alone (one site's own launcher), the rank numbers the region's workers.
  r = run("worker --config " + config.string() + " --region b", "SLURM_PROCID=1");
  CHECK(r.code == 2);
  CHECK(r.out.find("SLURM_PROCID=1: region b has only 1 workers") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("--set overrides config keys of a server or worker, checked like the file's keys") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("geotrain-cli-set-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto config = dir / "c.yaml";
  std::ofstream(config)
      << "regions: [a, b]\nmodel: {arch: \"784-10\"}\n"
         "server: {endpoints: {a: \"tcp://127.0.0.1:1\", b: \"tcp://127.0.0.1:2\"}, run_dir: \""
      << (dir / "run").string() << "\"}\n";
  auto r = run("server --config " + config.string() + " --region a --set server.stalenes_bound=2");
  CHECK(r.code == 2);
  CHECK(r.out.find("(with --set server.stalenes_bound=2): unknown key 'server.stalenes_bound'") !=
        std::string::npos);
  r = run("worker --config " + config.string() + " --region a --set worker.batch_size=0");
  CHECK(r.code == 2);
  CHECK(r.out.find("worker.batch_size") != std::string::npos);
  CHECK(r.out.find("--set worker.batch_size=0") != std::string::npos);
  r = run("worker --config " + config.string() + " --region a --set worker");
  CHECK(r.code == 2);
  CHECK(r.out.find("expected section.key=value") != std::string::npos);

  // A list value and a nested key: region c exists only through --set, and its server runs
  // (SIGINT after a few seconds stops it cleanly).
  r = run("server --config " + config.string() + " --region c");
  CHECK(r.code == 2);
  r = run("--log-level info server --config " + config.string() +
              " --region c --set regions=[a,b,c] --set server.endpoints.c=tcp://127.0.0.1:0",
          "timeout --preserve-status -s INT 5");
  CHECK_MESSAGE(r.code == 0, r.out);
  CHECK_MESSAGE(r.out.find("tcp://127.0.0.1:") != std::string::npos, r.out);
  std::filesystem::remove_all(dir);
}
