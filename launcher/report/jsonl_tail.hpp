// JsonlTail: reads a JSON-lines file incrementally while another process appends to it.
//
// Each read_new() returns the complete lines added since the last call, parsed; a trailing line
// without its newline yet is kept for the next call. A missing file reads as empty (it may not
// have been created yet); a line that is not valid JSON is skipped and counted (a writer that
// died mid-line must not stop the launcher). Owns only its offset and partial line; not
// thread-safe; never blocks beyond reading the file.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace geotrain::launcher {

class JsonlTail {
 public:
  explicit JsonlTail(std::filesystem::path file) : file_(std::move(file)) {}

  std::vector<nlohmann::json> read_new();
  const std::filesystem::path& file() const { return file_; }
  uint64_t bad_lines() const { return bad_lines_; }

 private:
  std::filesystem::path file_;
  uint64_t offset_ = 0;
  std::string partial_;
  uint64_t bad_lines_ = 0;
};

// Every complete, valid line of a JSONL file at once.
std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& file);

}  // namespace geotrain::launcher
