#pragma once

// The client's put path: stage at the home volume, write over the
// transport, commit at the controller (streamed to readers when asked).

#include "meshstore/actors/client/client_state.hpp"

namespace meshstore::actors::client_detail {

// Runs a put call: its items' bytes to this client's volume, then one
// commit of all of them.
void handle_put(client_pointer self, PutCall call);

}  // namespace meshstore::actors::client_detail
