// core/deployment_keys: the config keys every process reads, with one set of rules.
#include <doctest/doctest.h>

#include <string>

#include "core/deployment_keys.hpp"
#include "core/endpoint.hpp"
#include "core/error.hpp"
#include "core/region_workers.hpp"

using namespace geotrain;

namespace {
YAML::Node yaml(const std::string& text) { return YAML::Load(text); }
}  // namespace

TEST_CASE("regions: 1 to 64 distinct names, errors naming the source") {
  const YamlReader in{"deploy.yaml"};
  CHECK(read_regions(in, yaml("regions: [a, b, c]")) == std::vector<std::string>{"a", "b", "c"});
  CHECK_THROWS_WITH_AS(read_regions(in, yaml("model: {}")),
                       doctest::Contains("deploy.yaml: key 'regions' is missing"), InputError);
  CHECK_THROWS_WITH_AS(read_regions(in, yaml("regions: []")),
                       doctest::Contains("regions has 0 entries, allowed: 1 to 64"), InputError);
  CHECK_THROWS_WITH_AS(read_regions(in, yaml("regions: [a, b, a]")),
                       doctest::Contains("regions lists 'a' twice"), InputError);
  std::string many = "regions: [";
  for (int i = 0; i < 65; ++i) many += (i ? ", r" : "r") + std::to_string(i);
  CHECK_THROWS_WITH_AS(read_regions(in, yaml(many + "]")),
                       doctest::Contains("regions has 65 entries"), InputError);
  CHECK_THROWS_WITH_AS(read_regions(in, yaml("regions: a")), doctest::Contains("regions"),
                       InputError);
}

TEST_CASE("server.endpoints: configured regions only") {
  const YamlReader in{"deploy.yaml"};
  const std::vector<std::string> regions{"a", "b"};
  const auto e = read_endpoints(in, yaml("{a: tcp://h:1, b: tcp://h:2}"), regions);
  CHECK(e.at("a") == "tcp://h:1");
  CHECK(e.at("b") == "tcp://h:2");
  CHECK_THROWS_WITH_AS(read_endpoints(in, yaml("{mars: tcp://h:1}"), regions),
                       doctest::Contains("server.endpoints.mars"), InputError);
  CHECK_THROWS_WITH_AS(read_endpoints(in, yaml("[tcp://h:1]"), regions),
                       doctest::Contains("must map region names to endpoints"), InputError);
}

TEST_CASE("an endpoint is tcp://host:port with a port of 0 to 65535 or *, inproc:// or ipc://") {
  for (const char* ok : {"tcp://127.0.0.1:7101", "tcp://*:0", "tcp://host:65535", "tcp://h:*",
                         "tcp://[::1]:80", "inproc://server-a", "ipc:///tmp/a.sock"}) {
    CAPTURE(ok);
    CHECK_NOTHROW(require_endpoint(ok, "server.endpoints.a"));
  }
  // A port past 65535 used to reach the socket, which wrapped it into another port.
  CHECK_THROWS_WITH_AS(
      require_endpoint("tcp://127.0.0.1:99999", "server.endpoints.a"),
      doctest::Contains(
          "server.endpoints.a 'tcp://127.0.0.1:99999' has port '99999', allowed: 0 to 65535 or *"),
      InputError);
  for (const char* bad : {"tcp://h:-1", "tcp://h:80x", "tcp://h:1234567", "tcp://h:", "tcp://h",
                          "tcp://:80", "udp://h:1", "tcp://", "h:80", ""}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(require_endpoint(bad), InputError);
  }
  // In a config, the key and the file are named.
  const YamlReader in{"deploy.yaml"};
  CHECK_THROWS_WITH_AS(read_endpoints(in, yaml("{a: tcp://h:70000}"), {"a"}),
                       doctest::Contains("deploy.yaml: server.endpoints.a 'tcp://h:70000'"),
                       InputError);
}

TEST_CASE("model.tensors: {name, size} entries; the model section's keys are one list") {
  const YamlReader in{"deploy.yaml"};
  const auto t = read_model_tensors(in, yaml("[{name: w, size: 12}, {name: b, size: 3}]"));
  REQUIRE(t.size() == 2);
  CHECK(t[0].name == "w");
  CHECK(t[1].size == 3);
  CHECK_THROWS_WITH_AS(read_model_tensors(in, yaml("{name: w}")),
                       doctest::Contains("model.tensors must be a list"), InputError);
  CHECK_THROWS_WITH_AS(read_model_tensors(in, yaml("[{name: w}]")),
                       doctest::Contains("needs name and size"), InputError);
  CHECK_THROWS_WITH_AS(read_model_tensors(in, yaml("[{name: w, size: 0}]")),
                       doctest::Contains("model.tensors[].size"), InputError);
  CHECK_THROWS_WITH_AS(read_model_tensors(in, yaml("[{name: w, size: 1, dtype: f}]")),
                       doctest::Contains("unknown key 'model.tensors[].dtype'"), InputError);
  CHECK(model_keys().count("tensors") == 1);
  CHECK(model_keys().count("preset") == 1);
  CHECK(model_keys().count("optimizer") == 0);
}

