// How a Store comes up (embedded, connect, from_env: its runtime, actors
// and volumes) and goes down (Store::Impl::close).

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <caf/io/all.hpp>
#include <chrono>
#include <cstdlib>
#include <set>

#include "meshstore/client/client.hpp"
#include "meshstore/client/fast_path.hpp"
#include "meshstore/controller/controller.hpp"
#include "meshstore/foreign_thread.hpp"
#include "meshstore/internal/address.hpp"
#include "meshstore/internal/connect.hpp"
#include "meshstore/internal/parse_int.hpp"
#include "meshstore/launch_env.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/protocol/actor_types.hpp"
#include "meshstore/protocol/wire_glue.hpp"
#include "meshstore/store/options.hpp"
#include "meshstore/store/reconnect.hpp"
#include "meshstore/store/standby.hpp"
#include "meshstore/store/store_impl.hpp"
#include "meshstore/store/volume_hosting.hpp"
#include "meshstore/transports/registry.hpp"
#include "meshstore/version.hpp"
#include "meshstore/volume/volume.hpp"

namespace meshstore {

namespace {

using internal::Address;
using internal::parse_address;
using store::ask_ok;
using store::reach_one;
using store::resolve_host;
using store::servers_of;
using store::transport_config;

// The store's message types are in the process's runtime whichever store,
// mesh or agent the process makes first.
[[maybe_unused]] const bool kStoreTypes =
    internal::register_process_types(protocol::add_actor_types);

// Whether this server restarts a store whose last server died serving
// (its state directory's marker was left), said in its log.
bool restarts(const store::StateDir* dir) {
  if (dir == nullptr || !dir->restarted()) return false;
  log::get("store")->warn(
      "the last server of this state directory{} did not close: restarting its store; misses "
      "wait for one of its volumes",
      dir->last_address().empty() ? std::string() : " (at " + dir->last_address() + ")");
  return true;
}

}  // namespace

Result<std::unique_ptr<Store::Impl>> Store::Impl::start(
    const StoreOptions& options, bool network, std::shared_ptr<internal::ActorRuntime> shared) {
  MESHSTORE_RETURN_IF_ERROR(options.validate());
  if (!options.log_level.empty()) MESHSTORE_RETURN_IF_ERROR(log::set_level(options.log_level));
  std::shared_ptr<internal::ActorRuntime> runtime = std::move(shared);
  if (!runtime) {
    internal::RuntimeOptions ro;
    ro.scheduler_threads = options.limits.scheduler_threads;
    ro.with_middleman = network;
    ro.tls = options.security.tls;
    ro.add_types = protocol::add_actor_types;
    auto made = internal::process_runtime(ro, "store");
    if (!made.ok()) return made.status();
    runtime = std::move(made).value();
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (impl->options.transport.name.empty()) {
    const std::string forced = transports::transport_from_env();
    if (!forced.empty()) {
      if (auto f = transports::builtin_registry().find(forced); !f.ok()) {
        return Status(Errc::invalid_argument, "MESHSTORE_TRANSPORT: " + f.status().message());
      }
      impl->options.transport.name = forced;
    }
  }
  impl->host = resolve_host(options);
  impl->runtime = std::move(runtime);
  return impl;
}

Status Store::Impl::host_volumes(bool is_server) {
  store::VolumeHost h;
  h.runtime = runtime.get();
  h.options = &options;
  h.host = host;
  h.data_host = data_host;
  h.controller = controller;
  h.strategy = strategy;
  h.strategy_name = strategy_name;
  h.is_server = is_server;
  h.awaits_failover = reconnector != nullptr;
  h.door = doors;
  std::vector<wire::VolumeInfo> infos;
  auto made = store::host_volumes(h, &owned, &infos);
  if (!made.ok()) return made.status();
  volumes = std::move(made).value();
  for (std::size_t i = 0; i < volumes.size(); ++i) {
    registered.push_back(Registered{infos[i], volumes[i], true});
  }
  const bool shared = !is_server || !options.listen.empty();
  if (options.security.encrypt_tcp && shared && !volumes.empty() && !runtime->tls()) {
    log::get("store")->warn(
        "encrypt_tcp without TLS: the volumes here seal their tcp bytes, but their keys reach "
        "clients over control connections in the clear, so whoever can watch those can read "
        "them; give the store TLS options too (docs/security.md)");
  }
  return Status();
}

std::string Store::Impl::control_door(bool is_server) {
  store::VolumeHost h;
  h.runtime = runtime.get();
  h.data_host = data_host;
  h.is_server = is_server;
  h.door = doors;
  return store::control_door(h);
}

void Store::Impl::stop_listening() {
  protocol::directory_actor published;
  std::shared_ptr<internal::ActorRuntime> rt;
  std::uint16_t listening = 0;
  {
    std::unique_lock<std::shared_mutex> lock(mu);
    if (closed || !directory || port == 0) return;
    published = directory;
    rt = runtime;
    listening = port;
    port = 0;
  }
  ForeignThreadGuard guard;  // unpublish asks the middleman from this thread
  internal::unpublish_actor(rt->system(), published, listening);
}

Result<Store::Impl::Lending> Store::Impl::lending_volume(LendKind kind) {
  std::lock_guard<std::mutex> one_at_a_time(lend_mu);  // always taken before mu
  protocol::controller_actor ctl;
  std::shared_ptr<internal::ActorRuntime> rt;
  {
    std::shared_lock<std::shared_mutex> lock(mu);
    if (closed) return Status(Errc::shutdown, "the store is closed");
    if (auto& have = lending[static_cast<int>(kind)]; have.handle) return have;
    ctl = controller;
    rt = runtime;
  }
  ForeignThreadGuard guard;  // publish() may run on any thread
  auto& sys = rt->system();
  static std::atomic<std::uint64_t> counter{0};
  volume::VolumeConfig vc;
  vc.volume_id = protocol::kLendingVolumePrefix + host + "/pid" + std::to_string(::getpid()) + "/" +
                 std::to_string(++counter) +
                 (kind == LendKind::shared_memory ? "/shm"
                  : kind == LendKind::device      ? "/gpu"
                                                  : "");
  vc.host = host;
  vc.transport_config = transport_config(options);
  vc.bind_host = data_host;
  vc.lending = true;
  vc.pool_bytes = 0;
  // What serves memory the process already has: cross-memory attach on this
  // host, rdma and tcp across hosts, rpc as the last resort; shm only for
  // buffers that are named shared memory already; cuda-ipc, alone, for GPU
  // memory.
  for (const auto& name : transports::builtin_registry().names()) {
    const bool offered =
        kind == LendKind::device
            ? name == "cuda-ipc"
            : name != "cuda-ipc" && (name != "shm" || kind == LendKind::shared_memory);
    if (offered) vc.transports.push_back(name);
  }
  auto spawned = volume::spawn_storage_volume(sys, vc);
  if (!spawned.ok()) return spawned.status().with_context("the lending volume");
  wire::VolumeInfo info;
  info.volume_id = vc.volume_id;
  info.host = host;
  info.transports = vc.transports;
  info.local_rank = options.placement.local_rank;
  info.control = control_door(false);
  if (auto s = ask_ok(sys, ctl, options.limits.request_timeout,
                      "register lending volume '" + vc.volume_id + "'",
                      protocol::register_volume_atom::value, info, *spawned);
      !s.ok()) {
    caf::anon_send_exit(*spawned, caf::exit_reason::user_shutdown);
    return s;
  }
  std::unique_lock<std::shared_mutex> lock(mu);
  if (closed) {
    caf::anon_send_exit(*spawned, caf::exit_reason::user_shutdown);
    return Status(Errc::shutdown, "the store is closed");
  }
  owned.push_back(caf::actor_cast<caf::actor>(*spawned));
  registered.push_back(Registered{info, *spawned, false});
  auto& made = lending[static_cast<int>(kind)];
  made = Lending{*spawned, vc.volume_id};
  return made;
}

void Store::Impl::start_client() {
  client::ClientConfig cc;
  cc.me = wire::ClientInfo{options.placement.rank, options.placement.local_rank, host};
  cc.forced_transport = options.transport.name;
  cc.transport_config = transport_config(options);
  cc.request_timeout = options.limits.request_timeout;
  cc.evict_lru = options.limits.eviction == "lru";
  fast = std::make_shared<client::FastPath>(
      std::make_shared<client::LocationCache>(cc.max_cached_locations));
  cc.fast_path = fast;
  cc.ring_spin = options.transport.fast_path_spin;
  if (reconnector) {
    cc.on_control_down =
        [weak = std::weak_ptr<store::Reconnector>(reconnector)](const std::string& why) {
          if (auto r = weak.lock()) r->control_down(why);
        };
    cc.orderly_stop_closes = relay != nullptr;
  }
  client = client::spawn_client(runtime->system(), cc, controller, strategy);
  owned.push_back(client);
}

Result<Store> Store::embedded(StoreOptions options) {
  return embedded_on(nullptr, std::move(options));
}

Result<Store> Store::connect(const std::string& address, StoreOptions options) {
  return connect_on(nullptr, address, std::move(options));
}

Result<Store> Store::embedded_on(std::shared_ptr<internal::ActorRuntime> runtime,
                                 StoreOptions options) {
  // This thread spawns the store's actors and may outlive it.
  ForeignThreadGuard guard;
  Address listen;
  if (!options.listen.empty()) {
    auto a = parse_address(options.listen);
    if (!a.ok()) return a.status().with_context("StoreOptions: listen");
    listen = *a;
  }
  auto started = Impl::start(options, !options.listen.empty(), std::move(runtime));
  if (!started.ok()) return started.status();
  auto impl = std::move(started).value();
  if (!listen.host.empty()) impl->data_host = listen.host;
  impl->hosts_controller = true;
  auto& sys = impl->runtime->system();
  if (!options.state_dir.empty()) {
    auto held = store::StateDir::claim(options.state_dir);
    if (!held.ok()) return held.status();
    impl->state_dir = std::move(held).value();
  }
  if (!options.standby_of.empty()) {
    MESHSTORE_RETURN_IF_ERROR(
        store::await_primary_loss(sys, options.standby_of, options.limits.connect_timeout));
  }
  controller::StrategyPolicy policy;
  if (options.placement.custom_strategy.select) {
    // The placement is a built-in one; only the choice of volume is the user's.
    impl->strategy_name = options.placement.custom_strategy.placement;
    policy = [select = options.placement.custom_strategy.select](
                 const wire::ClientInfo& c,
                 const std::vector<wire::VolumeInfo>& volumes) -> Result<std::string> {
      std::vector<VolumeDesc> descs;
      for (const auto& v : volumes) descs.push_back(VolumeDesc{v.volume_id, v.host, v.local_rank});
      auto chosen = select(ClientDesc{c.rank, c.local_rank, c.host}, descs);
      if (!chosen.ok()) return chosen.status().with_context("custom strategy");
      for (const auto& v : volumes) {
        if (v.volume_id == *chosen) return chosen;
      }
      return Status(Errc::invalid_argument,
                    "custom strategy chose volume '" + *chosen + "', which is not registered");
    };
  } else {
    impl->strategy_name = options.placement.strategy;
    policy = controller::policy_by_name(options.placement.strategy).value();
  }
  controller::ControllerOptions copts;
  copts.replicas = static_cast<std::uint32_t>(options.placement.replicas);
  copts.repair_share = options.placement.repair_share;
  copts.rebuild_grace = options.limits.rebuild_timeout;
  copts.took_over = !options.standby_of.empty() || restarts(impl->state_dir.get());
  impl->controller = controller::spawn_controller(sys, copts);
  impl->strategy = controller::spawn_strategy(sys, std::move(policy));
  impl->owned.push_back(caf::actor_cast<caf::actor>(impl->controller));
  impl->owned.push_back(caf::actor_cast<caf::actor>(impl->strategy));
  MESHSTORE_RETURN_IF_ERROR(impl->host_volumes(true));
  if (!options.listen.empty()) {
    impl->directory =
        controller::spawn_directory(sys, impl->controller, impl->strategy, impl->strategy_name);
    impl->owned.push_back(caf::actor_cast<caf::actor>(impl->directory));
    auto port = internal::publish_actor(sys, impl->directory, listen.port, listen.host, true);
    if (!port.ok()) return port.status().with_context("cannot listen on " + options.listen);
    impl->port = *port;
    impl->address = listen.host + ":" + std::to_string(*port);
    internal::warn_if_exposed(listen.host, *port, "the store", impl->runtime->tls());
    if (impl->state_dir) MESHSTORE_RETURN_IF_ERROR(impl->state_dir->serving(impl->address));
  }
  impl->start_client();
  log::get("store")->info(
      "store up: strategy {}, {} volume(s) here, {}", options.placement.strategy,
      impl->volumes.size(),
      impl->address.empty() ? std::string("not listening") : "listening on " + impl->address);
  MESHSTORE_RETURN_IF_ERROR(impl->serve_metrics());
  return Store(std::move(impl));
}

Result<Store> Store::connect_on(std::shared_ptr<internal::ActorRuntime> runtime,
                                const std::string& address, StoreOptions options,
                                const internal::StoreDirectory* via) {
  ForeignThreadGuard guard;  // as in embedded()
  auto servers = servers_of(address);
  if (!servers.ok()) return servers.status();
  if (!options.standby_of.empty()) {
    return Status(Errc::invalid_argument,
                  "connect: StoreOptions::standby_of is for a store that serves (embedded)");
  }
  auto target = parse_address(servers->front());
  auto started = Impl::start(options, true, std::move(runtime));
  if (!started.ok()) return started.status();
  auto impl = std::move(started).value();
  impl->data_host = internal::local_address_towards(target->host);
  auto& sys = impl->runtime->system();
  auto log = log::get("store");

  protocol::directory_actor directory;
  if (via) {
    // Handed over a connection this process has: it is in a mesh whose
    // processes are connected to each other already, so its volumes open
    // no door (a second connection breaks CAF 0.17's TLS links).
    impl->doors = false;
    directory = via->handle;
  } else {
    auto reached = reach_one(sys, *servers, options.limits.connect_timeout);
    if (!reached.ok()) return reached.status().with_context("connect");
    directory = std::move(reached).value();
  }
  store::VolumeHost answer;
  const Status hello = store::ask_directory(sys, directory, options.limits.request_timeout,
                                            "connect to " + address, &answer);
  impl->controller = std::move(answer.controller);
  impl->strategy = std::move(answer.strategy);
  impl->strategy_name = std::move(answer.strategy_name);
  directory = nullptr;
  if (!hello.ok()) return hello;
  // Made first: the volumes hosted here wait for a failover's controller
  // when there is one to wait for.
  if ((!via || via->relays) && options.limits.reconnect_timeout.count() > 0) {
    impl->servers = *servers;
    if (via) impl->relay = via->handle;
    impl->reconnector = std::make_shared<store::Reconnector>(
        *servers, options.limits.reconnect_timeout,
        [raw = impl.get()](const std::string& at, std::chrono::milliseconds slice) {
          return raw->rejoin(at, slice);
        },
        [raw = impl.get()](const std::string& why) {
          caf::actor me;
          {
            std::shared_lock<std::shared_mutex> lock(raw->mu);
            me = raw->client;
          }
          if (me) client::reconnect_failed(me, why);
        });
  }
  if (options.placement.host_volumes) MESHSTORE_RETURN_IF_ERROR(impl->host_volumes(false));
  impl->start_client();
  log->info("connected to {} as rank {} (strategy {}, {} volume(s) here)", address,
            options.placement.rank, impl->strategy_name, impl->volumes.size());
  MESHSTORE_RETURN_IF_ERROR(impl->serve_metrics());
  return Store(std::move(impl));
}

Result<Store> Store::from_env(StoreOptions options) {
  auto env = LaunchEnv::from_env();
  if (!env.ok()) return env.status().with_context("Store::from_env");
  options.placement.rank = env->rank;
  options.placement.local_rank = env->local_rank;
  if (!options.security.tls.enabled()) options.security.tls = TlsOptions::from_env();
  if (const char* e = std::getenv("MESHSTORE_FAST_PATH_SPIN_US"); e && *e) {
    auto us = internal::parse_int("MESHSTORE_FAST_PATH_SPIN_US", e, 0, 1000000);
    if (!us.ok()) return us.status().with_context("Store::from_env");
    options.transport.fast_path_spin = std::chrono::microseconds(*us);
  }
  if (const char* e = std::getenv("MESHSTORE_ENCRYPT_TCP"); e && std::string(e) == "1") {
    options.security.encrypt_tcp = true;
  }
  auto port = env->service_port("MESHSTORE_PORT", 1);
  if (!port.ok()) return port.status().with_context("Store::from_env");
  const std::string address = env->master_addr + ":" + std::to_string(*port);
  if (env->rank == 0) {
    options.listen = address;
    return embedded(std::move(options));
  }
  return connect(address, std::move(options));
}

Status Store::Impl::rejoin(const std::string& server, std::chrono::milliseconds slice) {
  std::shared_ptr<internal::ActorRuntime> rt;
  std::vector<Registered> mine;
  caf::actor me;
  caf::actor_addr gone;  // the controller that went down
  {
    std::shared_lock<std::shared_mutex> lock(mu);
    if (closed) return Status(Errc::shutdown, "the store is closed");
    rt = runtime;
    mine = registered;
    me = client;
    // Through a relay only: a server started again has a new controller.
    if (relay) gone = controller.address();
  }
  auto& sys = rt->system();
  // Through a relay directory: it answers once the controller that its
  // ProcMesh started again handed itself over.
  protocol::directory_actor directory = relay;
  if (!directory) {
    auto target = parse_address(server);
    if (!target.ok()) return target.status();
    // One bounded attempt: a request to the middleman's connector, which
    // answers within `slice` even when the connection attempt itself hangs
    // (remote_actor has no deadline: close() would wait on it).
    caf::scoped_actor self{sys};
    Status reached(Errc::unavailable, "no answer from " + server);
    self->request(internal::connector(sys), slice, caf::connect_atom::value, target->host,
                  target->port)
        .receive(
            [&](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
              directory = caf::actor_cast<protocol::directory_actor>(std::move(ptr));
              if (directory) reached = Status();
            },
            [&](caf::error& e) {
              reached = Status(Errc::unavailable,
                               "no meshstore answered at " + server + ": " + sys.render(e));
            });
    MESHSTORE_RETURN_IF_ERROR(reached);
  }
  store::VolumeHost answer;
  MESHSTORE_RETURN_IF_ERROR(
      store::ask_directory(sys, directory, slice, "reconnect to " + server, &answer, gone));
  // The new controller rebuilds its index from the records these volumes
  // keep as each registers (an attempt cut short may have registered some
  // already: registering the same volume again answers OK).
  const auto timeout =
      std::min(options.limits.request_timeout, std::chrono::milliseconds(std::chrono::seconds(10)));
  auto again = [&](const auto& at, const Registered& r) {
    return store::ask_ok(sys, at, timeout, "register volume '" + r.info.volume_id + "' again",
                         protocol::register_volume_atom::value, r.info, r.handle);
  };
  for (const auto& r : mine) {
    MESHSTORE_RETURN_IF_ERROR(again(answer.controller, r));
    if (r.with_strategy) MESHSTORE_RETURN_IF_ERROR(again(answer.strategy, r));
  }
  {
    std::unique_lock<std::shared_mutex> lock(mu);
    if (closed) return Status(Errc::shutdown, "the store is closed");
    controller = answer.controller;
    strategy = answer.strategy;
  }
  caf::anon_send(me, protocol::reconnected_atom::value, std::move(answer.controller),
                 std::move(answer.strategy));
  return Status();
}

void Store::Impl::close() {
  // The metrics server goes first, waiting for requests in flight: they
  // reach this Impl through a plain pointer.
  std::unique_ptr<store::MetricsServer> metrics_stopping;
  {
    std::unique_lock<std::shared_mutex> lock(mu);
    metrics_stopping = std::move(metrics_server);
  }
  metrics_stopping.reset();
  // Reconnecting ends next: it asks actors of the runtime that goes.
  if (reconnector) reconnector->stop();
  // The listener goes first: a process that connects while this store
  // closes (a rank starting the next store on the same port) is refused
  // and retries, instead of reaching actors that are going away.
  stop_listening();
  // The rings go next: reads over them end, and the volumes' ring
  // threads see their client close at once.
  if (fast) fast->close();
  std::shared_ptr<internal::ActorRuntime> doomed;
  std::vector<caf::actor> stopping;
  std::vector<std::function<void()>> closing;
  {
    std::unique_lock<std::shared_mutex> lock(mu);
    if (closed) return;
    closed = true;
    // Stop this process's actors (remote controllers and strategies are
    // not ours to stop): the client first, so no new transfer starts; the
    // controller next, so it handles its exit before any volume it
    // indexes goes down (it would warn of keys lost); then the rest, last
    // spawned first. Each actor's pending work ends with an error as its
    // peers go away.
    std::vector<caf::actor> order(owned.rbegin(), owned.rend());  // client first
    auto local = std::find_if(order.begin(), order.end(), [&](const caf::actor& a) {
      return a.address() == controller.address();
    });
    if (local != order.end() && local != order.begin()) {
      std::rotate(order.begin() + 1, local, local + 1);
    }
    stopping = std::move(order);  // waited for below, outside the lock
    closing = std::move(on_close);
    // Handles must be gone before the actor system, or its shutdown waits forever.
    owned.clear();
    client = nullptr;
    volumes.clear();
    for (auto& l : lending) l = Lending{};
    registered.clear();
    directory = nullptr;
    relay = nullptr;
    strategy = nullptr;
    controller = nullptr;
    doomed = std::move(runtime);
  }
  if (doomed) {
    // The process's runtime stays up: wait (bounded) until this store's
    // actors are gone, as the destruction of an own runtime would.
    const auto late = internal::stop_actors(doomed->system(), stopping, std::chrono::seconds(30));
    if (late > 0) {
      log::get("store")->warn("close: {} of this store's actors did not stop within 30 s", late);
    }
    stopping.clear();
  }
  // Outside the lock: a continuation running on an actor thread may call
  // into the store meanwhile (and get Errc::shutdown) instead of blocking
  // a thread this shutdown waits for.
  doomed.reset();
  for (auto& f : closing) f();
  // Closed cleanly: the next server from this directory starts afresh.
  state_dir.reset();
}

}  // namespace meshstore
