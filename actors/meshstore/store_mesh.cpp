#include "meshstore/store_mesh.hpp"

#include <chrono>
#include <mutex>
#include <optional>

#include "meshstore/internal/caf_glue.hpp"

namespace meshstore {
namespace {

using store_join_atom = caf::atom_constant<caf::atom("s_join")>;
// A process's membership in a store: join connects it.
using store_node_actor = caf::typed_actor<caf::replies_to<store_join_atom>::with<std::string>>;

// The store this process joined (one per process).
std::mutex g_mu;
std::shared_ptr<Store> g_store;

store_node_actor::behavior_type store_node(store_node_actor::pointer self, int rank,
                                           std::string address, std::string transport,
                                           std::int64_t request_timeout_ms) {
  // The node going (the mesh stopped, the process stopping) closes the
  // store here: calls through worker_store() answer shutdown from then on.
  self->attach_functor([] {
    std::shared_ptr<Store> doomed;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      doomed = std::move(g_store);
    }
    if (doomed) doomed->close();
  });
  return {
      [=](store_join_atom) -> caf::result<std::string> {
        StoreOptions o;
        o.rank = rank;
        o.local_rank = rank;
        o.transport = transport;
        o.request_timeout = std::chrono::milliseconds(request_timeout_ms);
        {
          std::lock_guard<std::mutex> lock(g_mu);
          if (g_store) {
            return internal::to_caf_error(
                Status(Errc::invalid_argument,
                       "rank " + std::to_string(rank) + ": this process already joined a store"));
          }
        }
        // Blocks this scheduler thread while it connects (tens of ms).
        auto s = Store::connect(address, o);
        if (!s.ok()) {
          return internal::to_caf_error(
              s.status().with_context("rank " + std::to_string(rank) + " joining " + address));
        }
        std::lock_guard<std::mutex> lock(g_mu);
        g_store = std::make_shared<Store>(std::move(s).value());
        return "rank " + std::to_string(rank) + " joined " + address;
      },
  };
}

}  // namespace

void add_store_actor_types(caf::actor_system_config& cfg) {
  cfg.add_actor_type("meshstore.store_node", store_node);
}

namespace {

Result<Store> spawn_store_under(ProcMesh& procs, StoreOptions options,
                                std::optional<Supervision> supervision) {
  if (options.listen.empty()) options.listen = "127.0.0.1:0";
  options.local_rank = -1;  // the controller is not one of the mesh's ranks
  auto store = Store::embedded(options);
  if (!store.ok()) return store.status().with_context("spawn_store");
  const auto timeout_ms = static_cast<std::int64_t>(options.request_timeout.count());
  auto nodes =
      supervision
          ? procs.spawn<store_node_actor>(*supervision, "meshstore.store", "meshstore.store_node",
                                          store->address(), options.transport, timeout_ms)
          : procs.spawn<store_node_actor>("meshstore.store", "meshstore.store_node",
                                          store->address(), options.transport, timeout_ms);
  if (!nodes.ok()) {
    store->close();
    return nodes.status().with_context("spawn_store");
  }
  auto joined = nodes->call<std::string>(store_join_atom::value).get(options.request_timeout * 2);
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
  return store;
}

}  // namespace

Result<Store> spawn_store(ProcMesh& procs, StoreOptions options) {
  return spawn_store_under(procs, std::move(options), std::nullopt);
}

Result<Store> spawn_store(ProcMesh& procs, StoreOptions options, Supervision supervision) {
  return spawn_store_under(procs, std::move(options), std::move(supervision));
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
