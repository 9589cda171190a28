// A model's parameters as one safetensors file (models/safetensors.hpp): one tensor per entry of
// the model's table, under its name and with its shape, and the model's configuration in the
// metadata (format "geotrain", model, seed, parameters, and the MLP's arch or the GPT's sizes).
// What `geotrain export-init` writes of the initialisation, and what a run writes of its global
// model (<run_dir>/model.safetensors, docs/training.md "The end of a run"), so that both read the
// same way (scripts/torch_reference_gpt.py, models::read_safetensors).
//
// Plain functions; writing blocks on the file and throws InputError when it cannot be written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "core/param_table.hpp"
#include "core/span.hpp"
#include "models/model.hpp"
#include "models/model_spec.hpp"

namespace geotrain::models {

// The metadata of a model file of `spec`, initialised from `seed`, with `parameters` elements.
std::map<std::string, std::string> model_metadata(const ModelSpec& spec, uint64_t seed,
                                                  uint64_t parameters);

// Writes `params` (the flat buffer in `table`'s layout, which `model` made) to `file`, with
// model_metadata() plus `extra` (extra keys win). Returns the number of tensors written.
// InputError when params does not have the table's size.
size_t write_model_file(const std::filesystem::path& file, const Model& model,
                        const ParamTable& table, ConstFloatSpan params, const ModelSpec& spec,
                        uint64_t seed, const std::map<std::string, std::string>& extra = {});

}  // namespace geotrain::models
