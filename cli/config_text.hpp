// Reading the deployment config in the binary that wires everything together: the model section
// (an MLP's model.arch, a GPT's preset and sizes) is expanded into model.tensors, which is what
// the server
// (which knows nothing of models) reads. Every process started from the same file therefore
// derives the same parameter table.
#pragma once

#include <filesystem>
#include <string>

namespace geotrain::cli {

// InputError unless `file` is a regular file: "does not exist", or for a folder, that it is one
// and the YAML files it holds (`geotrain run configs` means one of them).
void require_config_file(const std::filesystem::path& file);

// A file shipped in the source tree (`configs/demo.yaml`, `scripts/plot_run.py`): next to the
// working directory first, then where this binary was built from; `relative` when neither has it.
std::filesystem::path shipped_file(const std::filesystem::path& relative);

// The config file's text, with model.tensors filled in from the model section when absent.
// InputError when the file cannot be read or is not YAML, when a key is written twice, when the
// model section is invalid, or when a model.critical glob matches none of the model's tensors.
std::string resolved_config_text(const std::filesystem::path& file);

// The same for config text already read (`source` names it in messages), e.g. a config with
// `--set` overrides applied (core/config_overrides.hpp).
std::string resolved_config_text(const std::string& text, const std::string& source);

// What `geotrain run`, `chaos` and `serve` check before they start anything: the worker's and
// the server's parsers read the config as those processes will. `security.curve: auto` (the
// launcher's default, which it resolves to true or false for its children, both of which they
// take) is read as false here; the launcher checks the rest of the security section itself.
// InputError naming the key, as the processes would.
void check_launch_config(const std::string& text, const std::string& source);

}  // namespace geotrain::cli
