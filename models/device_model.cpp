#include "models/device_model.hpp"

#include "core/error.hpp"
#include "models/gpt_cuda.hpp"
#include "models/mlp_cuda.hpp"

namespace geotrain::models {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  throw InputError(fmt::format("worker.precision '{}' is unknown (fp32, bf16)", name));
}

const char* precision_name(Precision p) { return p == Precision::kBf16 ? "bf16" : "fp32"; }

std::unique_ptr<DeviceModel> make_device_model(const ModelSpec& spec, Precision precision) {
  if (spec.kind == "gpt") return std::make_unique<GptCuda>(spec.gpt, precision);
  GT_REQUIRE(spec.kind == "mlp", "model.kind '{}' has no device model (mlp, gpt)", spec.kind);
  GT_REQUIRE(precision == Precision::kFp32,
             "worker.precision bf16 trains model.kind gpt only (model.kind is {})", spec.kind);
  return std::make_unique<MlpCuda>(parse_mlp_config(spec.arch));
}

}  // namespace geotrain::models
