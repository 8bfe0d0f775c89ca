#pragma once

// Streamed reads: following a writer's progress on a state dict and copying
// each object as soon as it is filled.

#include <cstdint>
#include <string>
#include <vector>

#include "meshstore/client/client_state.hpp"

namespace meshstore::client {

// Subscribes to the stream of a state dict at the controller and follows
// it: answers StreamKind::committed (nothing to follow; read it as usual)
// or StreamKind::streaming once every object has been read.
void handle_stream(client_pointer self, StreamCall call);

// The controller's news of the stream of `key`: records filled, and how it
// ended (StreamEnd) with the writer's reason when it aborted.
void stream_event(client_pointer self, const std::string& key,
                  const std::vector<std::uint64_t>& filled, std::uint32_t end,
                  const std::string& why);

// The controller is gone: every followed stream fails with `why`.
void controller_gone(client_pointer self, const std::string& why);

}  // namespace meshstore::client
