#pragma once

// Supervision of actor meshes: a member that dies becomes a MeshFailure for
// the mesh's owner (the controlling rank: rank 0 of a launched job, or the
// process of a local mesh), which a handler can take; otherwise the mesh's
// policy applies.
//
//   meshstore::Supervision s;
//   s.policy = meshstore::FailurePolicy::restart;   // same arguments, <= 3 per minute
//   s.on_failure = [](const meshstore::MeshFailure& f) {
//     std::fprintf(stderr, "%s\n", f.to_string().c_str());
//     return false;                                 // not handled: the policy applies
//   };
//   auto workers = mesh.spawn<worker_actor>(s, "workers", worker).value();

#include <chrono>
#include <functional>
#include <string>

#include "meshstore/status.hpp"

namespace meshstore {

/// A member of a mesh that died: an actor that stopped with an error, or
/// whose process or host went away. A member that stops normally (it
/// quit, exit reason "normal"), a rank that closed its Mesh, and a mesh
/// that is closing are not failures. A value type.
struct MeshFailure {
  /// The mesh's name.
  std::string mesh;
  /// The member's rank in the whole mesh.
  int rank = -1;
  /// Errc::unavailable, with why: "rank 2 of mesh 'workers' went down (...)".
  Status why;
  /// The failure in one line.
  std::string to_string() const { return why.to_string(); }
};

/// What happens to a failure no handler took.
enum class FailurePolicy {
  /// The failure climbs to the Mesh's root handler (MeshOptions::on_failure);
  /// without one, the process logs it and exits with status 1 (fail fast,
  /// as a launched job's ranks should).
  propagate,
  /// The mesh stops: its other members are told to exit, and every call to
  /// it answers Errc::unavailable naming the failure.
  stop,
  /// The member is spawned again with the same arguments, at most
  /// `max_restarts` times within `window`; then the mesh stops. A Mesh
  /// restarts only members in the owner's process (the mesh stops when
  /// another process's member dies); a ProcMesh restarts a member on its own
  /// process, and stops the mesh when that process is gone.
  restart,
};

/// How a mesh is supervised (Mesh::spawn's optional first argument).
struct Supervision {
  /// What happens to a failure on_failure did not take.
  FailurePolicy policy = FailurePolicy::propagate;
  /// restart: at most this many restarts within `window`.
  int max_restarts = 3;
  /// restart: the sliding window over which max_restarts counts.
  std::chrono::milliseconds window{60000};
  /// Called first, on the mesh's caller actor (keep it short, do not block
  /// on calls to the same mesh): true when it handled the failure, and the
  /// policy does not apply.
  std::function<bool(const MeshFailure&)> on_failure;
  /// The mesh that owns this one: the name of a mesh spawned earlier by
  /// the same Mesh or ProcMesh; empty (the default) = the root. A failure
  /// this mesh propagates goes to its owner: the owner's on_failure may
  /// take it; otherwise an owner whose policy is `stop` stops (with every
  /// mesh it owns), and any other owner passes it on to its own owner, up
  /// to the root handler. A mesh whose owner stops, stops with it.
  std::string owner;
};

}  // namespace meshstore
