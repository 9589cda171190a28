#include "cli/launch_env.hpp"

#include <charconv>
#include <cstdlib>
#include <string_view>

#include "core/error.hpp"

namespace geotrain::cli {

std::optional<LaunchRank> rank_from_environment() {
  for (const char* name : {"SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "RANK",
                           "JOB_COMPLETION_INDEX"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    const std::string_view text(value);
    uint32_t rank = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), rank);
    GT_REQUIRE(ec == std::errc{} && end == text.data() + text.size(),
               "environment variable {}='{}' is not a process rank (a non-negative integer)", name,
               text);
    return LaunchRank{rank, name};
  }
  return std::nullopt;
}

}  // namespace geotrain::cli
