#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "meshstore/status.hpp"

namespace meshstore {

/// Where this process sits in a multi-process run, as launchers describe
/// it: torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
/// MASTER_ADDR, MASTER_PORT), else Open MPI's (OMPI_COMM_WORLD_RANK, _SIZE,
/// _LOCAL_RANK, _LOCAL_SIZE), else Slurm's (SLURM_PROCID, SLURM_NTASKS,
/// SLURM_LOCALID, SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE). MASTER_ADDR
/// and MASTER_PORT are read under every launcher (mpirun and srun do not set
/// them: export them yourself). meshrun sets all of torchrun's.
/// A value type; thread-compatible.
struct LaunchEnv {
  int rank = 0;                   ///< This process's rank among all processes.
  int world_size = 1;             ///< Number of processes in the run.
  int local_rank = 0;             ///< This process's rank among the processes on its host.
  int local_world_size = 1;       ///< Number of processes on this host.
  std::string master_addr;        ///< MASTER_ADDR: the host of rank 0 (never empty when read).
  std::uint16_t master_port = 0;  ///< MASTER_PORT; service_port() counts from it.
  /// Which launcher's variables were used: "torchrun", "openmpi" or "slurm".
  std::string source;

  /// Reads the process environment. Fails with Errc::invalid_argument
  /// naming the variable that is missing or malformed, for example
  /// "LOCAL_RANK is not set (RANK is: torchrun-style launch)".
  static Result<LaunchEnv> from_env();
  /// The same, reading variables through `lookup` (nullptr = unset).
  static Result<LaunchEnv> from_lookup(const std::function<const char*(const char*)>& lookup);

  /// Checks the ranks are consistent (0 <= rank < world_size, ...).
  Status validate() const;

  /// The port of a service rank 0 runs next to MASTER_PORT: the variable
  /// `var` when set (strictly parsed, in [1, 65535]), else MASTER_PORT +
  /// `offset`. Fails with Errc::invalid_argument naming the variable.
  Result<std::uint16_t> service_port(const char* var, int offset) const;
  /// The same, reading `var` through `lookup` (nullptr = unset).
  Result<std::uint16_t> service_port(const char* var, int offset,
                                     const std::function<const char*(const char*)>& lookup) const;
};

}  // namespace meshstore
