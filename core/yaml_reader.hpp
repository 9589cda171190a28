// YamlReader: strict reading of YAML config values, with errors that name the file, the key,
// the value and what is allowed (InputError). Unknown keys are errors, never ignored (with the
// nearest allowed key as a "did you mean"); a key written twice in one mapping is an error
// (parse_yaml()); booleans are `true` or `false`, not YAML 1.1's yes/no/on/off.
//
// Holds only the source name used in messages. Header-only; stateless calls, thread-safe.
#pragma once

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/closest_name.hpp"
#include "core/error.hpp"

namespace geotrain {

namespace detail {
// Follows the parser's events through one document and refuses a key that a mapping has twice.
// Events, not the node tree: an alias shares its anchor's node, and walking the tree would visit
// it once per alias (exponentially often in a "billion laughs" document).
class DuplicateKeyCheck : public YAML::EventHandler {
 public:
  explicit DuplicateKeyCheck(const std::string& source) : source_(source) {}

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { node(mark, nullptr); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { node(mark, nullptr); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string& value) override {
    node(mark, &value);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    node(mark, nullptr);
    open_.emplace_back(false);
  }
  void OnSequenceEnd() override { open_.pop_back(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    node(mark, nullptr);
    open_.emplace_back(true);
  }
  void OnMapEnd() override { open_.pop_back(); }

 private:
  struct Collection {
    explicit Collection(bool is_mapping) : mapping(is_mapping) {}
    bool mapping;
    bool at_key = true;                // a mapping's next node is a key (else that key's value)
    std::string key;                   // the key whose value is being read
    std::map<std::string, int> lines;  // scalar key -> line (1-based) it was first written on
  };

  // A node (scalar, alias, null or collection) starts inside the innermost open collection.
  void node(const YAML::Mark& mark, const std::string* scalar) {
    if (open_.empty() || !open_.back().mapping) return;
    Collection& m = open_.back();
    m.at_key = !m.at_key;
    if (m.at_key) return;  // a value
    m.key = scalar ? *scalar : "?";
    if (!scalar) return;  // a complex or null key: the section's parser refuses it by name
    const int line = mark.line + 1;
    const auto [first, fresh] = m.lines.emplace(*scalar, line);
    if (fresh) return;
    std::string path;
    for (const auto& c : open_)
      path += c.mapping ? (path.empty() ? "" : ".") + c.key : std::string("[]");
    GT_REQUIRE(false,
               "{}: key '{}' is written twice ({}); a key may appear once in a mapping (YAML "
               "readers disagree on which one counts): delete one",
               source_, path,
               first->second == line ? fmt::format("both on line {}", line)
                                     : fmt::format("lines {} and {}", first->second, line));
  }

  const std::string& source_;
  std::vector<Collection> open_;
};
}  // namespace detail

// Parses `text` as YAML (its first document, as YAML::Load), refusing what YAML::Load lets pass
// silently: a key written twice in one mapping (yaml-cpp keeps the first, Python's yaml the
// last), with an InputError naming `source`, the key's dotted path and both lines. InputError
// naming `source` when the text is not YAML.
inline YAML::Node parse_yaml(std::string_view text, const std::string& source) {
  YAML::Node root;
  bool second_document = false;
  try {
    root = YAML::Load(std::string(text));
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    detail::DuplicateKeyCheck check(source);
    parser.HandleNextDocument(check);
    // YAML::Load reads the first document only: the keys of a second one would be dropped
    // without a word.
    second_document = parser.HandleNextDocument(check);
  } catch (const YAML::Exception& e) {
    GT_REQUIRE(false, "{}: not valid YAML: {}", source, e.what());
  }
  GT_REQUIRE(!second_document,
             "{}: holds more than one YAML document (a '---' after the first); only the first "
             "would be read",
             source);
  return root;
}

// A boolean written as `true` or `false` (YAML 1.2's plain spelling); empty for anything else,
// including yaml-cpp's other spellings (yes, no, on, off, y, n, True, ...), which YAML 1.2
// readers take for strings: a typo such as `overlap: yes` is then an error, not a silent true.
inline std::optional<bool> true_or_false(const YAML::Node& node) {
  if (!node.IsScalar()) return std::nullopt;
  if (node.Scalar() == "true") return true;
  if (node.Scalar() == "false") return false;
  return std::nullopt;
}

// For a loader's function-try-block: a yaml-cpp exception that escaped the loader's own checks
// (a node of one kind read as another: BadSubscript, InvalidNode, BadConversion) as an InputError
// naming the source and, where yaml-cpp knows it, the line. Loaders still check what they read
// and say what is allowed; this only keeps their contract (bad input throws InputError) where a
// check is missing (fuzz/ found several).
inline InputError yaml_input_error(std::string_view source, const YAML::Exception& e) {
  return InputError(fmt::format("{}: not a valid config: {}", source, e.what()));
}

class YamlReader {
 public:
  explicit YamlReader(std::string source) : source_(std::move(source)) {}
  const std::string& source() const { return source_; }

