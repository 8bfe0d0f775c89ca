// The Store facade's own calls: tensors, objects, the key space, close
// (admin(): admin.cpp; state dicts: store_state_dict.cpp).

#include "meshstore/store.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/client/calls.hpp"
#include "meshstore/client/channel_put.hpp"
#include "meshstore/client/client.hpp"
#include "meshstore/client/fast_path.hpp"
#include "meshstore/protocol/checks.hpp"
#include "meshstore/protocol/limits.hpp"
#include "meshstore/protocol/wire_glue.hpp"
#include "meshstore/store/device_staging.hpp"
#include "meshstore/store/fast_reads.hpp"
#include "meshstore/store/metrics.hpp"
#include "meshstore/store/store_impl.hpp"

namespace meshstore {

namespace {

using client::bytes_item;
using client::single_get;
using protocol::check_key;
using protocol::check_keys;
using protocol::check_view;
using store::staging;

// The last step of a get_into: device destinations get their bytes from
// the host staging, a copy into the caller's buffers that a cancel waits
// for (or that a cancel before it skips).
Status finish_into(const store::DeviceStaging& st, internal::CallGuard& guard,
                   const std::string& what) {
  if (!guard.enter_final()) return Status(Errc::cancelled, what + ": cancelled");
  auto s = st.finish();
  guard.leave();
  return s;
}

using FastOutcome = client::FastPath::Outcome;
using store::fast_every_key;
using store::fast_get_into;
using store::fast_get_object;
using store::fast_get_tensor;
using store::fits_into;

// Whole tensors or objects (`items`, in host or GPU memory) put over the
// client's channel to its volume, on the caller's thread
// (docs/internals/data-path-small-ops.md, "Puts on the caller's thread"):
// one commit request, all or none, with their bytes inline when they fit one
// message, else written first into objects the volume stages for them
// (client::put_over_channel; sent over tcp and more than
// limits::kStagedAheadBytes: from the client's waiting thread). Done, the
// keys are in the client's one location cache, so this process's reads see
// them. A client without a channel yet (its first put) has one opened from
// the waiting thread, and the put then takes it; where none can be had, why
// is the put's answer, as a refusal is. A `cancellable` put left to the
// waiting thread is cancelled through its future (Future::cancel). Shards of
// sharded keys (items with a slice) commit as the controller's put_shards
// does: each key once every rank's shards cover it.
// `fast` null: the store was closed (moved from).
Future<void> put_on_channel(client::FastPath* fast, std::chrono::milliseconds timeout,
                            std::vector<client::PutItem> items, const std::string& what,
                            bool cancellable) {
  if (fast == nullptr) return client::closed_future<void>(what);
  client::ChannelPut c;
  c.what = what;
  c.slot = std::string(2, '\0');  // apart from state dicts' and versions' slots
  c.whole_key = true;
  c.refusals_final = true;
  for (auto& item : items) {
    c.slot += item.key;
    if (item.slice) {
      c.sharded = true;
      c.slot += item.slice->to_string();
    } else {
      // Only over the version this client saw last, when it saw one: a put
      // that reaches the controller late (its channel timed out, the call
      // failed, and the caller put again meanwhile) is refused rather than
      // roll the key back. A live put refused so (another writer moved the
      // key on) goes again unfenced (ChannelPut::cache_fenced).
      item.expect_version = fast->cache().version(item.key);
      if (item.expect_version) c.cache_fenced.push_back(c.groups.size());
    }
    c.slot.push_back('\0');
    c.groups.emplace_back();
  }
  c.items = std::move(items);
  return client::put_over_channel_or_defer<void>(
      *fast, what,
      [fast, c = std::move(c), timeout](bool* defer,
                                        const auto& guard) -> std::optional<Future<void>> {
        auto done = client::put_over_channel(*fast, c, timeout, defer, guard);
        if (!done) return std::nullopt;
        return done->ok() ? make_ready_future() : make_error_future<void>(done->status());
      },
      cancellable);
}

}  // namespace

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;
Store::~Store() = default;

Store::StateDicts Store::state_dicts() const { return StateDicts(impl_); }
Store::Admin Store::admin() const { return Admin(impl_); }

// -- tensors -------------------------------------------------------------

Future<void> Store::put(std::string key, const TensorView& tensor, const PutOptions& options) {
  const store::Meter meter(Impl::metered(impl_.get()), store::Op::put);
  return meter([&]() -> Future<void> {
    if (auto s = check_key("put", key); !s.ok()) return make_error_future<void>(s);
    if (options.slice && options.placement) {
      return make_error_future<void>(Status(
          Errc::invalid_argument, "put '" + key + "': both a slice and a placement; give one"));
    }
    if (options.replicas > 16) {
      return make_error_future<void>(
          Status(Errc::invalid_argument, "put '" + key + "': replicas must be in [1, 16], got " +
                                             std::to_string(options.replicas)));
    }
    if (options.replicas != 0 && (options.slice || options.placement)) {
      return make_error_future<void>(Status(
          Errc::invalid_argument, "put '" + key +
                                      "': replicas with a slice or placement; copies are of "
                                      "keys put whole (a placement's replicas are its own)"));
    }
    if (options.slice) return put_shard(std::move(key), tensor, *options.slice, 1);
    if (options.placement) {
      auto mine = options.placement->shard_for(options.global_shape, options.rank);
      if (!mine.ok())
        return make_error_future<void>(mine.status().with_context("put '" + key + "'"));
      return put_shard(std::move(key), tensor, mine->slice, mine->replicas);
    }
    if (!options.global_shape.empty() || options.rank != 0) {
      return make_error_future<void>(Status(
          Errc::invalid_argument, "put '" + key + "': a global shape or rank without a placement"));
    }
    if (auto s = check_view("put", key, tensor); !s.ok()) return make_error_future<void>(s);
    auto st = staging("put");
    auto host = st->source(tensor, key);
    if (!host.ok()) return make_error_future<void>(host.status());
    // The bytes live as long as the put: the caller's, or staged in `st`.
    client::PutItem item{key, *host, wire::ObjectKind::tensor, st};
    item.copies = options.replicas;
    return put_on_channel(
        impl_ ? impl_->fast.get() : nullptr,
        impl_ ? impl_->options.limits.request_timeout : std::chrono::milliseconds(0), {item},
        "put '" + key + "'", true);
  }());
}

Future<void> Store::put_shard(std::string key, const TensorView& shard, const TensorSlice& slice,
                              std::uint32_t replicas) {
  const std::string op = "put";
  if (auto s = check_key(op, key); !s.ok()) return make_error_future<void>(s);
  if (auto s = check_view(op, key, shard); !s.ok()) return make_error_future<void>(s);
  if (shard.shape() != slice.local_shape()) {
    return make_error_future<void>(Status(
        Errc::shape_mismatch,
        "put '" + key + "': the shard has shape " + shape_to_string(shard.shape()) +
            ", its slice " + slice.to_string() + " needs " + shape_to_string(slice.local_shape())));
  }
  // A replicated box is checksummed on the host.
  auto st = staging(op, replicas == 1);
  auto host = st->source(shard, key);
  if (!host.ok()) return make_error_future<void>(host.status());
  // The bytes live as long as the put: the caller's, or staged in `st`.
  client::PutItem item{key, *host, wire::ObjectKind::tensor, st};
  item.slice = slice;
  item.replicas = replicas;
  // Replicas are compared by the controller: ranks holding the same box
  // must put the same bytes.
  if (replicas > 1) item.checksum = content_checksum(*host);
  return put_on_channel(
      impl_ ? impl_->fast.get() : nullptr,
      impl_ ? impl_->options.limits.request_timeout : std::chrono::milliseconds(0), {item},
      "put '" + key + "' slice " + slice.to_string(), true);
}

Future<void> Store::put_batch(std::vector<std::pair<std::string, TensorView>> items) {
  const store::Meter meter(Impl::metered(impl_.get()), store::Op::put_batch);
  return meter([&]() -> Future<void> {
    std::vector<std::string> keys;
    for (const auto& [k, v] : items) keys.push_back(k);
    if (auto s = check_keys("put_batch", keys, true); !s.ok()) return make_error_future<void>(s);
    for (auto& [k, v] : items) {
      if (auto s = check_view("put_batch", k, v); !s.ok()) return make_error_future<void>(s);
    }
    auto st = staging("put_batch");
    std::vector<client::PutItem> batch;
    for (auto& [k, v] : items) {
      auto host = st->source(v, k);
      if (!host.ok()) return make_error_future<void>(host.status());
      // The bytes live as long as the put: the caller's, or staged in `st`.
      batch.push_back(client::PutItem{std::move(k), *host, wire::ObjectKind::tensor, st});
    }
    if (batch.empty()) return make_ready_future();
    const std::string what = "put_batch of " + std::to_string(batch.size()) + " keys";
    return put_on_channel(
        impl_ ? impl_->fast.get() : nullptr,
        impl_ ? impl_->options.limits.request_timeout : std::chrono::milliseconds(0),
        std::move(batch), what, true);
  }());
}

Future<Tensor> Store::get(std::string key, const ReadOptions& options) {
  const store::Meter meter(Impl::metered(impl_.get()), store::Op::get);
  return meter([&]() -> Future<Tensor> {
    if (auto s = check_key("get", key); !s.ok()) return make_error_future<Tensor>(s);
    if (options.cast) {
      return make_error_future<Tensor>(
          Status(Errc::invalid_argument,
                 "get '" + key + "': cast converts into a destination: use get_into"));
    }
    if (options.view && options.slice) {
      return make_error_future<Tensor>(Status(
          Errc::invalid_argument, "get '" + key + "': a view of a slice; read one or the other"));
    }
    if (options.view) return get_view(std::move(key));
    if (options.slice) return get_slice(std::move(key), *options.slice);
    auto call = single_get("get", client::GetMode::tensor, key);
    if (impl_) {
      Tensor t;
      auto fast = fast_get_tensor(*impl_->fast, key, impl_->options.limits.request_timeout, &t);
      if (fast == FastOutcome::hit && t.defined()) return make_ready_future(std::move(t));
      call.fresh = fast == FastOutcome::stale;
    }
    const std::string what = "get '" + key + "'";
    return Impl::call(impl_.get(), protocol::store_get_atom::value, std::move(call), what)
        .then([](const client::GetOutput& out) { return out.tensors.front(); });
  }());
}

Future<Tensor> Store::get_slice(std::string key, const TensorSlice& slice) {
  const std::string what = "get '" + key + "' slice " + slice.to_string();
  auto call = single_get("get", client::GetMode::tensor, std::move(key));
  call.slices.push_back(slice);
  return Impl::call(impl_.get(), protocol::store_get_atom::value, std::move(call), what)
      .then([](const client::GetOutput& out) { return out.tensors.front(); });
}

Future<void> Store::get_slice_into(std::string key, const TensorView& dst,
                                   const TensorSlice& slice) {
  const std::string op = "get_into";
  const std::string what = "get_into '" + key + "' slice " + slice.to_string();
  auto st = staging(op);
  auto host = st->target(dst, key);
  if (!host.ok()) return make_error_future<void>(host.status());
  auto call = single_get(op, client::GetMode::into, std::move(key));
  call.dsts.push_back(*host);
  call.slices.push_back(slice);
  auto guard = std::make_shared<internal::CallGuard>();
  call.guard = guard;
  return Impl::call_cancellable(impl_.get(), protocol::store_get_atom::value, std::move(call), what)
      .then([st, guard, what](const client::GetOutput&) { return finish_into(*st, *guard, what); });
}

Future<Tensor> Store::get_view(std::string key) {
  const std::string what = "get_view '" + key + "'";
  return Impl::call(impl_.get(), protocol::store_get_atom::value,
                    single_get("get_view", client::GetMode::view, std::move(key)), what)
      .then([](const client::GetOutput& out) { return out.tensors.front(); });
}

Future<std::vector<Tensor>> Store::get_batch(std::vector<std::string> keys) {
  const store::Meter meter(Impl::metered(impl_.get()), store::Op::get_batch);
  return meter([&]() -> Future<std::vector<Tensor>> {
    if (auto s = check_keys("get_batch", keys, false); !s.ok())
      return make_error_future<std::vector<Tensor>>(s);
    if (keys.empty()) return make_ready_future(std::vector<Tensor>{});
    client::GetCall call;
    // Every key on the fast path, or the whole batch on the actors (checked
    // first, so that a key it cannot serve costs no copy of the others).
    bool fast_batch = impl_ != nullptr;
    for (std::size_t i = 0; fast_batch && i < keys.size(); ++i) {
      fast_batch = impl_->fast->servable(keys[i], [](const client::FastPath::Entry& e) {
        return e.kind == wire::ObjectKind::tensor;
      });
    }
    if (fast_batch) {
      std::vector<Tensor> out(keys.size());
      if (fast_every_key(keys.size(), &call.fresh, [&](std::size_t i) {
            auto fast = fast_get_tensor(*impl_->fast, keys[i],
                                        impl_->options.limits.request_timeout, &out[i]);
            return fast == FastOutcome::hit && !out[i].defined() ? FastOutcome::miss : fast;
          })) {
        return make_ready_future(std::move(out));
      }
    }
    call.op = "get_batch";
    call.mode = client::GetMode::tensor;
    call.keys = std::move(keys);
    return Impl::call(impl_.get(), protocol::store_get_atom::value, std::move(call), "get_batch")
        .then([](const client::GetOutput& out) { return out.tensors; });
  }());
}

Future<void> Store::get_into(std::string key, const TensorView& dst, const ReadOptions& options) {
  const store::Meter meter(Impl::metered(impl_.get()), store::Op::get_into);
  return meter([&]() -> Future<void> {
    if (options.view || options.slice) {
      const std::string op = "get_into";
      if (auto s = check_key(op, key); !s.ok()) return make_error_future<void>(s);
      if (options.view) {
        return make_error_future<void>(Status(
            Errc::invalid_argument, "get_into '" + key + "': a view is get()'s; get_into copies"));
      }
      if (options.cast) {
        return make_error_future<void>(Status(
            Errc::unsupported, "get_into '" + key + "': cast reads whole keys, not a slice"));
      }
      if (auto s = check_view(op, key, dst); !s.ok()) return make_error_future<void>(s);
      return get_slice_into(std::move(key), dst, *options.slice);
    }
    std::vector<std::pair<std::string, TensorView>> items;
    items.emplace_back(std::move(key), dst);
    return get_into_items(std::move(items), options);
  }());
}

Future<void> Store::get_into_batch(std::vector<std::pair<std::string, TensorView>> items) {
  const store::Meter meter(Impl::metered(impl_.get()), store::Op::get_into_batch);
  return meter([&]() -> Future<void> { return get_into_items(std::move(items), ReadOptions{}); }());
}

Future<void> Store::get_into_items(std::vector<std::pair<std::string, TensorView>> items,
                                   const ReadOptions& options) {
  const std::string op = items.size() == 1 ? "get_into" : "get_into_batch";
  client::GetCall call;
  call.op = op;
  call.mode = client::GetMode::into;
  call.cast = options.cast;
  for (auto& [k, v] : items) {
    call.keys.push_back(k);
    call.dsts.push_back(v);
  }
  if (auto s = check_keys(op, call.keys, false); !s.ok()) return make_error_future<void>(s);
  for (std::size_t i = 0; i < call.keys.size(); ++i) {
    if (auto s = check_view(op, call.keys[i], call.dsts[i]); !s.ok())
      return make_error_future<void>(s);
    if (options.cast && call.dsts[i].device().type != DeviceType::cpu) {
      return make_error_future<void>(
          Status(Errc::unsupported, op + " '" + call.keys[i] +
                                        "': a cast read goes into host memory, not " +
                                        call.dsts[i].device().to_string()));
    }
  }
  if (call.keys.empty()) return make_ready_future();
  // Every key on the fast path, or the whole call on the actors: a batch
  // first checks each destination against its key's cached record, so one
  // that does not fit moves no byte (the actors report it). A read that
  // finds its object replaced sends the call to the actors, which write
  // every destination again.
  bool fast_batch = impl_ != nullptr;
  for (std::size_t i = 0; fast_batch && call.keys.size() > 1 && i < call.keys.size(); ++i) {
    const auto& dst = call.dsts[i];
    fast_batch = impl_->fast->servable(
        call.keys[i], [&dst](const client::FastPath::Entry& e) { return fits_into(e, dst); });
  }
  if (fast_batch && fast_every_key(call.keys.size(), &call.fresh, [&](std::size_t i) {
        return fast_get_into(*impl_->fast, call.keys[i], impl_->options.limits.request_timeout,
                             call.dsts[i]);
      })) {
    return make_ready_future();
  }
  auto st = staging(op);
  for (std::size_t i = 0; i < call.keys.size(); ++i) {
    auto host = st->target(call.dsts[i], call.keys[i]);
    if (!host.ok()) return make_error_future<void>(host.status());
    call.dsts[i] = *host;
  }
  const std::string what = items.size() == 1 ? op + " '" + call.keys.front() + "'" : op;
  auto guard = std::make_shared<internal::CallGuard>();
  call.guard = guard;
  return Impl::call_cancellable(impl_.get(), protocol::store_get_atom::value, std::move(call), what)
      .then([st, guard, what](const client::GetOutput&) { return finish_into(*st, *guard, what); });
}

// -- objects -------------------------------------------------------------

Future<void> Store::put_object(std::string key, std::string bytes, ObjectFormat format) {
  if (auto s = check_key("put_object", key); !s.ok()) return make_error_future<void>(s);
  if (static_cast<std::uint8_t>(format) > static_cast<std::uint8_t>(ObjectFormat::pickle)) {
    return make_error_future<void>(
        Status(Errc::invalid_argument, "put_object '" + key + "': unknown object format " +
                                           std::to_string(static_cast<int>(format)) +
                                           " (bytes, utf8 or pickle)"));
  }
  auto item = bytes_item(key, std::move(bytes), wire::ObjectKind::object);
  item.object_format = format;
  return put_on_channel(
      impl_ ? impl_->fast.get() : nullptr,
      impl_ ? impl_->options.limits.request_timeout : std::chrono::milliseconds(0), {item},
      "put_object '" + item.key + "'", false);
}

namespace {

client::GetCall object_call(const std::string& key) {
  client::GetCall call;
  call.op = "get_object";
  call.mode = client::GetMode::object;
  call.keys.push_back(key);
  return call;
}

}  // namespace

Future<std::string> Store::get_object(std::string key) {
  return get_stored_object(std::move(key)).then([](const StoredObject& o) { return o.bytes; });
}

Future<StoredObject> Store::get_stored_object(std::string key) {
  if (auto s = check_key("get_object", key); !s.ok()) return make_error_future<StoredObject>(s);
  auto call = object_call(key);
  if (impl_) {
    StoredObject o;
    auto fast = fast_get_object(*impl_->fast, key, impl_->options.limits.request_timeout, &o);
    if (fast == FastOutcome::hit) return make_ready_future(std::move(o));
    call.fresh = fast == FastOutcome::stale;
  }
  return Impl::call(impl_.get(), protocol::store_get_atom::value, std::move(call),
                    "get_object '" + key + "'")
      .then([](const client::GetOutput& out) {
        return StoredObject{out.object, out.object_format};
      });
}

// -- key space -----------------------------------------------------------

Future<std::vector<std::string>> Store::keys(std::string prefix) {
  if (prefix.find('\0') != std::string::npos) {
    return make_error_future<std::vector<std::string>>(
        Status(Errc::invalid_argument, "keys: prefix contains a NUL byte"));
  }
  client::KeysCall call;
  const std::string what = "keys '" + prefix + "'";
  call.prefix = std::move(prefix);
  auto fut = Impl::call(impl_.get(), protocol::store_keys_atom::value, std::move(call), what);
  return fut;
}

Future<std::vector<KeyInfo>> Store::list(std::string prefix) {
  if (prefix.find('\0') != std::string::npos) {
    return make_error_future<std::vector<KeyInfo>>(
        Status(Errc::invalid_argument, "list: prefix contains a NUL byte"));
  }
  client::ListCall call;
  const std::string what = "list '" + prefix + "'";
  call.prefix = std::move(prefix);
  auto fut = Impl::call(impl_.get(), protocol::store_list_atom::value, std::move(call), what);
  return fut.then([](const std::vector<wire::KeyRecord>& records) {
    std::vector<KeyInfo> out;
    out.reserve(records.size());
    for (const auto& r : records) {
      out.push_back(KeyInfo{r.key, r.kind == wire::ObjectKind::object, r.object_format, r.dtype,
                            r.shape, r.nbytes(), r.version, r.copied() ? 1 : r.shards.size(),
                            r.copied() ? r.shards.size() : 1});
    }
    return out;
  });
}

Future<bool> Store::exists(std::string key) {
  if (auto s = check_key("exists", key); !s.ok()) return make_error_future<bool>(s);
  client::ExistsCall call;
  const std::string what = "exists '" + key + "'";
  call.keys.push_back(std::move(key));
  auto fut = Impl::call(impl_.get(), protocol::store_exists_atom::value, std::move(call), what);
  return fut.then([](const std::vector<std::uint64_t>& v) { return !v.empty() && v.front() != 0; });
}

Future<void> Store::remove(std::string key) {
  const store::Meter meter(Impl::metered(impl_.get()), store::Op::remove);
  return meter([&]() -> Future<void> {
    if (auto s = check_key("remove", key); !s.ok()) return make_error_future<void>(s);
    client::RemoveCall call;
    const std::string what = "remove '" + key + "'";
    call.keys.push_back(std::move(key));
    call.single = true;
    auto fut = Impl::call(impl_.get(), protocol::store_remove_atom::value, std::move(call), what);
    return fut.then([](std::size_t) {});
  }());
}

Future<std::size_t> Store::remove_batch(std::vector<std::string> keys) {
  if (auto s = check_keys("remove_batch", keys, false); !s.ok())
    return make_error_future<std::size_t>(s);
  if (keys.empty()) return make_ready_future<std::size_t>(0);
  client::RemoveCall call;
  const std::string what = "remove_batch of " + std::to_string(keys.size()) + " keys";
  call.keys = std::move(keys);
  auto fut = Impl::call(impl_.get(), protocol::store_remove_atom::value, std::move(call), what);
  return fut;
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
