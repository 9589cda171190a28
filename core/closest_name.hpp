// closest_name(): the "did you mean" of an error message. Of the names a user could have meant
// (config keys, subcommands, WAN profiles), the one nearest to what they typed, by edit distance
// with transpositions (`bacth_size` is one edit from `batch_size`), when it is near enough to be
// a typo: at most a third of the word's length, and at least one edit.
//
// Header-only; pure functions, thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace geotrain {

// Insertions, deletions, substitutions and swaps of two neighbouring characters that turn `a`
// into `b` (the optimal string alignment distance).
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  // d[i][j]: distance between the first i characters of a and the first j of b; three rows.
  std::vector<std::size_t> before(b.size() + 1), prev(b.size() + 1), row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      row[j] = std::min({prev[j] + 1, row[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        row[j] = std::min(row[j], before[j - 2] + 1);
    }
    before.swap(prev);
    prev.swap(row);
  }
  return prev[b.size()];
}

// The name in `names` nearest to `word`, when it is within max(1, |word| / 3) edits and is not
// `word` itself; the first of equally near ones. Empty when none is that near.
template <typename Names>
std::optional<std::string> closest_name(std::string_view word, const Names& names) {
  const std::size_t limit = std::max<std::size_t>(1, word.size() / 3);
  std::optional<std::string> best;
  std::size_t best_distance = limit + 1;
  for (const auto& name : names) {
    const std::string_view n(name);
    // A length difference beyond the limit is beyond it in edits too: skip the table.
    const std::size_t gap =
        n.size() > word.size() ? n.size() - word.size() : word.size() - n.size();
    if (n == word || gap >= best_distance) continue;
    const std::size_t d = edit_distance(word, n);
    if (d < best_distance) {
      best_distance = d;
      best = std::string(n);
    }
  }
  return best;
}

// "; did you mean 'batch_size'?" (with `prefix` before the name, e.g. "worker."), or "" when no
// name is near enough: for appending to an error message.
template <typename Names>
std::string did_you_mean(std::string_view word, const Names& names, std::string_view prefix = "") {
  const auto best = closest_name(word, names);
  if (!best) return "";
  return "; did you mean '" + std::string(prefix) + *best + "'?";
}

}  // namespace geotrain
