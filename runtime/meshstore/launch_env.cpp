#include "meshstore/launch_env.hpp"

#include <cerrno>
#include <cstdlib>
#include <limits>

#include "meshstore/internal/parse_int.hpp"

namespace meshstore {
namespace {

using Lookup = std::function<const char*(const char*)>;

Status bad(const std::string& m) {
  return Status(Errc::invalid_argument, "launch environment: " + m);
}

// Parses a whole decimal integer in [lo, hi]; anything else names the variable.
Result<long> parse_int(const char* name, const char* text, long lo, long hi) {
  auto v = internal::parse_int(name, text, lo, hi);
  if (!v.ok()) return v.status().with_context("launch environment");
  return v;
}

constexpr long kMaxRanks = 1 << 20;

// Slurm's SLURM_TASKS_PER_NODE looks like "4(x2),3": the first count is this
// allocation's first node; SLURM_NTASKS_PER_NODE, when set, is one integer.
Result<long> slurm_local_size(const Lookup& get) {
  if (const char* n = get("SLURM_NTASKS_PER_NODE")) {
    return parse_int("SLURM_NTASKS_PER_NODE", n, 1, kMaxRanks);
  }
  const char* t = get("SLURM_TASKS_PER_NODE");
  if (t == nullptr) return bad("SLURM_NTASKS_PER_NODE and SLURM_TASKS_PER_NODE are both unset");
  std::string first(t);
  first = first.substr(0, first.find_first_of("(,"));
  return parse_int("SLURM_TASKS_PER_NODE", first.c_str(), 1, kMaxRanks);
}

struct Names {
  const char* source;
  const char* rank;
  const char* world;
  const char* local_rank;
  const char* local_world;
};

constexpr Names kTorchrun{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
constexpr Names kOpenMpi{"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                         "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"};
constexpr Names kSlurm{"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr};

}  // namespace

Result<LaunchEnv> LaunchEnv::from_lookup(const Lookup& get) {
  const Names* names = nullptr;
  for (const Names* n : {&kTorchrun, &kOpenMpi, &kSlurm}) {
    if (get(n->rank) != nullptr) {
      names = n;
      break;
    }
  }
  if (names == nullptr) {
    return bad(
        "RANK is not set (nor OMPI_COMM_WORLD_RANK nor SLURM_PROCID): start the program under "
        "meshrun, torchrun, mpirun or srun, or set RANK, WORLD_SIZE, LOCAL_RANK, "
        "LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT");
  }
  const std::string why =
      std::string(" (") + names->rank + " is: " + names->source + "-style launch)";
  auto need = [&](const char* var, long lo, long hi) -> Result<long> {
    const char* v = get(var);
    if (v == nullptr) return bad(std::string(var) + " is not set" + why);
    return parse_int(var, v, lo, hi);
  };
  LaunchEnv env;
  env.source = names->source;
  auto rank = need(names->rank, 0, kMaxRanks);
  if (!rank.ok()) return rank.status();
  auto world = need(names->world, 1, kMaxRanks);
  if (!world.ok()) return world.status();
  auto local_rank = need(names->local_rank, 0, kMaxRanks);
  if (!local_rank.ok()) return local_rank.status();
  auto local_world =
      names->local_world ? need(names->local_world, 1, kMaxRanks) : slurm_local_size(get);
  if (!local_world.ok()) return local_world.status();
  env.rank = static_cast<int>(*rank);
  env.world_size = static_cast<int>(*world);
  env.local_rank = static_cast<int>(*local_rank);
  env.local_world_size = static_cast<int>(*local_world);

  const char* addr = get("MASTER_ADDR");
  if (addr == nullptr || *addr == '\0') return bad("MASTER_ADDR is not set" + why);
  env.master_addr = addr;
  auto port = need("MASTER_PORT", 1, 65535);
  if (!port.ok()) return port.status();
  env.master_port = static_cast<std::uint16_t>(*port);
  MESHSTORE_RETURN_IF_ERROR(env.validate());
  return env;
}

Result<LaunchEnv> LaunchEnv::from_env() {
  return from_lookup([](const char* name) -> const char* { return std::getenv(name); });
}

Result<std::uint16_t> LaunchEnv::service_port(const char* var, int offset,
                                              const Lookup& get) const {
  if (const char* v = get(var); v != nullptr && *v != '\0') {
    auto port = parse_int(var, v, 1, 65535);
    if (!port.ok()) return port.status();
    return static_cast<std::uint16_t>(*port);
  }
  const long port = static_cast<long>(master_port) + offset;
  if (port < 1 || port > 65535) {
    return bad("MASTER_PORT + " + std::to_string(offset) + " = " + std::to_string(port) +
               " is not a port; set " + var);
  }
  return static_cast<std::uint16_t>(port);
}

Result<std::uint16_t> LaunchEnv::service_port(const char* var, int offset) const {
  return service_port(var, offset,
                      [](const char* name) -> const char* { return std::getenv(name); });
}

Status LaunchEnv::validate() const {
  if (world_size < 1) return bad("world size " + std::to_string(world_size) + " is below 1");
  if (rank < 0 || rank >= world_size) {
    return bad("rank " + std::to_string(rank) + " is outside [0, " + std::to_string(world_size) +
               ")");
  }
  if (local_world_size < 1 || local_world_size > world_size) {
    return bad("local world size " + std::to_string(local_world_size) + " is outside [1, " +
               std::to_string(world_size) + "]");
  }
  if (local_rank < 0 || local_rank >= local_world_size) {
    return bad("local rank " + std::to_string(local_rank) + " is outside [0, " +
               std::to_string(local_world_size) + ")");
  }
  return Status();
}

namespace internal {

Result<long> parse_int(const char* name, const char* text, long lo, long hi) {
  auto bad = [](const std::string& m) { return Status(Errc::invalid_argument, m); };
  if (text == nullptr) return bad(std::string(name) + " is not set");
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE) {
    return bad(std::string(name) + "='" + text + "' is not an integer");
  }
  if (v < lo || v > hi) {
    return bad(std::string(name) + "=" + text + " is outside [" + std::to_string(lo) + ", " +
               std::to_string(hi) + "]");
  }
  return v;
}

}  // namespace internal
}  // namespace meshstore
