#include "meshstore/store_mesh.hpp"

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/address.hpp"
#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/protocol/actor_types.hpp"
#include "meshstore/protocol/atoms.hpp"
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
  // Every volume `store`'s client may be given has registered.
  static void placement_final(const Store& store) {
    if (store.impl_ && store.impl_->client) {
      caf::anon_send(store.impl_->client, protocol::placement_final_atom::value);
    }
  }
};

namespace {

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
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NodeSpec& x) {
  return f(caf::meta::type_name("meshstore::NodeSpec"), x.address, x.directory, x.transport,
           x.request_timeout_ms, x.num_volumes, x.capacity_bytes, x.pool_bytes,
           x.shared_memory_volumes, x.fast_path_spin_us, x.tcp_streams, x.tcp_chunk_bytes,
           x.encrypt_tcp, x.shm_max_mappings, x.rpc_chunk_bytes, x.rpc_chunks_in_flight);
}

NodeSpec node_spec(const StoreOptions& o, std::string address, caf::actor directory) {
  NodeSpec n;
  n.address = std::move(address);
  n.directory = std::move(directory);
  n.transport = o.transport.name;
  n.request_timeout_ms = static_cast<std::int64_t>(o.limits.request_timeout.count());
  n.num_volumes = o.placement.num_volumes;
  n.capacity_bytes = o.limits.volume_capacity_bytes;
  n.pool_bytes = o.limits.volume_pool_bytes;
  n.shared_memory_volumes = o.transport.shared_memory_volumes;
  n.fast_path_spin_us = static_cast<std::int64_t>(o.transport.fast_path_spin.count());
  n.tcp_streams = o.transport.tcp_streams;
  n.tcp_chunk_bytes = o.transport.tcp_chunk_bytes;
  n.encrypt_tcp = o.security.encrypt_tcp;
  n.shm_max_mappings = o.transport.shm_max_mappings;
  n.rpc_chunk_bytes = o.transport.rpc_chunk_bytes;
  n.rpc_chunks_in_flight = o.transport.rpc_chunks_in_flight;
  return n;
}

// The options of process `rank` of the mesh (rank and local rank alike).
StoreOptions node_options(const NodeSpec& n, int rank) {
  StoreOptions o;
  o.placement.rank = rank;
  o.placement.local_rank = rank;
  o.placement.num_volumes = n.num_volumes;
  o.transport.name = n.transport;
  o.limits.request_timeout = std::chrono::milliseconds(n.request_timeout_ms);
  o.limits.volume_capacity_bytes = n.capacity_bytes;
  o.limits.volume_pool_bytes = n.pool_bytes;
  o.transport.shared_memory_volumes = n.shared_memory_volumes;
  o.transport.fast_path_spin = std::chrono::microseconds(n.fast_path_spin_us);
  o.transport.tcp_streams = n.tcp_streams;
  o.transport.tcp_chunk_bytes = n.tcp_chunk_bytes;
  o.security.encrypt_tcp = n.encrypt_tcp;
  o.transport.shm_max_mappings = n.shm_max_mappings;
  o.transport.rpc_chunk_bytes = n.rpc_chunk_bytes;
  o.transport.rpc_chunks_in_flight = n.rpc_chunks_in_flight;
  return o;
}

Status rank_error(int rank, Errc code, const std::string& what) {
  return Status(code, "rank " + std::to_string(rank) + ": " + what);
}

using store_join_atom = caf::atom_constant<caf::atom("s_join")>;
// A process's membership in a store: join connects it.
using store_node_actor = caf::typed_actor<caf::replies_to<store_join_atom>::with<std::string>>;
// A process's volumes of a store (the mesh "meshstore.volumes"): join
// spawns and registers them. It is linked to them: a volume that dies
// takes the node with it (a MeshFailure naming the rank), and the node
// that stops takes its volumes.
using volume_join_atom = caf::atom_constant<caf::atom("v_join")>;
using volume_node_actor = caf::typed_actor<caf::replies_to<volume_join_atom>::with<std::string>>;

// The store this process joined (one per process), and its address.
std::mutex g_mu;
std::shared_ptr<Store> g_store;
std::string g_joined;

