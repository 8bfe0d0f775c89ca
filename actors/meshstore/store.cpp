#include "meshstore/store.hpp"

#include <unistd.h>

#include <set>
#include <shared_mutex>

#include "meshstore/actors/actor_types.hpp"
#include "meshstore/actors/client.hpp"
#include "meshstore/actors/controller_actor.hpp"
#include "meshstore/actors/storage_volume_actor.hpp"
#include "meshstore/actors/strategy_actor.hpp"
#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/transports/registry.hpp"

namespace meshstore {

namespace actors {

void add_actor_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<transports::EndpointInfo>("meshstore::transports::EndpointInfo");
  cfg.add_message_type<storage_volume_actor>("meshstore::actors::storage_volume_actor");
}

}  // namespace actors

namespace {

constexpr std::size_t kMaxKeyBytes = 4096;

Status check_key(const std::string& op, const std::string& key) {
  if (key.empty()) return Status(Errc::invalid_argument, op + ": key is empty");
  if (key.size() > kMaxKeyBytes) {
    return Status(Errc::invalid_argument, op + ": key of " + std::to_string(key.size()) +
                                              " bytes is longer than the limit of " +
                                              std::to_string(kMaxKeyBytes) + " (starts '" +
                                              key.substr(0, 32) + "')");
  }
  if (key.find('\0') != std::string::npos) {
    return Status(Errc::invalid_argument,
                  op + ": key '" + key.substr(0, key.find('\0')) + "...' contains a NUL byte");
  }
  return Status();
}

Status check_keys(const std::string& op, const std::vector<std::string>& keys, bool unique) {
  std::set<std::string> seen;
  for (const auto& k : keys) {
    MESHSTORE_RETURN_IF_ERROR(check_key(op, k));
    if (unique && !seen.insert(k).second) {
      return Status(Errc::invalid_argument, op + ": key '" + k + "' appears twice");
    }
  }
  return Status();
}

Status check_view(const std::string& op, const std::string& key, const TensorView& view) {
  const std::string what = op + " '" + key + "'";
  MESHSTORE_RETURN_IF_ERROR(view.validate(what));
  if (view.device().type != DeviceType::cpu) {
    return Status(Errc::unsupported, what + ": device " + view.device().to_string() +
                                         " tensors are not supported yet (CPU only)");
  }
  return Status();
}

std::string hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

template <class T>
Future<T> closed_future(const std::string& what) {
  return make_error_future<T>(
      Status(Errc::shutdown, what + ": the store is closed (or moved from)"));
}

template <class T>
std::shared_ptr<Promise<T>> make_promise(const std::string& what) {
  return std::make_shared<Promise<T>>(
      Status(Errc::shutdown, what + ": the store was closed before the operation completed"));
}

}  // namespace

Status StoreOptions::validate() const {
  auto bad = [](const std::string& m) {
    return Status(Errc::invalid_argument, "StoreOptions: " + m);
  };
  if (num_volumes < 1 || num_volumes > 1024) {
    return bad("num_volumes must be in [1, 1024], got " + std::to_string(num_volumes));
  }
  if (rank < 0) return bad("rank must be >= 0, got " + std::to_string(rank));
  if (auto p = actors::policy_by_name(strategy); !p.ok()) return bad(p.status().message());
  if (!transport.empty()) {
    if (auto f = transports::builtin_registry().find(transport); !f.ok()) {
      return bad("transport: " + f.status().message());
    }
  }
  transports::TransportConfig tc;
  tc.rpc_chunk_bytes = rpc_chunk_bytes;
  tc.rpc_chunks_in_flight = rpc_chunks_in_flight;
  tc.request_timeout = request_timeout;
  if (auto s = tc.validate(); !s.ok()) return bad(s.message());
  if (scheduler_threads < 0 || scheduler_threads > 256) {
    return bad("scheduler_threads must be in [0, 256], got " + std::to_string(scheduler_threads));
  }
  if (!log_level.empty()) {
    if (auto l = log::parse_level(log_level); !l.ok()) return bad(l.status().message());
  }
  return Status();
}

struct Store::Impl {
  StoreOptions options;
  std::unique_ptr<internal::ActorRuntime> runtime;
  mutable std::shared_mutex mu;  // guards closed and the handles below
  bool closed = false;
  caf::actor client;
  actors::controller_actor controller;
  actors::strategy_actor strategy;
  std::vector<actors::storage_volume_actor> volumes;

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

