#pragma once
// The lookup behind meshstore::ForeignThreadGuard (meshstore/foreign_thread.hpp).
#include <caf/fwd.hpp>

#include "meshstore/foreign_thread.hpp"

namespace meshstore::internal {

/// The actor system (made by an ActorRuntime, alive) whose logger is
/// `logger`; nullptr when there is none.
caf::actor_system* system_of(const caf::logger* logger) noexcept;

}  // namespace meshstore::internal
