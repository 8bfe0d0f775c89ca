#pragma once

// Pieces of the calls the Store facade and the state-dict engine send to
// the client actor: their promises, the answer of a closed store, and the
// put and get items they build often.

#include <memory>
#include <optional>
#include <string>

#include "meshstore/client/client.hpp"
#include "meshstore/client/fast_path.hpp"
#include "meshstore/future.hpp"
#include "meshstore/internal/call_guard.hpp"
#include "meshstore/status.hpp"

namespace meshstore::client {

/// The future a call on a closed (or moved-from) store answers at once.
template <class T>
Future<T> closed_future(const std::string& what) {
  return make_error_future<T>(
      Status(Errc::shutdown, what + ": the store is closed (or moved from)"));
}

/// A call's promise; dropped unset, it answers Errc::shutdown.
template <class T>
std::shared_ptr<Promise<T>> make_promise(const std::string& what) {
  return std::make_shared<Promise<T>>(
      Status(Errc::shutdown, what + ": the store was closed before the operation completed"));
}

/// Makes `fut`, the future of `promise`, cancel its call through `guard`
/// (Future::cancel): unless the call is committing, it stops, and the
/// promise answers Errc::cancelled naming `what`.
template <class T>
void cancel_through(const Future<T>& fut, std::shared_ptr<internal::CallGuard> guard,
                    const std::shared_ptr<Promise<T>>& promise, std::string what) {
  set_canceller(fut, [guard = std::move(guard), weak = std::weak_ptr<Promise<T>>(promise),
                      what = std::move(what)] {
    if (!guard->cancel()) return false;  // committing: it runs to its end
    if (auto p = weak.lock()) p->set_error(Status(Errc::cancelled, what + ": cancelled"));
    return true;
  });
}

/// A put over the client's channel: `attempt(defer, nullptr)` puts it on
/// this thread and answers its future, or nullopt when the channel cannot
/// take it; it may instead set `*defer` (a put sent over the network that
/// would hold this thread too long). Then it runs on `fast`'s waiting
/// thread (FastPath::defer) as `attempt(nullptr, guard)`, and
/// `actors(guard)` takes it there when the channel leaves it (a publish
/// whose pointer moved: it reads the pointer afresh); the future answered
/// here completes as that one does. A `cancellable` put's future cancels
/// it (Future::cancel) through `guard`, which both honour (null
/// otherwise). nullopt: the caller takes it the same other way.
template <class T, class Attempt, class Actors>
std::optional<Future<T>> put_over_channel_or_defer(client::FastPath& fast, const std::string& what,
                                                   Attempt attempt, Actors actors,
                                                   bool cancellable = false) {
  bool defer = false;
  if (auto done = attempt(&defer, nullptr)) return done;
  if (!defer) return std::nullopt;
  auto promise = make_promise<T>(what);
  auto fut = promise->future();
  std::shared_ptr<internal::CallGuard> guard;
  if (cancellable) {
    guard = std::make_shared<internal::CallGuard>();
    cancel_through(fut, guard, promise, what);
  }
  fast.defer([attempt = std::move(attempt), actors = std::move(actors), promise, guard]() mutable {
    auto done = attempt(nullptr, guard);
    (done ? std::move(*done) : actors(guard)).on_complete([promise](const Result<T>& r) {
      promise->set(r);
    });
  });
  return fut;
}

/// put_over_channel_or_defer for a put whose every outcome is the
/// channel's (ChannelPut::refusals_final: a refusal, or no channel to be
/// had, is its answer), so no actors' put stands behind it.
template <class T, class Attempt>
Future<T> put_over_channel_or_defer(client::FastPath& fast, const std::string& what,
                                    Attempt attempt, bool cancellable) {
  auto unanswered = [what](const std::shared_ptr<internal::CallGuard>&) {
    return make_error_future<T>(
        Status(Errc::internal, what + ": the channel's put left it unanswered"));
  };
  auto done = put_over_channel_or_defer<T>(fast, what, std::move(attempt), std::move(unanswered),
                                           cancellable);
  return done ? std::move(*done)
              : make_error_future<T>(
                    Status(Errc::internal, what + ": the channel's put left it unanswered"));
}

/// One key read into a Tensor: get (a copy) or get_view (zero-copy if it can).
client::GetCall single_get(const std::string& op, client::GetMode mode, std::string key);

/// A put item whose bytes the item owns (an object, or a uint8 tensor of
/// bytes the store made: a manifest, a packed blob, a value).
client::PutItem bytes_item(std::string key, std::string bytes, wire::ObjectKind kind);

}  // namespace meshstore::client
