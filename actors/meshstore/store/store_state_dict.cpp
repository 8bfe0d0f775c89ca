// The Store's state-dict calls (put, publish, stage, read, stream): checks
// and GPU staging here, the work in the state-dict engine (state_dict/).

#include <chrono>
#include <map>
#include <memory>

#include "meshstore/client/fast_path.hpp"
#include "meshstore/protocol/checks.hpp"
#include "meshstore/state_dicts/client_calls.hpp"
#include "meshstore/state_dicts/put_plan.hpp"
#include "meshstore/state_dicts/read_plan.hpp"
#include "meshstore/state_dicts/staged.hpp"
#include "meshstore/state_dicts/stream.hpp"
#include "meshstore/state_dicts/versions.hpp"
#include "meshstore/store.hpp"
#include "meshstore/store/device_staging.hpp"
#include "meshstore/store/metrics.hpp"
#include "meshstore/store/store_impl.hpp"

namespace meshstore {

namespace {

using client::closed_future;
using client::put_over_channel_or_defer;
using protocol::check_key;
using state_dicts::Boxes;
using state_dicts::CacheSlot;
using state_dicts::manifest_of;
using state_dicts::plan_staging;
using state_dicts::Pointer;
using state_dicts::pointer_at;
using state_dicts::pointer_of;
using state_dicts::prepare_put;
using state_dicts::PublishTarget;
using state_dicts::read_latest_into;
using state_dicts::read_next_into;
using state_dicts::read_state_dict;
using state_dicts::read_state_dict_into;
using state_dicts::ShardedPart;
using state_dicts::Snapshot;
using state_dicts::stage_at;
using state_dicts::version_key;
using store::get_target;
using store::put_source;
using store::staging;

// prepare_put with the layout kept under `slot` in `layouts` (null: none)
// as its hint; a put it prepares keeps its layout there for the next one.
Result<std::shared_ptr<state_dicts::PreparedPut>> prepare_with_kept_layout(
    const StateDict& sd, const std::string& op, const StateDictPutOptions& options,
    state_dicts::ManifestCache* layouts, const std::string& slot) {
  std::shared_ptr<const Snapshot> laid_out;
  auto prepared = prepare_put(sd, op, options, layouts ? layouts->find(slot) : nullptr, &laid_out);
  if (prepared.ok() && layouts && laid_out) layouts->put(slot, std::move(laid_out));
  return prepared;
}

// The version `prefix` names as this thread reads it with no request
// (FastPath::pointer_here), else 0: the pointer is located.
std::uint64_t pointer_value(client::FastPath* fast, const std::string& prefix) {
  auto here = fast ? fast->pointer_here(prefix) : std::nullopt;
  return here ? here->value : 0;
}

// A named state-dict put (state_dicts::name_put) over the client's channel
// to its volume, on this thread (or its waiting thread: put_over_channel).
// (`fast`: the client's fast path, whose waiting thread's jobs end before
// it goes; null once the store is closed.)
Future<void> put_named_here(client::FastPath* fast, std::chrono::milliseconds timeout,
                            const std::string& what, std::shared_ptr<state_dicts::PreparedPut> p) {
  if (!fast) return client::closed_future<void>(what);
  return put_over_channel_or_defer<void>(
      *fast, what,
      [fast, p, timeout](bool* defer, const auto&) -> std::optional<Future<void>> {
        auto done = state_dicts::put_on_caller_thread(*fast, p->call, timeout, defer);
        if (!done) return std::nullopt;
        return done->ok() ? make_ready_future() : make_error_future<void>(*done);
      },
      false);
}

}  // namespace

Future<void> Store::StateDicts::put(std::string key, const StateDict& sd,
                                    const StateDictPutOptions& options) {
  const store::Meter meter(Impl::metered(impl_.get()), store::Op::put_state_dict);
  return meter([&]() -> Future<void> {
    const std::string op = "put_state_dict";
    if (auto s = check_key(op, key); !s.ok()) return make_error_future<void>(s);
    auto st = staging(op, false);  // put_source decides per entry
    auto use = put_source(sd, *st, options);
    if (!use.ok()) return make_error_future<void>(use.status());
    auto prepared =
        prepare_with_kept_layout(**use, op, options, Impl::put_layout_cache(impl_.get()).get(),
                                 state_dicts::layout_key(key, options));
    if (!prepared.ok()) return make_error_future<void>(prepared.status().with_context(key));
    auto p = std::move(prepared).value();
    if (auto s = state_dicts::name_put(key, *p); !s.ok()) return make_error_future<void>(s);
    return put_named_here(
               impl_ ? impl_->fast.get() : nullptr,
               impl_ ? impl_->options.limits.request_timeout : std::chrono::milliseconds(0),
               op + " '" + key + "'", std::move(p))
        .then([st] {});
  }());
}

Future<void> Store::StateDicts::put_sharded(std::string key, const StateDict& local,
                                            const std::map<std::string, RankShard>& layout,
                                            std::int64_t rank, const StateDictPutOptions& options) {
  const std::string op = "put_sharded_state_dict";
  if (auto s = check_key(op, key); !s.ok()) return make_error_future<void>(s);
  auto st = staging(op, false);  // put_source decides per entry
  auto use = put_source(local, *st, options, &layout);
  if (!use.ok()) return make_error_future<void>(use.status());
  auto prepared = prepare_put(**use, op, options, ShardedPart{&layout, rank});
  if (!prepared.ok()) return make_error_future<void>(prepared.status().with_context(key));
  auto p = std::move(prepared).value();
  if (auto s = state_dicts::name_put(key, *p); !s.ok()) return make_error_future<void>(s);
  return put_named_here(
             impl_ ? impl_->fast.get() : nullptr,
             impl_ ? impl_->options.limits.request_timeout : std::chrono::milliseconds(0),
             op + " '" + key + "'", std::move(p))
      .then([st] {});
}

Future<std::uint64_t> Store::StateDicts::publish_copy(std::string prefix, const StateDict& sd,
                                                      int keep, const StateDictPutOptions& options,
                                                      const std::string& op) {
  const caf::actor_addr client = Impl::client_address(impl_.get());
  auto st = staging(op, false);  // put_source decides per entry
  auto use = put_source(sd, *st, options);
  if (!use.ok()) return make_error_future<std::uint64_t>(use.status());
  // Versions' keys change every time; their layout is kept by prefix.
  auto prepared_or =
      prepare_with_kept_layout(**use, op, options, Impl::put_layout_cache(impl_.get()).get(),
                               state_dicts::layout_key(prefix + "@versions", options));
  if (!prepared_or.ok()) {
    return make_error_future<std::uint64_t>(prepared_or.status().with_context(prefix));
  }
  auto prepared = std::move(prepared_or).value();
  auto fast = impl_ ? impl_->fast : nullptr;
  // On this thread, where the pointer this client last saw is current.
  if (fast) {
    const auto timeout = impl_->options.limits.request_timeout;
    client::FastPath* raw = fast.get();  // defer's jobs end before it
    auto done = put_over_channel_or_defer<std::uint64_t>(
        *raw, op + " '" + prefix + "'",
        [raw, prefix, prepared, keep, op, timeout](
            bool* defer, const auto&) -> std::optional<Future<std::uint64_t>> {
          auto done = state_dicts::publish_on_caller_thread(*raw, prefix, *prepared, keep, op,
                                                            timeout, defer);
          if (!done) return std::nullopt;
          return done->ok() ? make_ready_future<std::uint64_t>(**done)
                            : make_error_future<std::uint64_t>(done->status());
        },
        [client, prefix, prepared, keep, op, weak = std::weak_ptr<client::FastPath>(fast),
         timeout](const auto&) {
          return state_dicts::publish_prepared(client, prefix, prepared, keep, op, weak, timeout);
        });
    // Host copies live till then.
    if (done) return done->then([st](std::uint64_t version) { return version; });
  }
  // Fenced (docs/publishing.md, "Two writers on one prefix").
  return state_dicts::publish_prepared(
             client, prefix, std::move(prepared), keep, op, fast,
             impl_ ? impl_->options.limits.request_timeout : std::chrono::milliseconds(0))
      .then([st](std::uint64_t version) { return version; });  // host copies live till then
}

Future<StagedStateDict> Store::StateDicts::stage(std::string key, std::vector<TensorSpec> tensors,
                                                 const StateDictPutOptions& options) {
  const std::string op = "stage_state_dict";
  if (auto s = check_key(op, key); !s.ok()) return make_error_future<StagedStateDict>(s);
  auto layout = plan_staging(op, key, tensors, options);
  if (!layout.ok()) return make_error_future<StagedStateDict>(layout.status());
  const caf::actor_addr client = Impl::client_address(impl_.get());
  if (!client) return closed_future<StagedStateDict>(op + " '" + key + "'");
  PublishTarget none;  // no version: only the channel to commit over
  none.fast = impl_->fast;
  none.timeout = impl_->options.limits.request_timeout;
  return stage_at(client, op, key, std::move(layout).value(), std::move(none));
}

Future<StagedStateDict> Store::StateDicts::stage_publish(std::string prefix,
                                                         std::vector<TensorSpec> tensors, int keep,
                                                         const StateDictPutOptions& options) {
  const std::string op = "stage_publish";
  if (auto s = check_key(op, prefix); !s.ok()) return make_error_future<StagedStateDict>(s);
  if (keep < 1) {
    return make_error_future<StagedStateDict>(
        Status(Errc::invalid_argument,
               op + " '" + prefix + "': keep must be at least 1, got " + std::to_string(keep)));
  }
  // The specs are checked now for the errors that do not depend on N.
  if (auto s = plan_staging(op, prefix, tensors, options); !s.ok()) {
    return make_error_future<StagedStateDict>(s.status());
  }
  const caf::actor_addr client = Impl::client_address(impl_.get());
  auto specs = std::make_shared<const std::vector<TensorSpec>>(std::move(tensors));
  std::weak_ptr<client::FastPath> fast = impl_ ? impl_->fast : nullptr;
  const auto timeout = impl_ ? impl_->options.limits.request_timeout : std::chrono::milliseconds(0);
  return pointer_at(client, prefix, op).then([=](const Pointer& ptr) {
    const std::uint64_t next = ptr.value + 1;
    const std::string key = version_key(prefix, next);
    auto layout = plan_staging(op, key, *specs, options);
    if (!layout.ok()) return make_error_future<StagedStateDict>(layout.status());
    return stage_at(client, op, key, std::move(layout).value(),
                    PublishTarget{prefix, next, keep, ptr, fast, timeout});
  });
}

Future<void> Store::StateDicts::stream_into(std::string key, StateDict& sd,
                                            std::chrono::milliseconds timeout) {
  const std::string op = "stream_state_dict_into";
  if (auto s = check_key(op, key); !s.ok()) return make_error_future<void>(s);
  if (timeout.count() < 0) {
    return make_error_future<void>(
        Status(Errc::invalid_argument, op + " '" + key + "': negative timeout"));
  }
  const caf::actor_addr client = Impl::client_address(impl_.get());
  if (!client) return closed_future<void>(op + " '" + key + "'");
  auto st = staging(op);  // packed entries: finish_into copies them over
  auto use = get_target(sd, *st);
  if (!use.ok()) return make_error_future<void>(use.status());
  return state_dicts::stream_into(client, key, *use, op, timeout,
                                  CacheSlot{Impl::manifest_cache(impl_.get()), key})
      .then([st] { return st->finish(); });
}

namespace {

// Boxes are get_into's: the version reads refuse them.
Status no_boxes(const std::string& op, const std::string& prefix,
                const StateDictReadOptions& options) {
  if (options.boxes.empty()) return Status();
  return Status(Errc::invalid_argument,
                op + " '" + prefix + "': boxes are read by get_into, not by a version read");
}

}  // namespace

Future<std::uint64_t> Store::StateDicts::get_next_into(std::string prefix, StateDict& sd,
                                                       std::uint64_t after,
                                                       std::chrono::milliseconds timeout,
                                                       const StateDictReadOptions& options) {
  const std::string op = "get_next_state_dict_into";
  if (auto s = check_key(op, prefix); !s.ok()) return make_error_future<std::uint64_t>(s);
  if (auto s = no_boxes(op, prefix, options); !s.ok()) return make_error_future<std::uint64_t>(s);
  if (timeout.count() < 0) {
    return make_error_future<std::uint64_t>(
        Status(Errc::invalid_argument, op + " '" + prefix + "': negative timeout"));
  }
  auto st = staging(op);  // packed entries: finish_into copies them over
  auto use = get_target(sd, *st);
  if (!use.ok()) return make_error_future<std::uint64_t>(use.status());
  auto fast = impl_ ? impl_->fast : nullptr;
  const std::uint64_t known = pointer_value(fast.get(), prefix);
  return read_next_into(Impl::client_address(impl_.get()), prefix, *use, after, op,
                        std::chrono::steady_clock::now() + timeout,
                        Impl::manifest_cache(impl_.get()), options.cast, fast, known)
      .then([st](std::uint64_t version) -> Result<std::uint64_t> {
        MESHSTORE_RETURN_IF_ERROR(st->finish());
        return version;
      });
}

Future<std::uint64_t> Store::StateDicts::latest(std::string prefix) {
  if (auto s = check_key("latest_version", prefix); !s.ok())
    return make_error_future<std::uint64_t>(s);
  if (auto v = pointer_value(impl_ ? impl_->fast.get() : nullptr, prefix)) {
    return make_ready_future(v);
  }
  return pointer_of(Impl::client_address(impl_.get()), prefix, "latest_version");
}

Future<std::uint64_t> Store::StateDicts::get_latest_into(std::string prefix, StateDict& sd,
                                                         const StateDictReadOptions& options) {
  const store::Meter meter(Impl::metered(impl_.get()), store::Op::get_latest);
  return meter([&]() -> Future<std::uint64_t> {
    const std::string op = "get_latest_state_dict_into";
    if (auto s = check_key(op, prefix); !s.ok()) return make_error_future<std::uint64_t>(s);
    if (auto s = no_boxes(op, prefix, options); !s.ok()) return make_error_future<std::uint64_t>(s);
    auto st = staging(op);  // packed entries: finish_into copies them over
    auto use = get_target(sd, *st);
    if (!use.ok()) return make_error_future<std::uint64_t>(use.status());
    // The pointer read on this thread where this client knows where it lies
    // (and then the version too), else located at the controller.
    auto fast = impl_ ? impl_->fast : nullptr;
    const std::uint64_t known = pointer_value(fast.get(), prefix);
    return read_latest_into(Impl::client_address(impl_.get()), prefix, *use, op, {},
                            Impl::manifest_cache(impl_.get()), options.cast, fast, known)
        .then([st](std::uint64_t version) -> Result<std::uint64_t> {
          MESHSTORE_RETURN_IF_ERROR(st->finish());
          return version;
        });
  }());
}

Future<StateDict> Store::StateDicts::get(std::string key) {
  const store::Meter meter(Impl::metered(impl_.get()), store::Op::get_state_dict);
  return meter([&]() -> Future<StateDict> {
    const std::string op = "get_state_dict";
    if (auto s = check_key(op, key); !s.ok()) return make_error_future<StateDict>(s);
    const caf::actor_addr client = Impl::client_address(impl_.get());
    return manifest_of(client, key, op).then([=](const Snapshot& snap) {
      return read_state_dict(client, key, op, snap, 0);
    });
  }());
}

Future<void> Store::StateDicts::get_into(std::string key, StateDict& sd,
                                         const StateDictReadOptions& options) {
  const store::Meter meter(Impl::metered(impl_.get()), store::Op::get_state_dict_into);
  return meter([&]() -> Future<void> {
    const std::string op = "get_state_dict_into";
    if (auto s = check_key(op, key); !s.ok()) return make_error_future<void>(s);
    if (!options.boxes.empty() && options.cast) {
      return make_error_future<void>(
          Status(Errc::unsupported, op + " '" + key + "': cast reads whole entries, not boxes"));
    }
    auto st = staging(op);  // packed entries: finish_into copies them over
    auto use = get_target(sd, *st);
    if (!use.ok()) return make_error_future<void>(use.status());
    return read_state_dict_into(
               Impl::client_address(impl_.get()), key, **use, op,
               CacheSlot{Impl::manifest_cache(impl_.get()), key},
               options.boxes.empty() ? nullptr : std::make_shared<const Boxes>(options.boxes),
               options.cast, impl_ ? impl_->fast : nullptr)
        .then([st] { return st->finish(); });
  }());
}

}  // namespace meshstore
