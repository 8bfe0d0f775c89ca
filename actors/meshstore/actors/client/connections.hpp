#pragma once

// The client's connections to volumes: set up on first use over the
// transport both sides pick, and dropped when a peer goes down.

#include <caf/all.hpp>
#include <string>

#include "meshstore/actors/client/client_state.hpp"

namespace meshstore::actors::client_detail {

// Calls `k` with the connection to volume `id`, setting it up on first use.
void with_volume(client_pointer self, const std::string& id, ConnCallback k);

// Calls `k` with the connection to the volume the strategy picks for us.
void with_home_volume(client_pointer self, ConnCallback k);

// A monitored peer went down: fail what waits on it, forget connections and
// locations through it.
void peer_down(client_pointer self, const caf::down_msg& msg);
// The controller says volume `id` went down (for `reason`): as peer_down,
// for a volume whose process this one is not connected to.
void volume_gone(client_pointer self, const std::string& id, const std::string& reason);

}  // namespace meshstore::actors::client_detail
