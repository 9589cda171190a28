// The worker metrics events' schema (core/metrics_events.json): the checker, and the round
// event's exchange fields (worker/run/worker_events.hpp) in closed form and within the schema.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/metrics_events_check.hpp"
#include "worker/run/worker_events.hpp"

using namespace geotrain;
using namespace geotrain::worker;

namespace {
std::vector<std::string> keys_of(const nlohmann::json& j) {
  std::vector<std::string> keys;
  for (const auto& item : j.items()) keys.push_back(item.key());
  return keys;
}
}  // namespace

TEST_CASE("events::check names the unknown event or field, and lets extensible events grow") {
  CHECK(events::check("round", {"region", "round", "bytes_pushed", "time"}).empty());
  CHECK(events::check("rounds", {"region"}) == "event 'rounds' is not in core/metrics_events.json");
  CHECK(events::check("round", {"region", "bytes_pushd"}) ==
        "event 'round' has a field 'bytes_pushd' that core/metrics_events.json does not give it");
  // eval takes the Python API's own fields, unless strict
  CHECK(events::check("eval", {"region", "my_metric"}, /*strict=*/false).empty());
  CHECK_FALSE(events::check("eval", {"region", "my_metric"}).empty());
  CHECK_FALSE(events::check("round", {"my_metric"}, /*strict=*/false).empty());
  REQUIRE(events::find("done") != nullptr);
  CHECK_FALSE(events::find("done")->extensible);
  CHECK(std::string(events::field::final_val_bpb) == "final_val_bpb");
}

TEST_CASE("exchange_fields sums bytes and seconds, takes the worst staleness and the last round") {
  RoundReport a, b;
  a.round = 7;
  a.bytes_pushed = 100;
  a.bytes_pulled = 50;
  a.push_seconds = 0.25;
  a.pull_seconds = 0.5;
  a.merge_wait_seconds = 0.125;
  a.max_staleness = 2;
  a.gate_wait_us = 1500;
  a.released_round = 6;
  a.deferred = {ElementRange{0, 10}};
  b.round = 8;
  b.bytes_pushed = 300;
  b.bytes_pulled = 20;
  b.push_seconds = 0.75;
  b.merge_wait_seconds = 0.25;
  b.max_staleness = 1;
  b.gate_wait_us = 500;
  b.released_round = 7;
  b.late_shards = 3;
  const auto j = exchange_fields({a, b});
  CHECK(j["bytes_pushed"] == 400);
  CHECK(j["bytes_pulled"] == 70);
  CHECK(j["push_s"].get<double>() == 1.0);
  CHECK(j["pull_s"].get<double>() == 0.5);
  CHECK(j["merge_wait_s"].get<double>() == 0.375);
  CHECK(j["staleness"] == 2);
  CHECK(j["gate_wait_s"].get<double>() == 0.0015);
  CHECK(j["merged_round"] == 8);
  CHECK(j["released_round"] == 7);
  CHECK(j["exchanges"] == 2);
  CHECK(j["largest_exchange_bytes"] == 320);
  CHECK(j["deferred_shards"] == 1);
  CHECK(j["late_shards"] == 3);
  CHECK(events::check("round", keys_of(j)).empty());
  CHECK(exchange_fields({}).empty());
  const auto r = report_fields(b);
  CHECK(r["round"] == 8);
  CHECK(r["late_shards"] == 3);
  CHECK(r["merge_wait_s"].get<double>() == 0.25);
}

TEST_CASE("end_figures: region_* always, final_* only with a global model, the error without one") {
  const nlohmann::json own{{"test_accuracy", 0.5}, {"extra", 1.0}};
  const nlohmann::json global{{"test_accuracy", 0.75}};
  const auto with = end_figures(own, global, "unused");
  CHECK(with["global_model"] == true);
  CHECK(with["region_test_accuracy"] == 0.5);
  CHECK(with["final_test_accuracy"] == 0.75);
  CHECK_FALSE(with.contains("global_model_error"));
  CHECK_FALSE(with.contains("region_extra"));  // not a done figure
  const auto without = end_figures(own, std::nullopt, "the flush failed");
  CHECK(without["global_model"] == false);
  CHECK(without["region_test_accuracy"] == 0.5);
  CHECK_FALSE(without.contains("final_test_accuracy"));
  CHECK(without["global_model_error"] == "the flush failed");
  // Every key is one the schema's `done` event names.
  CHECK(events::check(events::name::done, keys_of(with), false) == "");
  CHECK(events::check(events::name::done, keys_of(without), false) == "");
  // A language model's evaluation under the done event's names.
  Evaluation lm;
  lm.loss = 1.25;
  lm.bits_per_byte = 1.8;
  const auto f = figures_of(lm);
  CHECK(f["val_bpb"] == 1.8);
  CHECK(f["val_loss"] == 1.25);
  CHECK_FALSE(f.contains("test_accuracy"));
}
