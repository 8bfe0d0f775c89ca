#pragma once

// What Mesh and ProcMesh (controller and worker) share about their actor
// runtime: the check of MeshOptions, the RuntimeOptions made from them, and
// how an actor interface reads in an error. Internal; defined in actor_mesh.cpp.

#include <caf/all.hpp>
#include <functional>
#include <string>
#include <vector>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/mesh.hpp"
#include "meshstore/status.hpp"

namespace meshstore::internal {

/// Errc::invalid_argument, prefixed with `context`, unless every timeout is
/// positive and connection_timeout is longer than heartbeat_interval.
Status check_mesh_options(const MeshOptions& options, const std::string& context);

/// A runtime with `options`' threads, heartbeat and connection timeout,
/// the network layer when `network`, and `own_types` (the layer's own
/// messages) registered before the user's add_types.
RuntimeOptions mesh_runtime_options(const MeshOptions& options, bool network,
                                    std::function<void(caf::actor_system_config&)> own_types);

/// An actor interface (its signatures) in words: "(untyped)" when empty.
std::string interface_text(const std::vector<std::string>& sigs);

/// Makes an actor of the registered type `type` (add_actor_type) from
/// `args` on `host` (an actor's context, or the system's
/// dummy_execution_unit() from any thread) and checks that it has
/// `interface`. Errors begin with `what`: Errc::not_found for a type not
/// registered (naming those that are), Errc::invalid_argument for arguments
/// it does not take or another interface (both named).
Result<caf::actor> spawn_named(caf::execution_unit* host, const std::string& type,
                               const std::vector<std::string>& interface, caf::message& args,
                               const std::string& what);

}  // namespace meshstore::internal
