// The actors a store spawned on a ProcMesh runs in the mesh's processes
// (store/store_mesh.cpp spawns them): a volume node and a store node in
// each process, and, with StorePlacement::controller_process, a
// controller node in one. Internal: not installed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/proc_mesh.hpp"
#include "meshstore/store.hpp"
#include "meshstore/store/store_impl.hpp"
#include "meshstore/store/volume_hosting.hpp"

namespace meshstore {

// Store's way onto a runtime this process already has.
struct internal::StoreRuntimeAccess {
  static Result<Store> embedded(std::shared_ptr<ActorRuntime> rt, StoreOptions o) {
    return Store::embedded_on(std::move(rt), std::move(o));
  }
  static Result<Store> connect(std::shared_ptr<ActorRuntime> rt, const std::string& address,
                               StoreOptions o, const StoreDirectory* via = nullptr) {
    return Store::connect_on(std::move(rt), address, std::move(o), via);
  }
  // Its directory actor (what connect() takes as `via`); null without one.
  static caf::actor directory(const Store& store) {
    return store.impl_ ? caf::actor_cast<caf::actor>(store.impl_->directory) : caf::actor();
  }
  // Runs `f` once `store` closed (its actors stopped).
  static void on_close(Store& store, std::function<void()> f) {
    std::unique_lock<std::shared_mutex> lock(store.impl_->mu);
    store.impl_->on_close.push_back(std::move(f));
  }
  // Every volume `store`'s client may be given has registered.
  static void placement_final(const Store& store) {
    if (store.impl_ && store.impl_->client) {
      caf::anon_send(store.impl_->client, protocol::placement_final_atom::value);
    }
  }
};

namespace store_nodes {

// What a process of a ProcMesh needs to join a store spawned on it: the
// store's address and directory (handed over the connection to the
// controller the process has: a second one breaks CAF 0.17's TLS links),
// and the options its volumes and its client take from the controller's
// StoreOptions.
struct NodeSpec {
  std::string address;
  caf::actor directory;
  std::string transport;
  std::int64_t request_timeout_ms = 30000;
  std::int64_t reconnect_timeout_ms = 60000;
  std::int32_t num_volumes = 1;
  std::uint64_t capacity_bytes = 0;
  std::uint64_t pool_bytes = 0;
  bool shared_memory_volumes = true;
  std::int64_t fast_path_spin_us = 50;
  std::int32_t tcp_streams = 2;
  std::uint64_t tcp_chunk_bytes = 0;
  bool encrypt_tcp = false;
  std::int32_t shm_max_mappings = 4096;
  std::uint64_t rpc_chunk_bytes = 0;
  std::int32_t rpc_chunks_in_flight = 4;
  // The directory is a relay (StorePlacement::controller_process): the
  // controller may die and come back, and this process's volumes and
  // client rejoin the one that does.
  bool relays = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NodeSpec& x) {
  return f(caf::meta::type_name("meshstore::NodeSpec"), x.address, x.directory, x.transport,
           x.request_timeout_ms, x.reconnect_timeout_ms, x.num_volumes, x.capacity_bytes,
           x.pool_bytes, x.shared_memory_volumes, x.fast_path_spin_us, x.tcp_streams,
           x.tcp_chunk_bytes, x.encrypt_tcp, x.shm_max_mappings, x.rpc_chunk_bytes,
           x.rpc_chunks_in_flight, x.relays);
}

// What the process that runs a store's controller (the mesh
// "meshstore.controller") needs: the relay directory it hands its
// controller to, how the controller runs, and, for the volumes that go
// with the controller (singleton, controller_colocated), the node's spec.
struct ControlSpec {
  caf::actor directory;
  std::string strategy;
  std::int32_t replicas = 1;
  // In millionths: a float in a message is altered (DEPS-NOTES §4).
  std::int64_t repair_share_ppm = 250000;
  std::int64_t rebuild_timeout_ms = 2000;
  NodeSpec node;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ControlSpec& x) {
  return f(caf::meta::type_name("meshstore::ControlSpec"), x.directory, x.strategy, x.replicas,
           x.repair_share_ppm, x.rebuild_timeout_ms, x.node);
}

// The spec every process of `o`'s store at `address` joins with.
NodeSpec node_spec(const StoreOptions& o, std::string address, caf::actor directory);

// The options of process `rank` of the mesh (rank and local rank alike).
StoreOptions node_options(const NodeSpec& n, int rank);

// Whether a node whose join failed with `failed` tries again in a moment:
// under a relay, while the controller starts again, up to the reconnect
// timeout since the first failure (`since`, set by the first call).
bool try_again_soon(const NodeSpec& spec,
                    std::optional<std::chrono::steady_clock::time_point>& since,
                    const Status& failed);

// How this process hosts volumes of `spec`'s store with options `o` (kept
// by the caller): on the worker's `runtime`, with no door of their own
// (the mesh's processes are connected to each other already).
store::VolumeHost node_volume_host(internal::ActorRuntime* runtime, const StoreOptions& o,
                                   const NodeSpec& spec);

// `what` failed in process `rank`.
Status rank_error(int rank, Errc code, const std::string& what);

using store_join_atom = caf::atom_constant<caf::atom("s_join")>;
// A process's membership in a store: join connects it.
using store_node_actor = caf::typed_actor<caf::replies_to<store_join_atom>::with<std::string>>;
// A process's volumes of a store (the mesh "meshstore.volumes"): join
// spawns and registers them. It is linked to them: a volume that dies
// takes the node with it (a MeshFailure naming the rank), and the node
// that stops takes its volumes.
using volume_join_atom = caf::atom_constant<caf::atom("v_join")>;
using volume_rejoin_atom = caf::atom_constant<caf::atom("v_rejoin")>;
using volume_node_actor = caf::typed_actor<caf::replies_to<volume_join_atom>::with<std::string>,
                                           caf::reacts_to<volume_rejoin_atom>>;

using controller_join_atom = caf::atom_constant<caf::atom("c_join")>;
using controller_stop_atom = caf::atom_constant<caf::atom("c_stop")>;
// The process that runs a store's controller and strategy (the mesh
// "meshstore.controller", one member): join starts them, takes over the
// store's index when the store had a controller before (this node was
// spawned again after its process died), hosts the volumes that go with
// the controller, and hands the controller to the relay directory. It is
// linked to them: one that dies takes the node with it (a MeshFailure,
// and under the restart policy a new controller), and the node that
// stops takes them. stop ends them all without a failure (the store
// closes).
using controller_node_actor =
    caf::typed_actor<caf::replies_to<controller_join_atom>::with<std::string>,
                     caf::reacts_to<controller_stop_atom>>;

volume_node_actor::behavior_type volume_node(volume_node_actor::pointer self, int rank,
                                             NodeSpec spec);

controller_node_actor::behavior_type controller_node(controller_node_actor::pointer self, int rank,
                                                     ControlSpec spec);

}  // namespace store_nodes
}  // namespace meshstore