volume_node_actor::behavior_type volume_node(volume_node_actor::pointer self, int rank,
                                             NodeSpec spec) {
  // It joins at once, as a store node does: one that supervision spawned
  // again is asked by no one, and its volumes rejoin the store (empty).
  caf::anon_send(self, volume_join_atom::value);
  auto joined = std::make_shared<std::string>();
  return {
      [=](volume_join_atom) -> caf::result<std::string> {
        if (!joined->empty()) return *joined;
        // On this process's runtime. Blocks this scheduler thread while
        // the controller registers the volumes (a few ms).
        auto runtime = internal::worker_runtime();
        if (!runtime) {
          return internal::to_caf_error(
              rank_error(rank, Errc::unavailable, "ProcMesh::serve is not running"));
        }
        const StoreOptions o = node_options(spec, rank);
        store::VolumeHost h;
        h.runtime = runtime.get();
        h.options = &o;
        h.host = store::resolve_host(o);
        auto target = internal::parse_address(spec.address);
        h.data_host = internal::local_address_towards(target.ok() ? target->host : "127.0.0.1");
        h.door = false;  // the mesh's processes are connected to each other
        Status s = store::ask_directory(
            runtime->system(), caf::actor_cast<protocol::directory_actor>(spec.directory),
            std::chrono::milliseconds(spec.request_timeout_ms), "the store at " + spec.address, &h);
        std::vector<caf::actor> made;
        Result<std::vector<protocol::storage_volume_actor>> volumes = s;
        if (s.ok()) volumes = store::host_volumes(h, &made);
        if (!volumes.ok()) {
          for (auto& v : made) caf::anon_send_exit(v, caf::exit_reason::user_shutdown);
          return internal::to_caf_error(
              volumes.status().with_context("rank " + std::to_string(rank) + " hosting volumes"));
        }
        for (auto& v : made) self->link_to(v);
        *joined = "rank " + std::to_string(rank) + " hosts " + std::to_string(volumes->size()) +
                  " volume(s) of " + spec.address;
        return *joined;
      },
  };
}

store_node_actor::behavior_type store_node(store_node_actor::pointer self, int rank,
                                           NodeSpec spec) {
  // The store closes when this process stops serving: on serve()'s own
  // thread, before the runtime it shares goes (never on an actor thread,
  // which would wait for actors of its own system). A node stopped
  // earlier (its mesh stopped) leaves the store open until then.
  // It joins at once: a node that supervision spawned again, in a process
  // started again, is asked by no one, and rejoins the store this way.
  // spawn_store's own join then finds it joined.
  caf::anon_send(self, store_join_atom::value);
  return {
      [=](store_join_atom) -> caf::result<std::string> {
        // Its volumes are the volume node's ("meshstore.volumes").
        StoreOptions o = node_options(spec, rank);
        o.placement.host_volumes = false;
        const std::string& address = spec.address;
        const std::string joined = "rank " + std::to_string(rank) + " joined " + address;
        {
          std::lock_guard<std::mutex> lock(g_mu);
          if (g_store && g_joined == address) return joined;
          if (g_store) {
            return internal::to_caf_error(
                rank_error(rank, Errc::invalid_argument,
                           "this process already joined a store (" + g_joined + ")"));
          }
        }
        // On this process's runtime (one actor system for the mesh and the
        // store). Blocks this scheduler thread while it connects (tens of ms).
        auto runtime = internal::worker_runtime();
        if (!runtime) {
          return internal::to_caf_error(
              rank_error(rank, Errc::unavailable, "ProcMesh::serve is not running"));
        }
        internal::StoreDirectory via{caf::actor_cast<protocol::directory_actor>(spec.directory)};
        auto s = internal::StoreRuntimeAccess::connect(std::move(runtime), address, o, &via);
        if (!s.ok()) {
          return internal::to_caf_error(
              s.status().with_context("rank " + std::to_string(rank) + " joining " + address));
        }
        {
          std::lock_guard<std::mutex> lock(g_mu);
          g_store = std::make_shared<Store>(std::move(s).value());
          g_joined = address;
        }
        internal::at_worker_exit([] {
          std::shared_ptr<Store> doomed;
          {
            std::lock_guard<std::mutex> lock(g_mu);
            doomed = std::move(g_store);
          }
          if (doomed) doomed->close();
        });
        return joined;
      },
  };
}

}  // namespace

void add_store_actor_types(caf::actor_system_config& cfg) {
  protocol::add_actor_types(cfg);  // the store's own messages
  cfg.add_message_type<NodeSpec>("meshstore::NodeSpec");
  cfg.add_actor_type("meshstore.store_node", store_node);
  cfg.add_actor_type("meshstore.volume_node", volume_node);
}

namespace {

// In the process's runtime whatever the process makes first: a program
// that uses spawn_store registers nothing itself.
[[maybe_unused]] const bool kStoreNodeType =
    internal::register_process_types(add_store_actor_types);

}  // namespace

