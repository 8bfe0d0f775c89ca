#pragma once

// A store stood up across a ProcMesh by its controller: the controller
// creates the store (controller actor, strategy, the volumes its strategy
// places there), and every process of the mesh joins it through two
// meshes: "meshstore.volumes", hosting the volumes the strategy places in
// it (per_local_rank: one each), and "meshstore.store", its client.
// Actors in those processes reach the store through worker_store(). A
// store process that dies is a MeshFailure of both (supervision.hpp), a
// volume that dies one of "meshstore.volumes", besides the errors the
// store's own calls give. Like proc_mesh.hpp, this header exposes CAF.
//
//   opts.add_types = [](caf::actor_system_config& cfg) {
//     cfg.add_actor_type("puller", puller);         // the store's are there
//   };
//   auto procs = meshstore::ProcMesh::launch({{"procs", 3}}, {}, opts).value();
//   meshstore::StoreOptions so;
//   so.strategy = "per_local_rank";
//   auto store = meshstore::spawn_store(procs, so).value();  // this process's client
//   // in a worker's actor: auto s = meshstore::worker_store().value();

#include <caf/all.hpp>
#include <memory>

#include "meshstore/launch_env.hpp"
#include "meshstore/mesh.hpp"
#include "meshstore/proc_mesh.hpp"
#include "meshstore/store.hpp"
#include "meshstore/supervision.hpp"

namespace meshstore {

/// Registers the store's message types and the actor type that joins a
/// process to a store ("meshstore.store_node"). A program that links this
/// file has them in its process runtime already (add_process_types); the
/// call stays for programs that made it, and does no harm.
void add_store_actor_types(caf::actor_system_config& cfg);

/// Creates a store in this process (options as for Store::embedded;
/// `listen` defaults to 127.0.0.1:0, and must be reachable by every process
/// of `procs`) and has every process of `procs` join it, process i with
/// rank i and local rank i. Returns this process's client once all have
/// joined. Errors name the rank that could not join (the store is closed
/// again); `supervision` applies to the store's processes (default: the
/// ProcMesh's). On a ProcMesh::from_env it is collective, as spawn_store
/// on a Mesh below: every rank calls it, rank 0 creates the store, and each
/// rank gets its own client (`supervision` is not used). On a
/// ProcMesh::local it is Store::embedded(options) on the mesh's runtime.
Result<Store> spawn_store(ProcMesh& procs, StoreOptions options = {});
Result<Store> spawn_store(ProcMesh& procs, StoreOptions options, Supervision supervision);

/// The same for a launched job (SPMD, Mesh::from_env): call it on every
/// rank, in the same order as the job's other collective calls. Rank 0
/// creates the store on its Mesh's runtime, listening on MASTER_ADDR on a
/// free port, and hands it to the other ranks through the mesh's registry,
/// over the connections they already have: the job needs no port but the
/// mesh's, and this works under TLS. With MESHSTORE_PORT set, rank 0
/// listens there instead and the others connect there, as Store::from_env
/// does (not under TLS: see docs/security.md, "Not built"). Every other
/// rank joins it on its own Mesh's runtime, with its rank and local rank.
/// One actor system per process for the mesh and the store. On a
/// Mesh::local, one store in this process. Errors as Store::from_env, and
/// Errc::timeout when rank 0's address does not come within the mesh's
/// request timeout.
Result<Store> spawn_store(Mesh& mesh, StoreOptions options = {});

/// In a process of a ProcMesh: the store it joined through spawn_store
/// (on the process's own actor runtime, shared with its meshes). It closes
/// when the process stops serving. Errc::not_found before it joined and
/// after it closed.
Result<std::shared_ptr<Store>> worker_store();

}  // namespace meshstore
