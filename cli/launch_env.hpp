// Where a process learns its place from a cluster launcher. This is the one place geotrain reads
// environment variables (STYLE.md, principle 7): when `--region` / `--rank` are not given, the
// process's rank among the processes of its kind comes from the first of
//   SLURM_PROCID (srun), OMPI_COMM_WORLD_RANK (Open MPI mpirun), PMI_RANK (MPICH, Intel MPI),
//   PMIX_RANK (PMIx launchers), RANK (torchrun, Kubernetes JobSet / indexed Jobs set it too),
//   JOB_COMPLETION_INDEX (Kubernetes indexed Jobs)
// that is set. Servers map rank r to region r; workers map global rank g region by region in the
// config's order (RegionWorkers::place: with 2 workers per region, g / 2 and g % 2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace geotrain::cli {

struct LaunchRank {
  uint32_t rank;
  std::string variable;  // which variable it came from, for the log line
};

// The rank from the environment, if a launcher set one. InputError when the variable is set but
// is not a non-negative integer.
std::optional<LaunchRank> rank_from_environment();

}  // namespace geotrain::cli