  static Future<actors::GetOutput> get(Impl* impl, actors::GetCall call, const std::string& what);

  void close() {
    std::unique_ptr<internal::ActorRuntime> doomed;
    {
      std::unique_lock<std::shared_mutex> lock(mu);
      if (closed) return;
      closed = true;
      // Stop the client first so no new transfer starts, then the rest.
      // Each actor's pending work ends with an error as its peers go away.
      if (client) caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
      for (auto& v : volumes) caf::anon_send_exit(v, caf::exit_reason::user_shutdown);
      if (strategy) caf::anon_send_exit(strategy, caf::exit_reason::user_shutdown);
      if (controller) caf::anon_send_exit(controller, caf::exit_reason::user_shutdown);
      // Handles must be gone before the actor system, or its shutdown waits forever.
      client = nullptr;
      volumes.clear();
      strategy = nullptr;
      controller = nullptr;
      doomed = std::move(runtime);
    }
    // Outside the lock: a continuation running on an actor thread may call
    // into the store meanwhile (and get Errc::shutdown) instead of blocking
    // a thread this shutdown waits for.
    doomed.reset();
  }
};

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;
Store::~Store() = default;

Result<Store> Store::embedded(StoreOptions options) {
  MESHSTORE_RETURN_IF_ERROR(options.validate());
  if (!options.log_level.empty()) MESHSTORE_RETURN_IF_ERROR(log::set_level(options.log_level));
  internal::RuntimeOptions ro;
  ro.scheduler_threads = options.scheduler_threads;
  ro.add_types = actors::add_actor_types;
  auto runtime = internal::ActorRuntime::create(ro);
  if (!runtime.ok()) return runtime.status();

  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->runtime = std::move(runtime).value();
  auto& sys = impl->runtime->system();

  transports::TransportConfig tc;
  tc.rpc_chunk_bytes = options.rpc_chunk_bytes;
  tc.rpc_chunks_in_flight = options.rpc_chunks_in_flight;
  tc.request_timeout = options.request_timeout;

  impl->controller = actors::spawn_controller(sys);
  impl->strategy = actors::spawn_strategy(sys, actors::policy_by_name(options.strategy).value());
  const std::string host = hostname();
  {
    caf::scoped_actor self{sys};
    for (int i = 0; i < options.num_volumes; ++i) {
      actors::VolumeConfig vc;
      vc.volume_id = "volume-" + std::to_string(i);
      vc.host = host;
      vc.capacity_bytes = options.volume_capacity_bytes;
      vc.transport_config = tc;
      auto volume = actors::spawn_storage_volume(sys, vc);
      if (!volume.ok()) return volume.status();
      wire::VolumeInfo info{vc.volume_id, host, vc.capacity_bytes,
                            transports::builtin_registry().names()};
      Status registered;
      for (auto target : {caf::actor_cast<caf::actor>(impl->controller),
                          caf::actor_cast<caf::actor>(impl->strategy)}) {
        self->request(target, options.request_timeout, actors::register_volume_atom::value, info,
                      *volume)
            .receive([](caf::ok_atom) {},
                     [&](caf::error& e) {
                       registered = internal::from_caf_error(e, "register " + vc.volume_id);
                     });
        if (!registered.ok()) return registered;
      }
      impl->volumes.push_back(std::move(volume).value());
    }
  }
  actors::ClientConfig cc;
  cc.me = wire::ClientInfo{options.rank, options.rank, host};
  cc.forced_transport = options.transport;
  cc.transport_config = tc;
  cc.request_timeout = options.request_timeout;
  impl->client = actors::spawn_client(sys, cc, impl->controller, impl->strategy);
  log::get("store")->info("embedded store up: {} volume(s), strategy {}, {} scheduler threads",
                          options.num_volumes, options.strategy,
                          impl->runtime->scheduler_threads());
  return Store(std::move(impl));
}

// -- tensors -------------------------------------------------------------

Future<void> Store::put(std::string key, const TensorView& tensor) {
  std::vector<std::pair<std::string, TensorView>> items;
  items.emplace_back(std::move(key), tensor);
  auto call_items = std::move(items);
  if (auto s = check_key("put", call_items.front().first); !s.ok())
    return make_error_future<void>(s);
  if (auto s = check_view("put", call_items.front().first, tensor); !s.ok())
    return make_error_future<void>(s);
  actors::PutCall call;
  call.op = "put";
  call.items.push_back(
      actors::PutItem{call_items.front().first, tensor, wire::ObjectKind::tensor, nullptr});
  const std::string what = "put '" + call_items.front().first + "'";
  call.promise = make_promise<std::vector<std::uint64_t>>(what);
  auto fut = call.promise->future();
  if (!Impl::send(impl_.get(), actors::store_put_atom::value, std::move(call)))
    return closed_future<void>(what);
  return fut.then([](const std::vector<std::uint64_t>&) {});
}

