#include "meshstore/store_mesh.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>

#include "meshstore/controller/controller.hpp"
#include "meshstore/foreign_thread.hpp"
#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/address.hpp"
#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/internal/connect.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/mesh_values.hpp"
#include "meshstore/protocol/actor_types.hpp"
#include "meshstore/protocol/atoms.hpp"
#include "meshstore/protocol/directory_actor.hpp"
#include "meshstore/protocol/wire_glue.hpp"
#include "meshstore/store/store_impl.hpp"
#include "meshstore/store/store_nodes.hpp"

namespace meshstore {
namespace store_nodes {

NodeSpec node_spec(const StoreOptions& o, std::string address, caf::actor directory) {
  NodeSpec n;
  n.address = std::move(address);
  n.directory = std::move(directory);
  n.transport = o.transport.name;
  n.request_timeout_ms = static_cast<std::int64_t>(o.limits.request_timeout.count());
  n.reconnect_timeout_ms = static_cast<std::int64_t>(o.limits.reconnect_timeout.count());
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

StoreOptions node_options(const NodeSpec& n, int rank) {
  StoreOptions o;
  o.placement.rank = rank;
  o.placement.local_rank = rank;
  o.placement.num_volumes = n.num_volumes;
  o.transport.name = n.transport;
  o.limits.request_timeout = std::chrono::milliseconds(n.request_timeout_ms);
  o.limits.reconnect_timeout = std::chrono::milliseconds(n.reconnect_timeout_ms);
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

bool try_again_soon(const NodeSpec& spec,
                    std::optional<std::chrono::steady_clock::time_point>& since,
                    const Status& failed) {
  if (!spec.relays || failed.code() != Errc::unavailable) return false;
  const auto now = std::chrono::steady_clock::now();
  if (!since) since = now;
  return now - *since < std::chrono::milliseconds(spec.reconnect_timeout_ms);
}

store::VolumeHost node_volume_host(internal::ActorRuntime* runtime, const StoreOptions& o,
                                   const NodeSpec& spec) {
  store::VolumeHost h;
  h.runtime = runtime;
  h.options = &o;
  h.host = store::resolve_host(o);
  auto target = internal::parse_address(spec.address);
  h.data_host = internal::local_address_towards(target.ok() ? target->host : "127.0.0.1");
  h.door = false;
  return h;
}

Status rank_error(int rank, Errc code, const std::string& what) {
  return Status(code, "rank " + std::to_string(rank) + ": " + what);
}

namespace {

// The store this process joined (one per process), and its address.
std::mutex g_mu;
std::shared_ptr<Store> g_store;
std::string g_joined;

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
  // Since when its joins fail while a relayed store's controller starts
  // again (a process relaunched with it): it tries again meanwhile.
  auto failing_since = std::make_shared<std::optional<std::chrono::steady_clock::time_point>>();
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
        internal::StoreDirectory via{caf::actor_cast<protocol::directory_actor>(spec.directory),
                                     spec.relays};
        auto s = internal::StoreRuntimeAccess::connect(std::move(runtime), address, o, &via);
        if (!s.ok() && try_again_soon(spec, *failing_since, s.status())) {
          caf::delayed_anon_send(self, std::chrono::milliseconds(20), store_join_atom::value);
        }
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
}  // namespace store_nodes

void add_store_actor_types(caf::actor_system_config& cfg) {
  protocol::add_actor_types(cfg);  // the store's own messages
  cfg.add_message_type<store_nodes::NodeSpec>("meshstore::NodeSpec");
  cfg.add_message_type<store_nodes::ControlSpec>("meshstore::ControlSpec");
  internal::refuse_bare_floats<store_nodes::NodeSpec, store_nodes::ControlSpec>();  // no float
  cfg.add_actor_type("meshstore.controller_node", store_nodes::controller_node);
  cfg.add_actor_type("meshstore.store_node", store_nodes::store_node);
  cfg.add_actor_type("meshstore.volume_node", store_nodes::volume_node);
}

namespace {

// In the process's runtime whatever the process makes first: a program
// that uses spawn_store registers nothing itself.
[[maybe_unused]] const bool kStoreNodeType =
    internal::register_process_types(add_store_actor_types);

}  // namespace

namespace {

using store_nodes::controller_join_atom;
using store_nodes::controller_node_actor;
using store_nodes::controller_stop_atom;
using store_nodes::ControlSpec;
using store_nodes::node_spec;
using store_nodes::NodeSpec;
using store_nodes::store_join_atom;
using store_nodes::store_node_actor;
using store_nodes::volume_join_atom;
using store_nodes::volume_node_actor;

// Spawns the node mesh `name` of actor type `type` (supervised by
// `supervision`, else the ProcMesh's default) and has every member join:
// the mesh once all have, else the first failure, naming its rank.
template <class Handle, class Atom, class Spec>
Result<ActorMesh<Handle>> spawn_nodes(ProcMesh& procs,
                                      const std::optional<Supervision>& supervision,
                                      const std::string& name, const std::string& type,
                                      const Spec& spec, std::chrono::milliseconds timeout) {
  auto nodes = supervision ? procs.spawn<Handle>(*supervision, name, type, spec)
                           : procs.spawn<Handle>(name, type, spec);
  if (!nodes.ok()) return nodes.status();
  auto joined = nodes->template call<std::string>(Atom::value).get(timeout * 2);
  if (!joined.ok()) return joined.status();
  for (const auto& r : *joined) {
    if (!r.ok()) return r.status();
  }
  return nodes;
}

// The volumes first, as a mesh of their own, then a client per process:
// each client finds every volume its strategy may give it registered.
Status spawn_members(ProcMesh& procs, const std::optional<Supervision>& supervision,
                     const NodeSpec& spec, std::chrono::milliseconds timeout) {
  auto volumes = spawn_nodes<volume_node_actor, volume_join_atom>(
      procs, supervision, "meshstore.volumes", "meshstore.volume_node", spec, timeout);
  if (!volumes.ok()) return volumes.status();
  return spawn_nodes<store_node_actor, store_join_atom>(procs, supervision, "meshstore.store",
                                                        "meshstore.store_node", spec, timeout)
      .status();
}

// Member `i` of `procs` alone, as a view of one process.
Result<ProcMesh> member_view(const ProcMesh& procs, int i) {
  const auto& dims = procs.extent().dims();
  std::vector<std::pair<std::string, Select>> at;
  int rest = i;
  for (auto d = dims.size(); d-- > 0;) {
    const int c = rest % dims[d].second;
    rest /= dims[d].second;
    at.insert(at.begin(), {dims[d].first, Select(c, c + 1)});
  }
  return procs.slice(at);
}

Status check_controller_process(const ProcMesh& procs, const StoreOptions& options) {
  const int at = options.placement.controller_process;
  auto bad = [](const std::string& what) {
    return Status(Errc::invalid_argument, "spawn_store: placement.controller_process " + what);
  };
  if (at >= procs.size()) {
    return bad(std::to_string(at) + " is not a member of the ProcMesh, which has " +
               std::to_string(procs.size()));
  }
  if (options.placement.custom_strategy.select) {
    return bad("cannot run a custom strategy's select: a function cannot cross processes");
  }
  if (!options.state_dir.empty() || !options.standby_of.empty()) {
    return bad("is for a store its ProcMesh restarts, not with state_dir or standby_of");
  }
  return Status();
}

// spawn_store with the controller in process `controller_process` of
// `procs`: a relay directory here, published at `listen`, the controller
// mesh of one member there, then the volumes and clients as always, and
// this process's client through the relay.
Result<Store> spawn_relayed(ProcMesh& procs, StoreOptions options,
                            const std::optional<Supervision>& supervision,
                            std::shared_ptr<internal::ActorRuntime> runtime) {
  MESHSTORE_RETURN_IF_ERROR(options.validate());
  MESHSTORE_RETURN_IF_ERROR(check_controller_process(procs, options));
  auto member = member_view(procs, options.placement.controller_process);
  if (!member.ok()) return member.status().with_context("spawn_store");
  auto listen = internal::parse_address(options.listen);
  if (!listen.ok()) return listen.status().with_context("StoreOptions: listen");
  ForeignThreadGuard guard;  // spawns and publishes from this thread
  auto& sys = runtime->system();
  auto relay = controller::spawn_relay_directory(sys, options.placement.strategy);
  auto port = internal::publish_actor(sys, relay, listen->port, listen->host, true);
  if (!port.ok()) {
    caf::anon_send_exit(relay, caf::exit_reason::user_shutdown);
    return port.status().with_context("spawn_store: cannot listen on " + options.listen);
  }
  const std::string address = listen->host + ":" + std::to_string(*port);
  internal::warn_if_exposed(listen->host, *port, "the store", runtime->tls());
  auto undo = [runtime, relay, p = *port] {
    ForeignThreadGuard guard;  // close() may run on any thread
    internal::unpublish_actor(runtime->system(), relay, p);
    caf::anon_send_exit(relay, caf::exit_reason::user_shutdown);
  };
  NodeSpec spec = node_spec(options, address, caf::actor_cast<caf::actor>(relay));
  spec.relays = true;
  ControlSpec control;
  control.directory = spec.directory;
  control.strategy = options.placement.strategy;
  control.replicas = options.placement.replicas;
  control.repair_share_ppm = static_cast<std::int64_t>(options.placement.repair_share * 1e6);
  control.rebuild_timeout_ms = static_cast<std::int64_t>(options.limits.rebuild_timeout.count());
  control.node = spec;
  const auto timeout = options.limits.request_timeout;
  auto controllers = spawn_nodes<controller_node_actor, controller_join_atom>(
      *member, supervision, "meshstore.controller", "meshstore.controller_node", control, timeout);
  Status failed = controllers.status();
  if (failed.ok()) failed = spawn_members(procs, supervision, spec, timeout);
  Result<Store> store = failed;
  if (failed.ok()) {
    options.placement.local_rank = -1;  // the controller is not one of the mesh's ranks
    options.placement.host_volumes = false;
    internal::StoreDirectory via{caf::actor_cast<protocol::directory_actor>(relay), true};
    store = internal::StoreRuntimeAccess::connect(runtime, address, options, &via);
  }
  if (!store.ok()) {
    // Best effort: a node that cannot be told stops with its process.
    if (controllers.ok()) static_cast<void>(controllers->tell(controller_stop_atom::value));
    undo();
    return store.status().with_context("spawn_store");
  }
  internal::StoreRuntimeAccess::on_close(
      *store, [controllers = std::move(controllers).value(), undo]() mutable {
        static_cast<void>(controllers.tell(controller_stop_atom::value));  // best effort, as above
        undo();
      });
  internal::StoreRuntimeAccess::placement_final(*store);
  return store;
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
  if (options.placement.controller_process >= 0) {
    return spawn_relayed(procs, std::move(options), supervision, std::move(runtime));
  }
  options.placement.local_rank = -1;  // the controller is not one of the mesh's ranks
  // The controller and strategy here, on the ProcMesh's runtime: one actor
  // system for the meshes and the store.
  auto store = internal::StoreRuntimeAccess::embedded(std::move(runtime), options);
  if (!store.ok()) return store.status().with_context("spawn_store");
  const auto spec =
      node_spec(options, store->admin().address(), internal::StoreRuntimeAccess::directory(*store));
  const auto timeout = options.limits.request_timeout;
  const Status failed = spawn_members(procs, supervision, spec, timeout);
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
  using store_nodes::g_store;
  std::lock_guard<std::mutex> lock(store_nodes::g_mu);
  if (!g_store) {
    return Status(Errc::not_found,
                  "worker_store: this process has not joined a store (the controller calls "
                  "spawn_store on its ProcMesh)");
  }
  return g_store;
}

}  // namespace meshstore