TEST_CASE("a model.critical glob that matches no tensor is refused, naming it and the tensors") {
  const YamlReader in{"deploy.yaml"};
  const std::vector<TensorSpec> mlp{{"fc1.weight", 10}, {"fc1.bias", 1},    {"fc2.weight", 10},
                                    {"fc2.bias", 1},    {"fc3.weight", 10}, {"fc3.bias", 1}};
  CHECK_NOTHROW(check_critical_globs(in, {"fc3.*", "*.bias", "fc?.weight"}, mlp));
  CHECK_NOTHROW(check_critical_globs(in, {}, mlp));
  CHECK_THROWS_WITH_AS(check_critical_globs(in, {"fc3.*", "fc9.*"}, mlp),
                       doctest::Contains("deploy.yaml: model.critical has 'fc9.*', which matches "
                                         "no tensor of the model (its tensors: fc1.weight, "
                                         "fc1.bias, fc2.weight"),
                       InputError);
  // A large model's list is cut short and counted.
  std::vector<TensorSpec> many;
  for (int i = 0; i < 20; ++i) many.push_back({"block" + std::to_string(i) + ".w", 4});
  CHECK_THROWS_WITH_AS(check_critical_globs(in, {"head.*"}, many),
                       doctest::Contains("block7.w, and 12 more)"), InputError);
}

TEST_CASE("the protocol settings servers and leaders share: defaults, values, one set of rules") {
  const YamlReader in{"deploy.yaml"};
  const auto none = read_shared_protocol(in, yaml("regions: [a]"));
  CHECK(none.staleness_bound == 0);
  CHECK(none.outer.lr == 1.0f);
  CHECK(none.outer.momentum == 0.0f);
  CHECK_FALSE(none.outer.nesterov);
  CHECK(none.fragments == 1);
  CHECK(none.stream_critical);

  const auto p = read_shared_protocol(
      in, yaml("server: {staleness_bound: 2, optimizer: {lr: 0.7, momentum: 0.9, nesterov: true}}\n"
               "worker: {fragments: 4, stream_critical: false, batch_size: 8}"));
  CHECK(p.staleness_bound == 2);
  CHECK(p.outer.lr == doctest::Approx(0.7));
  CHECK(p.outer.momentum == doctest::Approx(0.9));
  CHECK(p.outer.nesterov);
  CHECK(p.fragments == 4);
  CHECK_FALSE(p.stream_critical);

  CHECK_THROWS_WITH_AS(read_shared_protocol(in, yaml("server: {staleness_bound: 1001}")),
                       doctest::Contains("server.staleness_bound"), InputError);
  CHECK_THROWS_WITH_AS(read_shared_protocol(in, yaml("server: {optimizer: {momentum: 1.0}}")),
                       doctest::Contains("server.optimizer.momentum"), InputError);
  // A typo in the outer step is refused for every process alike (the workers used to skip it).
  CHECK_THROWS_WITH_AS(read_shared_protocol(in, yaml("server: {optimizer: {nesterow: true}}")),
                       doctest::Contains("server.optimizer.nesterow"), InputError);
  CHECK_THROWS_WITH_AS(read_shared_protocol(in, yaml("worker: {fragments: 0}")),
                       doctest::Contains("worker.fragments"), InputError);
  CHECK_THROWS_WITH_AS(read_shared_protocol(in, yaml("worker: {stream_critical: maybe}")),
                       doctest::Contains("worker.stream_critical"), InputError);
}