Future<void> Store::put_batch(std::vector<std::pair<std::string, TensorView>> items) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : items) keys.push_back(k);
  if (auto s = check_keys("put_batch", keys, true); !s.ok()) return make_error_future<void>(s);
  actors::PutCall call;
  call.op = "put_batch";
  for (auto& [k, v] : items) {
    if (auto s = check_view("put_batch", k, v); !s.ok()) return make_error_future<void>(s);
    call.items.push_back(actors::PutItem{std::move(k), v, wire::ObjectKind::tensor, nullptr});
  }
  if (call.items.empty()) return make_ready_future();
  const std::string what = "put_batch of " + std::to_string(call.items.size()) + " keys";
  call.promise = make_promise<std::vector<std::uint64_t>>(what);
  auto fut = call.promise->future();
  if (!Impl::send(impl_.get(), actors::store_put_atom::value, std::move(call)))
    return closed_future<void>(what);
  return fut.then([](const std::vector<std::uint64_t>&) {});
}

Future<actors::GetOutput> Store::Impl::get(Impl* impl, actors::GetCall call,
                                           const std::string& what) {
  call.promise = make_promise<actors::GetOutput>(what);
  auto fut = call.promise->future();
  if (!send(impl, actors::store_get_atom::value, std::move(call)))
    return closed_future<actors::GetOutput>(what);
  return fut;
}

Future<Tensor> Store::get(std::string key) {
  if (auto s = check_key("get", key); !s.ok()) return make_error_future<Tensor>(s);
  actors::GetCall call;
  call.op = "get";
  call.mode = actors::GetMode::tensor;
  call.keys.push_back(key);
  return Impl::get(impl_.get(), std::move(call), "get '" + key + "'")
      .then([](const actors::GetOutput& out) { return out.tensors.front(); });
}

Future<std::vector<Tensor>> Store::get_batch(std::vector<std::string> keys) {
  if (auto s = check_keys("get_batch", keys, false); !s.ok())
    return make_error_future<std::vector<Tensor>>(s);
  if (keys.empty()) return make_ready_future(std::vector<Tensor>{});
  actors::GetCall call;
  call.op = "get_batch";
  call.mode = actors::GetMode::tensor;
  call.keys = std::move(keys);
  return Impl::get(impl_.get(), std::move(call), "get_batch")
      .then([](const actors::GetOutput& out) { return out.tensors; });
}

Future<void> Store::get_into(std::string key, const TensorView& dst) {
  std::vector<std::pair<std::string, TensorView>> items;
  items.emplace_back(std::move(key), dst);
  return get_into_batch(std::move(items));
}

Future<void> Store::get_into_batch(std::vector<std::pair<std::string, TensorView>> items) {
  const std::string op = items.size() == 1 ? "get_into" : "get_into_batch";
  actors::GetCall call;
  call.op = op;
  call.mode = actors::GetMode::into;
  for (auto& [k, v] : items) {
    call.keys.push_back(k);
    call.dsts.push_back(v);
  }
  if (auto s = check_keys(op, call.keys, false); !s.ok()) return make_error_future<void>(s);
  for (std::size_t i = 0; i < call.keys.size(); ++i) {
    if (auto s = check_view(op, call.keys[i], call.dsts[i]); !s.ok())
      return make_error_future<void>(s);
  }
  if (call.keys.empty()) return make_ready_future();
  const std::string what = items.size() == 1 ? op + " '" + call.keys.front() + "'" : op;
  return Impl::get(impl_.get(), std::move(call), what).then([](const actors::GetOutput&) {});
}

// -- objects -------------------------------------------------------------

