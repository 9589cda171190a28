// Fuzz target: the sweep loader of `geotrain sweep`, launcher::parse_sweep.
// Input: the YAML text of a sweep, read as if it were in configs/sweeps/ of a scratch folder laid
// out like configs/ (fuzz/launcher_files.hpp), so that `base: ../demo.yaml` names a real base
// config. Contract: only InputError; an accepted sweep has points with distinct labels, a
// baseline among them, and every point's config is YAML. Seeds: configs/sweeps/.
#include <yaml-cpp/yaml.h>

#include <set>

#include "fuzz/launcher_files.hpp"
#include "launcher/sweep/sweep_plan.hpp"

using namespace geotrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto dir = fuzz::launcher_config_dir() / "sweeps";
  const std::string text(reinterpret_cast<const char*>(data), size);
  launcher::SweepPlan plan;
  if (!fuzz::accepts([&] { plan = launcher::parse_sweep(text, "<fuzz>", dir, "fuzz"); })) return 0;
  GT_FUZZ_CHECK(!plan.points.empty(), "an accepted sweep has no points");
  GT_FUZZ_CHECK(plan.baseline < plan.points.size(), "the baseline is not one of the points");
  std::set<std::string> labels;
  for (const auto& p : plan.points) {
    GT_FUZZ_CHECK(labels.insert(p.label).second, "two points share a label");
    (void)YAML::Load(p.config_yaml);  // a point's config must be YAML (throws otherwise: a bug)
  }
  return 0;
}