namespace {

// Spawns the node mesh `name` of actor type `type` (supervised by
// `supervision`, else the ProcMesh's default) and has every member join:
// Ok once all have, else the first failure, naming its rank.
template <class Handle, class Atom>
Status spawn_nodes(ProcMesh& procs, const std::optional<Supervision>& supervision,
                   const std::string& name, const std::string& type, const NodeSpec& spec,
                   std::chrono::milliseconds timeout) {
  auto nodes = supervision ? procs.spawn<Handle>(*supervision, name, type, spec)
                           : procs.spawn<Handle>(name, type, spec);
  if (!nodes.ok()) return nodes.status();
  auto joined = nodes->template call<std::string>(Atom::value).get(timeout * 2);
  if (!joined.ok()) return joined.status();
  for (const auto& r : *joined) {
    if (!r.ok()) return r.status();
  }
  return Status();
}

Result<Store> spawn_store_under(ProcMesh& procs, StoreOptions options,
                                std::optional<Supervision> supervision) {
  // A launched job (ProcMesh::from_env): collective, as on its Mesh.
  if (Mesh* mesh = internal::proc_spmd_mesh(procs)) return spawn_store(*mesh, std::move(options));
  auto runtime = internal::proc_runtime(procs);
  if (!runtime) return Status(Errc::shutdown, "spawn_store: the ProcMesh was stopped");
  if (internal::proc_is_local(procs)) {
    // Every member is this process: the store is embedded here, on the
    // mesh's runtime.
    auto store = internal::StoreRuntimeAccess::embedded(std::move(runtime), std::move(options));
    if (!store.ok()) return store.status().with_context("spawn_store");
    return store;
  }
  if (options.listen.empty()) options.listen = "127.0.0.1:0";
  options.placement.local_rank = -1;  // the controller is not one of the mesh's ranks
  // The controller and strategy here, on the ProcMesh's runtime: one actor
  // system for the meshes and the store.
  auto store = internal::StoreRuntimeAccess::embedded(std::move(runtime), options);
  if (!store.ok()) return store.status().with_context("spawn_store");
  const auto spec =
      node_spec(options, store->admin().address(), internal::StoreRuntimeAccess::directory(*store));
  const auto timeout = options.limits.request_timeout;
  // The volumes first, as a mesh of their own, then a client per process:
  // each client finds every volume its strategy may give it registered.
  Status failed = spawn_nodes<volume_node_actor, volume_join_atom>(
      procs, supervision, "meshstore.volumes", "meshstore.volume_node", spec, timeout);
  if (failed.ok()) {
    failed = spawn_nodes<store_node_actor, store_join_atom>(procs, supervision, "meshstore.store",
                                                            "meshstore.store_node", spec, timeout);
  }
  if (!failed.ok()) {
    store->close();
    return failed.with_context("spawn_store");
  }
  // Every process joined with its volumes: a put of the controller's that
  // the strategy cannot place fails at once instead of waiting for a
  // volume that will never register.
  internal::StoreRuntimeAccess::placement_final(*store);
  return store;
}

}  // namespace

Result<Store> spawn_store(ProcMesh& procs, StoreOptions options) {
  return spawn_store_under(procs, std::move(options), std::nullopt);
}

Result<Store> spawn_store(ProcMesh& procs, StoreOptions options, Supervision supervision) {
  return spawn_store_under(procs, std::move(options), std::move(supervision));
}

Result<Store> spawn_store(Mesh& mesh, StoreOptions options) {
  auto runtime = internal::mesh_runtime(mesh);
  if (!runtime) return Status(Errc::shutdown, "spawn_store: the Mesh is closed");
  if (internal::mesh_is_local(mesh)) {
    return internal::StoreRuntimeAccess::embedded(std::move(runtime), std::move(options));
  }
  auto env = LaunchEnv::from_env();
  if (!env.ok()) return env.status().with_context("spawn_store");
  options.placement.rank = env->rank;
  options.placement.local_rank = env->local_rank;
  if (const char* fixed = std::getenv("MESHSTORE_PORT"); fixed && *fixed) {
    // Where Store::from_env looks.
    auto port = env->service_port("MESHSTORE_PORT", 1);
    if (!port.ok()) return port.status().with_context("spawn_store");
    const std::string address = env->master_addr + ":" + std::to_string(*port);
    if (env->rank == 0) {
      options.listen = address;
      return internal::StoreRuntimeAccess::embedded(std::move(runtime), std::move(options));
    }
    return internal::StoreRuntimeAccess::connect(std::move(runtime), address, std::move(options));
  }
  // One rendezvous: rank 0's store listens on a free port (for clients
  // from elsewhere), and the mesh's registry hands its address and its
  // directory actor to the other ranks, who reach it over the connection
  // to rank 0 they already have: a second connection between two
  // connected processes breaks CAF 0.17's TLS links.
  const std::string key = internal::mesh_rendezvous_key(mesh, "meshstore.store");
  if (env->rank == 0) {
    options.listen = env->master_addr + ":0";
    auto store = internal::StoreRuntimeAccess::embedded(std::move(runtime), std::move(options));
    if (!store.ok()) return store;
    if (auto s = internal::mesh_set_value(mesh, key, store->admin().address(),
                                          internal::StoreRuntimeAccess::directory(*store));
        !s.ok()) {
      store->close();
      return s.with_context("spawn_store");
    }
    return store;
  }
  auto told = internal::mesh_value(mesh, key);
  if (!told.ok()) return told.status().with_context("spawn_store");
  if (!told->second) {
    return Status(Errc::protocol_error,
                  "spawn_store: rank 0 named its store " + told->first + " without its actor");
  }
  internal::StoreDirectory via{caf::actor_cast<protocol::directory_actor>(told->second)};
  return internal::StoreRuntimeAccess::connect(std::move(runtime), told->first, std::move(options),
                                               &via);
}

Result<std::shared_ptr<Store>> worker_store() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_store) {
    return Status(Errc::not_found,
                  "worker_store: this process has not joined a store (the controller calls "
                  "spawn_store on its ProcMesh)");
  }
  return g_store;
}

}  // namespace meshstore
