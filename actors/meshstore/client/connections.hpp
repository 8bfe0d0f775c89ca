#pragma once

// The client's connections to volumes: set up on first use over the
// transport both sides pick, and dropped when a peer goes down.

#include <caf/all.hpp>
#include <string>

#include "meshstore/client/client_state.hpp"

namespace meshstore::client {

// Calls `k` with the connection to volume `id`, setting it up on first use.
void with_volume(client_pointer self, const std::string& id, ConnCallback k);

// Calls `k` with the connection to the volume the strategy picks for us.
void with_home_volume(client_pointer self, ConnCallback k);

// Connects to this client's volume (as with_home_volume) and runs `k` with
// Status() once the fast path's channel to it is open, else with why none
// opens (no volume for this client, the volume down, the channel refused;
// one that failed to open before is opened again).
void await_home_channel(client_pointer self, std::function<void(Status)> k);

// A monitored peer went down: fail what waits on it, forget connections and
// locations through it.
void peer_down(client_pointer self, const caf::down_msg& msg);
// The controller says volume `id` went down (for `reason`): as peer_down,
// for a volume whose process this one is not connected to.
void volume_gone(client_pointer self, const std::string& id, const std::string& reason);

}  // namespace meshstore::client