  // Parses `text` as YAML whose root must be a mapping (InputError naming the source otherwise),
  // with no key written twice (parse_yaml()).
  YAML::Node load_mapping(std::string_view text, const std::string& what = "the config") const {
    const YAML::Node root = parse_yaml(text, source_);
    GT_REQUIRE(root.IsMap(), "{}: {} must be a mapping", source_, what);
    return root;
  }

  // The deployment config every process reads: a mapping of these sections only. Each process
  // then reads its own sections strictly and leaves the others to their owners.
  YAML::Node load_deployment_config(std::string_view text) const {
    YAML::Node root = load_mapping(text);
    check_keys(root, "", {"regions", "model", "server", "worker", "netsim", "run", "security"});
    return root;
  }

  // `node` must be a mapping whose keys are all in `allowed`.
  void check_keys(const YAML::Node& node, const std::string& where,
                  const std::set<std::string>& allowed) const {
    GT_REQUIRE(node.IsMap(), "{}: '{}' must be a mapping", source_, where);
    for (const auto& kv : node) {
      // A complex key (`? [a, b]: x`, `{a: 1}: x`) is not a name: refuse it here, not with
      // yaml-cpp's BadConversion below (found by fuzz/run_config.cpp).
      GT_REQUIRE(kv.first.IsScalar(), "{}: '{}' has a key that is not a plain name ({})", source_,
                 where.empty() ? "the top level" : where, YAML::Dump(kv.first));
      const auto key = kv.first.as<std::string>();
      if (allowed.count(key)) continue;
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      const std::string prefix = where.empty() ? "" : where + ".";
      // The guess first: the list of allowed keys can be long.
      const std::string guess = did_you_mean(key, allowed, prefix);
      GT_REQUIRE(false, "{}: unknown key '{}{}'{} (allowed: {})", source_, prefix, key, guess,
                 list);
    }
  }

  // A number in [lo, hi].
  template <typename T>
  T number(const YAML::Node& node, const std::string& key, T lo, T hi) const {
    T value{};
    bool ok = node.IsScalar();
    if (ok) {
      try {
        value = node.as<T>();
      } catch (const YAML::Exception&) {
        ok = false;
      }
    }
    // yaml-cpp reads "-1" as a huge unsigned; refuse a sign on unsigned keys explicitly.
    if (ok && std::is_unsigned_v<T> && node.Scalar().find('-') != std::string::npos) ok = false;
    GT_REQUIRE(ok, "{}: {} is '{}', allowed: a number in [{}, {}]", source_, key, YAML::Dump(node),
               lo, hi);
    GT_REQUIRE(value >= lo && value <= hi, "{}: {} is {}, allowed: [{}, {}]", source_, key, value,
               lo, hi);
    return value;
  }

  std::string string(const YAML::Node& node, const std::string& key) const {
    GT_REQUIRE(node.IsScalar(), "{}: {} must be a string, not '{}'", source_, key,
               YAML::Dump(node));
    return node.as<std::string>();
  }

  // A string from a fixed set.
  std::string choice(const YAML::Node& node, const std::string& key,
                     const std::set<std::string>& allowed) const {
    std::string value = string(node, key);
    if (!allowed.count(value)) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      GT_REQUIRE(false, "{}: {} is '{}', allowed: {}", source_, key, value, list);
    }
    return value;
  }

  // `true` or `false` only (true_or_false()).
  bool boolean(const YAML::Node& node, const std::string& key) const {
    const auto value = true_or_false(node);
    GT_REQUIRE(value.has_value(), "{}: {} is '{}', allowed: true or false", source_, key,
               YAML::Dump(node));
    return *value;
  }

  std::vector<std::string> strings(const YAML::Node& node, const std::string& key) const {
    GT_REQUIRE(node.IsSequence(), "{}: {} must be a list of strings", source_, key);
    std::vector<std::string> out;
    for (const auto& n : node) out.push_back(string(n, key + "[]"));
    return out;
  }

 private:
  std::string source_;
};

}  // namespace geotrain
