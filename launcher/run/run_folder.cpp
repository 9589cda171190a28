#include "launcher/run/run_folder.hpp"

#include <ctime>
#include <fstream>
#include <system_error>

#include "core/error.hpp"

namespace geotrain::launcher {

std::string run_folder_name(const std::string& name, std::chrono::system_clock::time_point when) {
  const std::time_t t = std::chrono::system_clock::to_time_t(when);
  std::tm local{};
  ::localtime_r(&t, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &local);
  return std::string(stamp) + "-" + name;
}

void create_output_folder(const std::filesystem::path& dir, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  GT_REQUIRE(!ec, "cannot create {} '{}': {}", what, dir.string(), ec.message());
}

std::filesystem::path create_run_folder(const std::filesystem::path& out_dir,
                                        const std::string& name,
                                        std::chrono::system_clock::time_point when) {
  create_output_folder(out_dir, "the output folder");
  std::error_code ec;
  const auto base = run_folder_name(name, when);
  for (int i = 1; i < 1000; ++i) {
    const auto dir = out_dir / (i == 1 ? base : base + "-" + std::to_string(i));
    // create_directory reports false (no error) when it already exists: then try the next name.
    if (std::filesystem::create_directory(dir, ec)) return dir;
    GT_REQUIRE(!ec, "cannot create the run folder '{}': {}", dir.string(), ec.message());
  }
  GT_REQUIRE(false, "cannot create a run folder for '{}' in '{}': 999 runs in one second", name,
             out_dir.string());
  return {};
}

void write_text_file(const std::filesystem::path& file, const std::string& text) {
  std::ofstream f(file, std::ios::trunc);
  GT_REQUIRE(f.good(), "cannot write '{}'", file.string());
  f << text;
  f.flush();
  GT_REQUIRE(f.good(), "cannot write '{}'", file.string());
}

}  // namespace geotrain::launcher
