// core/yaml_reader.hpp and core/closest_name.hpp: what a config loader refuses that YAML itself
// lets pass (a key written twice, yes/no/on/off for a boolean), and the "did you mean" of an
// unknown key.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "core/closest_name.hpp"
#include "core/error.hpp"
#include "core/yaml_reader.hpp"

using namespace geotrain;

TEST_CASE("a key written twice in one mapping is refused, naming the key and both lines") {
  const YamlReader in{"my.yaml"};
  CHECK_THROWS_WITH_AS(in.load_mapping("regions: [a]\nworker:\n  rounds: 16\n  lr: 0.1\n"
                                       "  rounds: 8\n"),
                       doctest::Contains("my.yaml: key 'worker.rounds' is written twice (lines 3 "
                                         "and 5); a key may appear once in a mapping"),
                       InputError);
  CHECK_THROWS_WITH_AS(in.load_mapping("run: {plots: false}\nregions: [a]\nrun: {name: x}\n"),
                       doctest::Contains("key 'run' is written twice (lines 1 and 3)"), InputError);
  // Inside a list, and twice on one line (flow style).
  CHECK_THROWS_WITH_AS(
      parse_yaml("model:\n  tensors:\n    - {name: w, size: 4, name: v}\n", "t.yaml"),
      doctest::Contains("t.yaml: key 'model.tensors[].name' is written twice (both on line 3)"),
      InputError);
  // The same key in different mappings, an alias of a mapping used twice, and quoting that
  // makes the same text: only the last is a duplicate.
  CHECK_NOTHROW(in.load_mapping("server: {lr: 1}\nworker: {lr: 1}\n"));
  CHECK_NOTHROW(in.load_mapping("a: &o {lr: 1, seed: 2}\nb: *o\nc: [*o, *o]\n"));
  CHECK_THROWS_WITH_AS(in.load_mapping("lr: 1\n'lr': 2\n"),
                       doctest::Contains("key 'lr' is written twice"), InputError);
  // Not YAML at all is still reported as such.
  CHECK_THROWS_WITH_AS(in.load_mapping("a: [1,\n"), doctest::Contains("my.yaml: not valid YAML"),
                       InputError);
}

TEST_CASE("a boolean is true or false: yes, no, on, off and y are refused") {
  const YamlReader in{"my.yaml"};
  CHECK(in.boolean(YAML::Load("true"), "run.plots"));
  CHECK_FALSE(in.boolean(YAML::Load("false"), "run.plots"));
  for (const char* word : {"yes", "no", "on", "off", "y", "n", "True", "1"})
    CHECK_THROWS_WITH_AS(
        in.boolean(YAML::Load(word), "run.plots"),
        doctest::Contains(
            ("my.yaml: run.plots is '" + std::string(word) + "', allowed: true or false").c_str()),
        InputError);
  CHECK_THROWS_WITH_AS(in.boolean(YAML::Load("[true]"), "run.plots"),
                       doctest::Contains("allowed: true or false"), InputError);
  CHECK_FALSE(true_or_false(YAML::Load("yes")).has_value());
  CHECK(true_or_false(YAML::Load("true")) == std::optional<bool>(true));
}

TEST_CASE("an unknown key names the nearest allowed key when it looks like a typo") {
  const YamlReader in{"my.yaml"};
  const std::set<std::string> allowed{"batch_size", "local_steps", "lr", "rounds", "seed"};
  CHECK_THROWS_WITH_AS(in.check_keys(YAML::Load("{bacth_size: 3}"), "worker", allowed),
                       doctest::Contains("my.yaml: unknown key 'worker.bacth_size'; did you mean "
                                         "'worker.batch_size'? (allowed: batch_size, local_steps"),
                       InputError);
  CHECK_THROWS_WITH_AS(in.check_keys(YAML::Load("{rouds: 3}"), "", allowed),
                       doctest::Contains("unknown key 'rouds'; did you mean 'rounds'?"),
                       InputError);
  // Nothing near: only the list.
  CHECK_THROWS_WITH_AS(in.check_keys(YAML::Load("{optimizer: 3}"), "worker", allowed),
                       doctest::Contains("unknown key 'worker.optimizer' (allowed: batch_size"),
                       InputError);
}

TEST_CASE("edit distance counts a swap of neighbours as one edit; typos only are suggested") {
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("run", "run") == 0);
  CHECK(edit_distance("rnu", "run") == 1);
  CHECK(edit_distance("bacth_size", "batch_size") == 1);
  CHECK(edit_distance("kitten", "sitting") == 3);
  const std::vector<std::string> commands{"bench", "chaos", "compare", "run", "server", "sweep"};
  CHECK(closest_name("swep", commands) == std::optional<std::string>("sweep"));
  CHECK(closest_name("severs", commands) == std::optional<std::string>("server"));
  CHECK_FALSE(closest_name("trian", commands));  // three edits from run: not a typo of it
  CHECK_FALSE(closest_name("run", commands));    // itself is no suggestion
  CHECK(did_you_mean("lna", std::vector<std::string>{"global-3", "lan"}) ==
        "; did you mean 'lan'?");
  CHECK(did_you_mean("zzz", std::vector<std::string>{"lan"}).empty());
}
