#pragma once

#include <caf/all.hpp>

namespace meshstore::protocol {

/// Registers the message types of the store's actors and transports with a
/// CAF config (the wire structs of meshstore/protocol/records.hpp and
/// meshstore/transports/wire/region_ref.hpp, the actor handles, and vectors
/// of them), under stable names, so typed interfaces match across
/// processes. Every process running the store's actors calls it.
void add_actor_types(caf::actor_system_config& cfg);

}  // namespace meshstore::protocol
