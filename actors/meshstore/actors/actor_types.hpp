#pragma once

#include <caf/all.hpp>

namespace meshstore::actors {

/// Registers the message types of the store's actors and transports with a
/// CAF config, under stable names, so typed interfaces match across
/// processes.
void add_actor_types(caf::actor_system_config& cfg);

}  // namespace meshstore::actors
