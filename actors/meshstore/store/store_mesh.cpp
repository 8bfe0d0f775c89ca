#include "meshstore/store_mesh.hpp"

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/protocol/actor_types.hpp"
#include "meshstore/protocol/atoms.hpp"
#include "meshstore/store/store_impl.hpp"

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

using store_join_atom = caf::atom_constant<caf::atom("s_join")>;
// A process's membership in a store: join connects it.
using store_node_actor = caf::typed_actor<caf::replies_to<store_join_atom>::with<std::string>>;

// The store this process joined (one per process), and its address.
std::mutex g_mu;
std::shared_ptr<Store> g_store;
std::string g_joined;

store_node_actor::behavior_type store_node(store_node_actor::pointer self, int rank,
                                           std::string address, std::string transport,
                                           std::int64_t request_timeout_ms) {
  // The store closes when this process stops serving: on serve()'s own
  // thread, before the runtime it shares goes (never on an actor thread,
  // which would wait for actors of its own system). A node stopped
  // earlier (its mesh stopped) leaves the store open until then.
  // It joins at once: a node that supervision spawned again, in a process
  // started again, is asked by no one, and its volumes rejoin the store
  // (empty) this way. spawn_store's own join then finds it joined.
  caf::anon_send(self, store_join_atom::value);
  return {
      [=](store_join_atom) -> caf::result<std::string> {
        StoreOptions o;
        o.placement.rank = rank;
        o.placement.local_rank = rank;
        o.transport.name = transport;
        o.limits.request_timeout = std::chrono::milliseconds(request_timeout_ms);
        const std::string joined = "rank " + std::to_string(rank) + " joined " + address;
        {
          std::lock_guard<std::mutex> lock(g_mu);
          if (g_store && g_joined == address) return joined;
          if (g_store) {
            return internal::to_caf_error(
                Status(Errc::invalid_argument, "rank " + std::to_string(rank) +
                                                   ": this process already joined a store (" +
                                                   g_joined + ")"));
          }
        }
        // On this process's runtime (one actor system for the mesh and the
        // store). Blocks this scheduler thread while it connects (tens of ms).
        auto runtime = internal::worker_runtime();
        if (!runtime) {
          return internal::to_caf_error(
              Status(Errc::unavailable,
                     "rank " + std::to_string(rank) + ": ProcMesh::serve is not running"));
        }
        auto s = internal::StoreRuntimeAccess::connect(std::move(runtime), address, o);
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
  cfg.add_actor_type("meshstore.store_node", store_node);
}

namespace {

// In the process's runtime whatever the process makes first: a program
// that uses spawn_store registers nothing itself.
[[maybe_unused]] const bool kStoreNodeType =
    internal::register_process_types(add_store_actor_types);

}  // namespace

namespace {

Result<Store> spawn_store_under(ProcMesh& procs, StoreOptions options,
                                std::optional<Supervision> supervision) {
  // A launched job (ProcMesh::from_env): collective, as on its Mesh.
  if (Mesh* mesh = internal::proc_spmd_mesh(procs)) return spawn_store(*mesh, std::move(options));
  if (internal::proc_is_local(procs)) {
    // Every member is this process: the store is embedded here, on the
    // mesh's runtime.
    auto runtime = internal::proc_runtime(procs);
    if (!runtime) return Status(Errc::shutdown, "spawn_store: the ProcMesh was stopped");
    auto store = internal::StoreRuntimeAccess::embedded(std::move(runtime), std::move(options));
    if (!store.ok()) return store.status().with_context("spawn_store");
    return store;
  }
  if (options.listen.empty()) options.listen = "127.0.0.1:0";
  options.placement.local_rank = -1;  // the controller is not one of the mesh's ranks
  auto runtime = internal::proc_runtime(procs);
  if (!runtime) return Status(Errc::shutdown, "spawn_store: the ProcMesh was stopped");
  // On the ProcMesh's runtime: one actor system for the meshes and the store.
  auto store = internal::StoreRuntimeAccess::embedded(std::move(runtime), options);
  if (!store.ok()) return store.status().with_context("spawn_store");
  const auto timeout_ms = static_cast<std::int64_t>(options.limits.request_timeout.count());
  auto nodes = supervision
                   ? procs.spawn<store_node_actor>(*supervision, "meshstore.store",
                                                   "meshstore.store_node", store->admin().address(),
                                                   options.transport.name, timeout_ms)
                   : procs.spawn<store_node_actor>("meshstore.store", "meshstore.store_node",
                                                   store->admin().address(), options.transport.name,
                                                   timeout_ms);
  if (!nodes.ok()) {
    store->close();
    return nodes.status().with_context("spawn_store");
  }
  auto joined =
      nodes->call<std::string>(store_join_atom::value).get(options.limits.request_timeout * 2);
  Status failed = joined.ok() ? Status() : joined.status();
  if (joined.ok()) {
    for (const auto& r : *joined) {
      if (!r.ok()) {
        failed = r.status();
        break;
      }
    }
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
