#pragma once

// The controller module's interface: spawning the controller, the strategy
// and the directory, the built-in placement strategies, and the rules they
// apply (their messages: protocol/controller_actor.hpp, strategy_actor.hpp,
// directory_actor.hpp).

#include <caf/all.hpp>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "meshstore/protocol/controller_actor.hpp"
#include "meshstore/protocol/directory_actor.hpp"
#include "meshstore/protocol/strategy_actor.hpp"
#include "meshstore/status.hpp"

namespace meshstore::controller {

/// How a controller runs.
struct ControllerOptions {
  /// How long a rebuild of the index waits for the volumes its records
  /// name (docs/reliability.md, "The controller's loss"); commits are
  /// refused meanwhile.
  std::chrono::milliseconds rebuild_grace{2000};
  /// Volumes that keep each whole key (StoreOptions::placement.replicas).
  std::uint32_t replicas = 1;
  /// The share of the time making copies again after a volume died may
  /// take (StoreOptions::placement.repair_share), in (0, 1].
  double repair_share = 0.25;
  /// A standby's controller, taking over a store that existed: until a
  /// volume of that store reports (one that keeps records, or knew volumes
  /// not registered here), misses and
  /// commits wait as during a rebuild, at most rebuild_grace, so that no
  /// process, not even one that never knew the store, reads it empty.
  bool took_over = false;
};

/// Spawns a controller.
protocol::controller_actor spawn_controller(caf::actor_system& sys, ControllerOptions options = {});

/// True when `key` lies under `prefix` by whole components: "a.b" is under
/// "a" and "a.b" but not under "a.bc"; '/' and '.' separate components; an
/// empty prefix matches everything.
bool key_matches_prefix(const std::string& key, const std::string& prefix) noexcept;

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
protocol::strategy_actor spawn_strategy(caf::actor_system& sys, StrategyPolicy policy);

/// Spawns a directory handing out `controller` and `strategy`.
protocol::directory_actor spawn_directory(caf::actor_system& sys,
                                          protocol::controller_actor controller,
                                          protocol::strategy_actor strategy,
                                          std::string strategy_name);

/// Spawns a relay directory (protocol::relay_directory_actor) for a
/// strategy named `strategy_name`: it hands out whichever controller and
/// strategy were handed to it last, while that controller lives.
protocol::relay_directory_actor spawn_relay_directory(caf::actor_system& sys,
                                                      std::string strategy_name);

/// True when two meshstore versions can talk ("MAJOR.MINOR.PATCH": the same
/// major and minor).
bool versions_compatible(const std::string& a, const std::string& b);

}  // namespace meshstore::controller
