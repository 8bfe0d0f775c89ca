#pragma once

// The client's put path: stage at the home volume, write over the
// transport, commit at the controller (streamed to readers when asked).

#include "meshstore/actors/client/client_state.hpp"

namespace meshstore::actors::client_detail {

// Runs a put call: its items' bytes to this client's volume, then one
// commit of all of them.
void handle_put(client_pointer self, PutCall call);

// What the caller's thread did with a spare it took off the fast path's
// shelf (store_spare_atom): committed it over the ring (records and
// versions for the cache; the layout is staged again for the next put),
// did not use it (given back), or lost it (the ring failed with the commit
// on its way: neither used again nor given back).
void spare_used(client_pointer self, SpareUse& use);

// The client is going away for `reason`: gives every spare staging back
// to its volume (free at once rather than after the volume's orphan grace),
// those still being staged as their answers come, then quits; within
// ClientConfig::kCloseSparesWait at most. Called again by each answer.
void close_spares(client_pointer self, const caf::error& reason);

}  // namespace meshstore::actors::client_detail
