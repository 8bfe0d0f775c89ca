#pragma once

// The client's get path: locate the keys, check their records, read their
// objects (or the shards that cover a box) from their volumes.

#include "meshstore/client/client_state.hpp"

namespace meshstore::client {

// Runs a get call: locates its keys (from the cache when it can), reads
// them, and locates again, pinned, when an overwrite or remove raced it.
void handle_get(client_pointer self, GetCall call);

}  // namespace meshstore::client
