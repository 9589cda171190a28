// Reading the deployment config in the binary that wires everything together: the model section
// (an MLP's model.arch, a GPT's preset and sizes) is expanded into model.tensors, which is what
// the server
// (which knows nothing of models) reads. Every process started from the same file therefore
// derives the same parameter table.
#pragma once

#include <filesystem>
#include <string>

namespace geotrain::cli {

// The config file's text, with model.tensors filled in from the model section when absent.
// InputError when the file cannot be read or is not YAML, or when the model section is invalid.
std::string resolved_config_text(const std::filesystem::path& file);

// The same for config text already read (`source` names it in messages), e.g. a config with
// `--set` overrides applied (launcher/config_overrides.hpp).
std::string resolved_config_text(const std::string& text, const std::string& source);

}  // namespace geotrain::cli
