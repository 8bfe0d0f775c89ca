#pragma once

// The strategy's typed interface: which volume a client writes to (and
// prefers to read from). The policy is a function, so singleton, per-rank,
// per-host and user-defined strategies share one actor.

#include <caf/all.hpp>
#include <functional>
#include <string>
#include <vector>

#include "meshstore/actors/atoms.hpp"
#include "meshstore/actors/storage_volume_actor.hpp"
#include "meshstore/result.hpp"
#include "meshstore/wire/control.hpp"

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

/// The policy named `name` ("singleton"); Errc::invalid_argument otherwise.
Result<StrategyPolicy> policy_by_name(const std::string& name);

/// Spawns a strategy actor running `policy`.
strategy_actor spawn_strategy(caf::actor_system& sys, StrategyPolicy policy);

}  // namespace meshstore::actors
