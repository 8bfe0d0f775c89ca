#pragma once

// The client's removals: one key, a batch, or every key under prefixes.

#include "meshstore/client/client_state.hpp"

namespace meshstore::client {

// Runs a remove call at the controller, forgetting the keys' cached
// locations first.
void handle_remove(client_pointer self, RemoveCall call);

}  // namespace meshstore::client