Future<void> Store::put_object(std::string key, std::string bytes) {
  if (auto s = check_key("put_object", key); !s.ok()) return make_error_future<void>(s);
  auto owned = std::make_shared<const std::string>(std::move(bytes));
  TensorView view(const_cast<char*>(owned->data()), DType::uint8,
                  {static_cast<std::int64_t>(owned->size())});
  actors::PutCall call;
  call.op = "put_object";
  call.items.push_back(actors::PutItem{key, view, wire::ObjectKind::object, owned});
  const std::string what = "put_object '" + key + "'";
  call.promise = make_promise<std::vector<std::uint64_t>>(what);
  auto fut = call.promise->future();
  if (!Impl::send(impl_.get(), actors::store_put_atom::value, std::move(call)))
    return closed_future<void>(what);
  return fut.then([](const std::vector<std::uint64_t>&) {});
}

Future<std::string> Store::get_object(std::string key) {
  if (auto s = check_key("get_object", key); !s.ok()) return make_error_future<std::string>(s);
  actors::GetCall call;
  call.op = "get_object";
  call.mode = actors::GetMode::object;
  call.keys.push_back(key);
  return Impl::get(impl_.get(), std::move(call), "get_object '" + key + "'")
      .then([](const actors::GetOutput& out) { return out.object; });
}

// -- key space -----------------------------------------------------------

Future<std::vector<std::string>> Store::keys(std::string prefix) {
  if (prefix.find('\0') != std::string::npos) {
    return make_error_future<std::vector<std::string>>(
        Status(Errc::invalid_argument, "keys: prefix contains a NUL byte"));
  }
  actors::KeysCall call;
  const std::string what = "keys '" + prefix + "'";
  call.prefix = std::move(prefix);
  call.promise = make_promise<std::vector<std::string>>(what);
  auto fut = call.promise->future();
  if (!Impl::send(impl_.get(), actors::store_keys_atom::value, std::move(call))) {
    return closed_future<std::vector<std::string>>(what);
  }
  return fut;
}

Future<bool> Store::exists(std::string key) {
  if (auto s = check_key("exists", key); !s.ok()) return make_error_future<bool>(s);
  actors::ExistsCall call;
  const std::string what = "exists '" + key + "'";
  call.keys.push_back(std::move(key));
  call.promise = make_promise<std::vector<std::uint64_t>>(what);
  auto fut = call.promise->future();
  if (!Impl::send(impl_.get(), actors::store_exists_atom::value, std::move(call)))
    return closed_future<bool>(what);
  return fut.then([](const std::vector<std::uint64_t>& v) { return !v.empty() && v.front() != 0; });
}

Future<void> Store::remove(std::string key) {
  if (auto s = check_key("remove", key); !s.ok()) return make_error_future<void>(s);
  actors::RemoveCall call;
  const std::string what = "remove '" + key + "'";
  call.keys.push_back(std::move(key));
  call.single = true;
  call.promise = make_promise<std::size_t>(what);
  auto fut = call.promise->future();
  if (!Impl::send(impl_.get(), actors::store_remove_atom::value, std::move(call)))
    return closed_future<void>(what);
  return fut.then([](std::size_t) {});
}

Future<std::size_t> Store::remove_batch(std::vector<std::string> keys) {
  if (auto s = check_keys("remove_batch", keys, false); !s.ok())
    return make_error_future<std::size_t>(s);
  if (keys.empty()) return make_ready_future<std::size_t>(0);
  actors::RemoveCall call;
  const std::string what = "remove_batch of " + std::to_string(keys.size()) + " keys";
  call.keys = std::move(keys);
  call.promise = make_promise<std::size_t>(what);
  auto fut = call.promise->future();
  if (!Impl::send(impl_.get(), actors::store_remove_atom::value, std::move(call)))
    return closed_future<std::size_t>(what);
  return fut;
}

// -- operations ----------------------------------------------------------

Future<std::vector<VolumeStats>> Store::stats() {
  actors::StatCall call;
  call.promise = make_promise<std::vector<wire::VolumeStat>>("stats");
  auto fut = call.promise->future();
  if (!Impl::send(impl_.get(), actors::store_stat_atom::value, std::move(call))) {
    return closed_future<std::vector<VolumeStats>>("stats");
  }
  return fut.then([](const std::vector<wire::VolumeStat>& in) {
    std::vector<VolumeStats> out;
    for (const auto& s : in) {
      out.push_back(
          VolumeStats{s.volume_id, s.bytes_held, s.capacity_bytes, s.objects, s.staged, s.leases});
    }
    return out;
  });
}

std::vector<std::string> Store::available_transports() {
  return transports::builtin_registry().names();
}

void Store::close() {
  if (impl_) impl_->close();
}

bool Store::closed() const noexcept {
  if (!impl_) return true;
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  return impl_->closed;
}

}  // namespace meshstore
