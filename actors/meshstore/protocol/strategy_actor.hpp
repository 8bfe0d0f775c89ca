#pragma once

// The strategy's typed interface: which volume a client writes to (and
// prefers to read from). The policy is a function, so singleton, per-rank,
// per-host and user-defined strategies share one actor.

#include <caf/all.hpp>
#include <functional>
#include <string>
#include <vector>

#include "meshstore/protocol/atoms.hpp"
#include "meshstore/protocol/records.hpp"
#include "meshstore/protocol/storage_volume_actor.hpp"
#include "meshstore/result.hpp"

namespace meshstore::actors {

using strategy_actor = caf::typed_actor<
    caf::replies_to<register_volume_atom, wire::VolumeInfo,
                    storage_volume_actor>::with<caf::ok_atom>,
    // The volume for this client (Errc::unavailable if none fits).
    caf::replies_to<select_atom, wire::ClientInfo>::with<wire::VolumeInfo, storage_volume_actor>>;

/// A placement policy: picks a volume id for a client among the registered
/// volumes (in registration order).
using StrategyPolicy = std::function<Result<std::string>(const wire::ClientInfo&,
                                                         const std::vector<wire::VolumeInfo>&)>;

/// Every client uses the first registered volume.
StrategyPolicy singleton_policy();

/// The built-in strategies, by name:
/// - "singleton": one volume, in the server process; every client uses it.
/// - "controller_colocated": the server process hosts every volume;
///   client rank r uses volume r % count.
/// - "per_host": the process with local rank 0 on each host hosts that
///   host's volume; every client uses the volume of its own host.
/// - "per_local_rank": every rank hosts a volume; a client uses the volume of
///   its own host and local rank (its own process).
const std::vector<std::string>& strategy_names();

/// The policy named `name`; Errc::invalid_argument listing the names otherwise.
Result<StrategyPolicy> policy_by_name(const std::string& name);

/// Where a process sits, for placing volumes.
struct ProcessRole {
  /// The process runs the controller (embedded, rank 0, meshstore serve).
  bool is_server = false;
  /// Its local rank; -1 when it is not a rank (meshstore serve, CLI tools).
  int local_rank = -1;
  std::string host;
};

/// The volumes strategy `name` places in a process with `role`
/// (`server_volumes` is how many a server hosts, where the strategy puts
/// volumes on the server). Ids are unique across a store whose hosts have
/// unique names.
std::vector<wire::VolumeInfo> volumes_for(const std::string& name, const ProcessRole& role,
                                          int server_volumes);

/// Spawns a strategy actor running `policy`.
strategy_actor spawn_strategy(caf::actor_system& sys, StrategyPolicy policy);

}  // namespace meshstore::actors
