#pragma once

// Store::Impl: what a Store holds (its actor runtime, the handles of its
// actors, its options) and how its calls reach the client actor.

#include <atomic>
#include <caf/all.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/client/calls.hpp"
#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/protocol/controller_actor.hpp"
#include "meshstore/protocol/directory_actor.hpp"
#include "meshstore/protocol/storage_volume_actor.hpp"
#include "meshstore/protocol/strategy_actor.hpp"
#include "meshstore/status.hpp"
#include "meshstore/store.hpp"
#include "meshstore/store/metrics_server.hpp"
#include "meshstore/store/state_dir.hpp"

namespace meshstore {

// A store's directory actor, as Store::connect_on takes it from a process
// that already reaches the store (spawn_store on a launched mesh).
struct internal::StoreDirectory {
  protocol::directory_actor handle;
  // A relay directory (protocol::relay_directory_actor): its controller
  // may go down and come back, so the store reconnects through it.
  bool relays = false;
};

namespace client {
class FastPath;
}
namespace store {
class Reconnector;
}

namespace state_dicts {
// The state-dict reads' manifest cache (state_dicts/read_plan.hpp).
struct ManifestCache;
std::shared_ptr<ManifestCache> make_manifest_cache();
}  // namespace state_dicts

/// A Store's state. Thread-safe: `mu` guards `closed` and the actor
/// handles; the rest is set before the Store is handed out.
struct Store::Impl {
  StoreOptions options;
  std::string host;
  // The interface this process's network data plane (tcp) listens on: the
  // one its control plane uses.
  std::string data_host = "127.0.0.1";
  std::string strategy_name;
  // Whether this process's volumes open a door for direct connections
  // (VolumeInfo::control): not when the store was joined through a mesh,
  // whose processes are connected to each other already.
  bool doors = true;
  // Where this store listens; 0 = not listening (any more). Read by
  // Store::Admin::port() from any thread.
  std::atomic<std::uint16_t> port{0};
  std::string address;
  // The process's runtime (internal::process_runtime), which other stores
  // and meshes share: close() stops only this store's actors and waits
  // for them.
  std::shared_ptr<internal::ActorRuntime> runtime;
  mutable std::shared_mutex mu;  // guards closed and the handles below
  bool closed = false;
  caf::actor client;
  protocol::controller_actor controller;  // local, or a proxy of a remote one
  protocol::strategy_actor strategy;
  protocol::directory_actor directory;
  std::vector<protocol::storage_volume_actor> volumes;  // hosted in this process
  std::vector<caf::actor> owned;  // actors of this process, stopped by close()
  // What this process registered (its volumes, its lending volumes: those
  // with the controller only), for a restarted controller (rejoin).
  struct Registered {
    wire::VolumeInfo info;
    protocol::storage_volume_actor handle;
    bool with_strategy = true;
  };
  std::vector<Registered> registered;
  // The servers this store may join (Store::connect: "HOST:PORT", or a
  // primary and its standbys, comma-separated), and what reconnects to
  // them when its controller goes down (null: an embedded store, one
  // joined through a mesh, or limits.reconnect_timeout 0).
  std::vector<std::string> servers;
  std::shared_ptr<store::Reconnector> reconnector;
  // A relay directory this store reconnects through, over the connection
  // the process has (then `servers` only names it).
  protocol::directory_actor relay;
  // Run by close() once this store's own actors stopped (under mu's
  // guard): what spawn_store set up beside the store (the controller's
  // mesh).
  std::vector<std::function<void()>> on_close;
  // Manifests the state-dict reads planned with; plain data, so the read
  // chains may hold it past close().
  std::shared_ptr<state_dicts::ManifestCache> manifests = state_dicts::make_manifest_cache();
  // The layouts of this store's last state-dict puts, by key (by prefix for
  // versions) and options: a put of the same layout reuses its manifest.
  std::shared_ptr<state_dicts::ManifestCache> put_layouts = state_dicts::make_manifest_cache();
  // The client's channels and location cache, for calls on the caller's
  // thread, shared with the client actor. Set before the Store is handed out.
  std::shared_ptr<client::FastPath> fast;

  // A runtime (with the network layer when `network`; `shared` when
  // given, which must have the network layer and the store's types) and
  // validated options.
  static Result<std::unique_ptr<Impl>> start(const StoreOptions& options, bool network,
                                             std::shared_ptr<internal::ActorRuntime> shared);
  // Spawns and registers the volumes the strategy places in this process.
  Status host_volumes(bool is_server);
  // Where other clients connect to this process directly for its volumes
  // (VolumeInfo::control); empty for a server's.
  std::string control_door(bool is_server);

