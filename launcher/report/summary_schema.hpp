// summary.json's schema (core/run_summary.json), as C++ reads it: the generated names
// (core/run_summary_keys.hpp: summary::field::*, summary::name::* for its objects) and a check of
// a written summary against it (every key of every object named by the schema), for the writer's
// tests and for tools that read summaries written elsewhere.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/run_summary_keys.hpp"

namespace geotrain::summary {

// What is wrong with `s`, a summary.json ("" when nothing is): a key that core/run_summary.json
// does not give the object that holds it, at any depth (per_region's, codec_phases',
// faults', regions_marked_dead's objects), or a nested object of the wrong shape.
std::string check(const nlohmann::json& s);

}  // namespace geotrain::summary
