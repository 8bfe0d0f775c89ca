#pragma once

// Pieces of the calls the Store facade and the state-dict engine send to
// the client actor: their promises, the answer of a closed store, and the
// put and get items they build often.

#include <memory>
#include <string>

#include "meshstore/actors/client.hpp"
#include "meshstore/actors/client/fast_path.hpp"
#include "meshstore/errc.hpp"
#include "meshstore/future.hpp"
#include "meshstore/status.hpp"

namespace meshstore::facade {

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

/// Runs `call` (which answers a Future<T>) on `fast`'s waiting thread
/// (FastPath::defer); the future answered here completes as that one does.
template <class T, class F>
Future<T> on_waiting_thread(actors::FastPath& fast, const std::string& what, F call) {
  auto promise = make_promise<T>(what);
  fast.defer([call = std::move(call), promise]() mutable {
    call().on_complete([promise](const Result<T>& r) { promise->set(r); });
  });
  return promise->future();
}

/// One key read into a Tensor: get (a copy) or get_view (zero-copy if it can).
actors::GetCall single_get(const std::string& op, actors::GetMode mode, std::string key);

/// A put item whose bytes the item owns (an object, or a uint8 tensor of
/// bytes the store made: a manifest, a packed blob, a value).
actors::PutItem bytes_item(std::string key, std::string bytes, wire::ObjectKind kind);

}  // namespace meshstore::facade