  // This process's lending volume (direct publishing: it serves buffers the
  // process lends, through one-sided and network transports), spawned and
  // registered at the controller on first use, never with the strategy, so
  // no put is placed on it. `lending` is guarded by mu; lend_mu (taken
  // before mu) lets one caller at a time create it.
  struct Lending {
    protocol::storage_volume_actor handle;
    std::string volume_id;
  };
  // What a lending volume serves: process memory (cma, rdma, tcp, rpc),
  // buffers in named /dev/shm files (shm too: readers on this host map the
  // files) or GPU memory (cuda-ipc: readers on this host open it).
  enum class LendKind { process, shared_memory, device };
  Result<Lending> lending_volume(LendKind kind = LendKind::process);
  std::mutex lend_mu;
  Lending lending[3];  // by LendKind
  void start_client();
  // Reconnects to `server` (one attempt, at most `slice` to reach it),
  // registers this process's volumes again and hands the new controller
  // and strategy to the client actor.
  Status rejoin(const std::string& server, std::chrono::milliseconds slice);

  ~Impl() { close(); }

  // Sends a call to the client actor; false when the store is closed.
  // Static so a moved-from Store (null impl) answers like a closed one.
  template <class Atom, class Call>
  static bool send(Impl* impl, Atom atom, Call call) {
    if (impl == nullptr) return false;
    std::shared_lock<std::shared_mutex> lock(impl->mu);
    if (impl->closed) return false;
    caf::anon_send(impl->client, atom, std::move(call));
    return true;
  }

  // The client actor's address (weak), null once closed: what calls that
  // chain several client calls hold instead of the store.
  static caf::actor_addr client_address(Impl* impl) {
    if (impl == nullptr) return caf::actor_addr();
    std::shared_lock<std::shared_mutex> lock(impl->mu);
    return impl->closed ? caf::actor_addr() : impl->client.address();
  }

  static std::shared_ptr<state_dicts::ManifestCache> manifest_cache(Impl* impl) {
    return impl == nullptr ? nullptr : impl->manifests;
  }
  static std::shared_ptr<state_dicts::ManifestCache> put_layout_cache(Impl* impl) {
    return impl == nullptr ? nullptr : impl->put_layouts;
  }

  // Gives `call` a promise, sends it to the client actor and returns the
  // future; a closed (or moved-from) store answers Errc::shutdown at once.
  template <class Atom, class Call>
  static auto call(Impl* impl, Atom atom, Call c, const std::string& what) {
    using T = typename decltype(c.promise)::element_type::value_type;
    c.promise = client::make_promise<T>(what);
    auto fut = c.promise->future();
    if (!send(impl, atom, std::move(c))) return client::closed_future<T>(what);
    return fut;
  }

  // call() for a call whose `guard` is set: cancelling its future stops it
  // through the guard (the client, which stops at its next step, and the
  // canceller complete the promise with Errc::cancelled, whichever comes
  // first). True when it stopped the call: its future then ends cancelled
  // (a get_into whose value came just before the cancel is turned into
  // Errc::cancelled by its last step, finish_into).
  template <class Atom, class Call>
  static auto call_cancellable(Impl* impl, Atom atom, Call c, const std::string& what) {
    using T = typename decltype(c.promise)::element_type::value_type;
    c.promise = client::make_promise<T>(what);
    auto fut = c.promise->future();
    client::cancel_through(fut, c.guard, c.promise, what);
    if (!send(impl, atom, std::move(c))) return client::closed_future<T>(what);
    return fut;
  }

  // What Store::Admin reports, for the admin facet and the metrics server
  // (static: a moved-from Store answers like a closed one).
  static Future<std::vector<VolumeStats>> volume_stats(Impl* impl);
  static Future<ControllerCounters> controller_counters(Impl* impl);
  FastPathStats fast_path_stats() const;

  // The metrics server (options.metrics; docs/operations.md), guarded by
  // mu; close() stops it before anything else. Its requests reach this
  // Impl through a plain pointer, which its stop makes safe.
  std::unique_ptr<store::MetricsServer> metrics_server;
  // Whether this store's calls are counted (OpMetrics): it serves metrics.
  // Set before the Store is handed out.
  bool meter = false;
  // Whether the controller lives in this process (an embedded store).
  bool hosts_controller = false;
  // A server's state directory (options.state_dir), released by close()
  // once this store's actors are gone; null: none.
  std::unique_ptr<store::StateDir> state_dir;
  static bool metered(const Impl* impl) { return impl && impl->meter; }
  // Starts metrics_server when options.metrics names an address.
  Status serve_metrics();

  // Stops accepting connections (the published directory), once.
  void stop_listening();
  // Stops this process's actors and the runtime (a shared one: waits for
  // this store's actors to stop, bounded); later calls answer
  // Errc::shutdown. Idempotent.
  void close();
};

}  // namespace meshstore
