// The run folder: `<out_dir>/<YYYYmmdd-HHMMSS>-<name>/`, created fresh for each run (a numeric
// suffix is added when two runs start in the same second), and small helpers to write files
// into it. Layout and file contracts: docs/run-folder.md. Functions touch the file system only;
// no shared state.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>

namespace geotrain::launcher {

// The folder name for a run named `name` started at `when` (local time).
std::string run_folder_name(const std::string& name, std::chrono::system_clock::time_point when);

// Creates `dir` and its parents (nothing when it exists); an InputError naming `what`, the
// folder and the reason when it cannot be (a file in the way, no permission).
void create_output_folder(const std::filesystem::path& dir, const std::string& what);

// Creates out_dir (and parents) and a new, empty run folder in it; returns its path.
// SystemError-free: InputError naming the folder when it cannot be created.
std::filesystem::path create_run_folder(const std::filesystem::path& out_dir,
                                        const std::string& name,
                                        std::chrono::system_clock::time_point when);

// Writes `text` to `file` (replacing it); InputError naming the file when that fails.
void write_text_file(const std::filesystem::path& file, const std::string& text);

}  // namespace geotrain::launcher
