#pragma once
// What actor_mesh.cpp needs of a caller's requests (mesh_requests.cpp).
#include <memory>

#include "meshstore/actor_mesh.hpp"

namespace meshstore::internal {

/// A caller's requests, with their companion spawned on `sys`.
std::shared_ptr<MeshCaller::Requests> make_requests(caf::actor_system& sys);
/// Whether this thread is delivering a message to `rq`'s companion (which
/// cannot be stopped from here: its enqueue holds the lock that takes).
bool delivering_here(const MeshCaller::Requests& rq);
/// Stops a companion (what its disconnect(), declared but not built in CAF
/// 0.17.6, would do): its enqueue handler goes, then it terminates.
void stop_companion(const caf::strong_actor_ptr& companion);

}  // namespace meshstore::internal
