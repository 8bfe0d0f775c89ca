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
#include "meshstore/status.hpp"

namespace meshstore::protocol {

using strategy_actor = caf::typed_actor<
    caf::replies_to<register_volume_atom, wire::VolumeInfo,
                    storage_volume_actor>::with<caf::ok_atom>,
    // The volume for this client (Errc::unavailable if none fits).
    caf::replies_to<select_atom, wire::ClientInfo>::with<wire::VolumeInfo, storage_volume_actor>>;

}  // namespace meshstore::protocol