TEST_CASE("workers per region: one count for all, or a count per region, ranked region by region") {
  const YamlReader in{"deploy.yaml"};
  const std::vector<std::string> regions{"a", "b", "c"};
  const auto even = read_region_workers(in, yaml("worker: {workers_per_region: 2}"), regions, 64);
  CHECK(even.total() == 6);
  CHECK_FALSE(even.uneven());
  CHECK(even.text() == "2");
  CHECK(even.first_rank("c") == 4);
  CHECK(even.place(3) == std::pair<std::string, uint32_t>{"b", 1});
  CHECK(read_region_workers(in, yaml("worker: {}"), regions, 64).total() == 3);  // 1 each

  const auto fleet = read_region_workers(
      in, yaml("worker: {workers_per_region: {a: 4, b: 2, c: 1}}"), regions, 64);
  CHECK(fleet.uneven());
  CHECK(fleet.total() == 7);
  CHECK(fleet.in("b") == 2);
  CHECK(fleet.largest() == 4);
  CHECK(fleet.text() == "{a: 4, b: 2, c: 1}");
  // Global ranks: a's 0-3, b's 4-5, c's 6.
  CHECK(fleet.first_rank("a") == 0);
  CHECK(fleet.first_rank("b") == 4);
  CHECK(fleet.first_rank("c") == 6);
  CHECK(fleet.place(0) == std::pair<std::string, uint32_t>{"a", 0});
  CHECK(fleet.place(5) == std::pair<std::string, uint32_t>{"b", 1});
  CHECK(fleet.place(6) == std::pair<std::string, uint32_t>{"c", 0});
  CHECK_THROWS_WITH_AS(fleet.place(7), doctest::Contains("beyond the fleet's 7 workers"),
                       InputError);
  CHECK_THROWS_WITH_AS(fleet.in("d"), doctest::Contains("'d' is not one of"), InputError);

  CHECK_THROWS_WITH_AS(
      read_region_workers(in, yaml("worker: {workers_per_region: {a: 1, b: 1}}"), regions, 64),
      doctest::Contains("no value for region 'c'"), InputError);
  CHECK_THROWS_WITH_AS(
      read_region_workers(in, yaml("worker: {workers_per_region: {a: 1, b: 0, c: 1}}"), regions,
                          64),
      doctest::Contains("worker.workers_per_region.b"), InputError);
  CHECK_THROWS_WITH_AS(
      read_region_workers(in, yaml("worker: {workers_per_region: 65}"), regions, 64),
      doctest::Contains("worker.workers_per_region"), InputError);
}

TEST_CASE("batch sizes: one for every region, or one per region, by the same rules as counts") {
  const YamlReader in{"deploy.yaml"};
  const std::vector<std::string> regions{"a", "b", "c"};
  const auto fleet = read_region_workers(
      in, yaml("worker: {workers_per_region: {a: 4, b: 2, c: 1}}"), regions, 64);
  const auto fallback = read_region_batches(in, yaml("worker: {}"), regions);
  CHECK_FALSE(fallback.uneven());
  CHECK(fallback.in("c") == 64);
  CHECK(fallback.global(fleet) == 7 * 64);

  const auto even = read_region_batches(in, yaml("worker: {batch_size: 8}"), regions);
  CHECK(even.text() == "8");
  CHECK(even.offset(fleet, 5) == 40);

  const auto sizes =
      read_region_batches(in, yaml("worker: {batch_size: {a: 2, b: 8, c: 16}}"), regions);
  CHECK(sizes.uneven());
  CHECK(sizes.in("b") == 8);
  CHECK(sizes.of_rank(fleet, 5) == 8);  // b's second worker
  CHECK(sizes.text() == "{a: 2, b: 8, c: 16}");
  // a's 4 x 2, then b's 2 x 8, then c's 16: 40 windows; c's worker starts at 24.
  CHECK(sizes.global(fleet) == 40);
  CHECK(sizes.offset(fleet, 6) == 24);
  CHECK_THROWS_WITH_AS(sizes.in("d"), doctest::Contains("'d' is not one of"), InputError);
  // The same size written per region is the uniform fleet.
  CHECK_FALSE(
      read_region_batches(in, yaml("worker: {batch_size: {a: 8, b: 8, c: 8}}"), regions).uneven());

  CHECK_THROWS_WITH_AS(read_region_batches(in, yaml("worker: {batch_size: {a: 2, b: 8}}"), regions),
                       doctest::Contains("worker.batch_size has no value for region 'c'"),
                       InputError);
  CHECK_THROWS_WITH_AS(
      read_region_batches(in, yaml("worker: {batch_size: {a: 2, b: 8, c: 8, d: 1}}"), regions),
      doctest::Contains("worker.batch_size"), InputError);
  CHECK_THROWS_WITH_AS(
      read_region_batches(in, yaml("worker: {batch_size: {a: 2, b: 0, c: 8}}"), regions),
      doctest::Contains("worker.batch_size.b"), InputError);
}
