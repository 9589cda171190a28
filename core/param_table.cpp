#include "core/param_table.hpp"

#include <set>

#include "core/error.hpp"

namespace geotrain {

bool glob_match(std::string_view pattern, std::string_view name) {
  // Iterative matcher with single backtrack point for the last '*': linear in practice.
  size_t p = 0, n = 0, star = std::string_view::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p, ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

namespace {
// FNV-1a, 64 bit: stable across builds and platforms (unlike std::hash).
void fnv(uint64_t& h, const void* data, size_t n) {
  auto* b = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= 0x100000001b3ull;
  }
}
}  // namespace

ParamTable::ParamTable(const std::vector<TensorSpec>& tensors,
                       const std::vector<std::string>& critical_globs) {
  std::set<std::string, std::less<>> seen;
  uint64_t offset = 0;
  hash_ = 0xcbf29ce484222325ull;
  for (const auto& t : tensors) {
    GT_REQUIRE(!t.name.empty(), "parameter table: a tensor has an empty name");
    GT_REQUIRE(seen.insert(t.name).second, "parameter table: tensor '{}' appears twice", t.name);
    GT_REQUIRE(t.size > 0 && t.size <= (uint64_t{1} << 36),
               "parameter table: tensor '{}' has size {}, must be in [1, 2^36]", t.name, t.size);
    GT_REQUIRE(t.cols == 0 || t.size % t.cols == 0,
               "parameter table: tensor '{}' of {} elements is not a matrix of {} columns", t.name,
               t.size, t.cols);
    TensorInfo info{t.name, offset, t.size, false, t.cols};
    for (const auto& g : critical_globs) info.critical = info.critical || glob_match(g, t.name);
    fnv(hash_, t.name.data(), t.name.size() + 0);
    fnv(hash_, "\0", 1);
    fnv(hash_, &t.size, sizeof t.size);
    uint8_t c = info.critical ? 1 : 0;
    fnv(hash_, &c, 1);
    offset += t.size;
    tensors_.push_back(std::move(info));
  }
  values_.assign(offset, 0.0f);
}

FloatSpan ParamTable::tensor(std::string_view name) {
  for (const auto& t : tensors_)
    if (t.name == name) return FloatSpan(values_).subspan(t.offset, t.size);
  GT_REQUIRE(false, "parameter table: no tensor named '{}'", name);
  return {};
}

std::vector<uint8_t> ParamTable::critical_mask(uint64_t begin, uint64_t end) const {
  GT_ASSERT(begin <= end && end <= values_.size(), "mask range [{}, {}) outside {}", begin, end,
            values_.size());
  std::vector<uint8_t> mask(end - begin, 0);
  for (const auto& t : tensors_) {
    if (!t.critical) continue;
    uint64_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.size);
    for (uint64_t i = lo; i < hi; ++i) mask[i - begin] = 1;
  }
  return mask;
}

std::vector<TensorPiece> ParamTable::pieces(uint64_t begin, uint64_t end) const {
  GT_REQUIRE(begin <= end && end <= values_.size(),
             "parameter table: range [{}, {}) lies outside the {} parameters", begin, end,
             values_.size());
  std::vector<TensorPiece> out;
  const auto add = [&](uint64_t lo, uint64_t hi, const TensorInfo& t, uint64_t cols) {
    if (lo < hi)
      out.push_back(
          {lo - begin, hi - lo, t.critical, cols, static_cast<size_t>(&t - tensors_.data())});
  };
  for (const auto& t : tensors_) {
    const uint64_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.size);
    if (lo >= hi) continue;
    // A matrix cut inside a row: its whole rows are a matrix, the partial rows before and
    // after them are not.
    const uint64_t first = t.cols ? t.offset + (lo - t.offset + t.cols - 1) / t.cols * t.cols : hi;
    const uint64_t last = t.cols ? t.offset + (hi - t.offset) / t.cols * t.cols : hi;
    if (first >= last) {
      add(lo, hi, t, 0);
      continue;
    }
    add(lo, first, t, 0);
    add(first, last, t, t.cols);
    add(last, hi, t, 0);
  }
  return out;
}

std::vector<ElementRange> ParamTable::critical_ranges() const {
  std::vector<ElementRange> out;
  for (const auto& t : tensors_) {
    if (!t.critical) continue;
    if (!out.empty() && out.back().end() == t.offset)
      out.back().count += t.size;
    else
      out.push_back({t.offset, t.size});
  }
  return out;
}

}  // namespace geotrain
