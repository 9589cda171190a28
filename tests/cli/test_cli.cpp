// The geotrain binary, run as a user would: exit codes, --version, and the bench's JSON contract.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>

namespace {

struct Result {
  int code;
  std::string out;
};

Result run(const std::string& args) {
  const std::string command = std::string(GEOTRAIN_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  std::array<char, 4096> buf;
  size_t got;
  while ((got = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), got);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
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
    for (const char* key : {"name", "bits_per_element", "encode_gbps", "decode_gbps", "encode_vs_memcpy",
                            "decode_vs_memcpy", "rel_error"})
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
