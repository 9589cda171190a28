#include "launcher/report/jsonl_tail.hpp"

#include <fstream>

namespace geotrain::launcher {

std::vector<nlohmann::json> JsonlTail::read_new() {
  std::vector<nlohmann::json> out;
  std::ifstream f(file_, std::ios::binary);
  if (!f) return out;
  f.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(f.tellg());
  if (size < offset_) {  // truncated or replaced: start over
    offset_ = 0;
    partial_.clear();
  }
  if (size == offset_) return out;
  f.seekg(static_cast<std::streamoff>(offset_));
  std::string chunk(size - offset_, '\0');
  f.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  chunk.resize(static_cast<std::size_t>(f.gcount()));
  offset_ += chunk.size();
  partial_ += chunk;
  std::size_t start = 0;
  for (std::size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
    const std::string_view line(partial_.data() + start, nl - start);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      ++bad_lines_;
      continue;
    }
    out.push_back(std::move(j));
  }
  partial_.erase(0, start);
  return out;
}

std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& file) {
  JsonlTail t(file);
  return t.read_new();
}

}  // namespace geotrain::launcher
