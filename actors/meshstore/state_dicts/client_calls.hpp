#pragma once

// How the state-dict engine calls the client actor: by its weak address,
// with the first read its chains make (a state dict's manifest).
//
// The state-dict calls chain several client calls. Their continuations hold
// only a weak address of the client actor (never the Store or its Impl,
// which the caller may destroy meanwhile): a call after the store closed
// fails with Errc::shutdown.

#include <caf/all.hpp>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "meshstore/client/calls.hpp"
#include "meshstore/client/client.hpp"
#include "meshstore/client/fast_path.hpp"
#include "meshstore/future.hpp"
#include "meshstore/state_dicts/manifest.hpp"
#include "meshstore/status.hpp"
#include "meshstore/tensor.hpp"

namespace meshstore::state_dicts {

// Sends `c` to the client actor at `client` with a fresh promise.
template <class Atom, class Call>
auto call_client(const caf::actor_addr& client, Atom atom, Call c, const std::string& what) {
  using T = typename decltype(c.promise)::element_type::value_type;
  c.promise = client::make_promise<T>(what);
  auto fut = c.promise->future();
  auto hdl = caf::actor_cast<caf::actor>(client);
  if (!hdl) return client::closed_future<T>(what);
  caf::anon_send(hdl, atom, std::move(c));
  return fut;
}

// A put over the client's channel that must not run on the client actor's
// thread (where a continuation lands; the channel may need that actor):
// `channel` runs on `fast`'s waiting thread, and its outcome answers
// (ChannelPut::refusals_final: a refusal, or no channel to be had, is an
// outcome too). `what` names the call in the error of a store closed
// first. The fast path's waiting thread ends its jobs before the fast path
// goes.
template <class T>
Future<T> on_waiting_thread(client::FastPath& fast, const std::string& what,
                            std::function<Result<T>()> channel) {
  auto p = std::make_shared<Promise<T>>(Status(Errc::shutdown, what + ": dropped"));
  fast.defer([p, channel = std::move(channel)] { p->set(channel()); });
  return p->future();
}

// A put's outcome over the channel with refusals_final (never nullopt:
// only a put the channel may leave to the actors has none).
template <class T>
Result<T> final_outcome(std::optional<Result<T>> done, const std::string& what) {
  if (done) return std::move(*done);
  return Status(Errc::internal, what + ": the channel's put left it unanswered");
}

// A state dict's manifest as stored (its bytes) and decoded.
struct Snapshot {
  std::string bytes;
  Manifest manifest;
};

// The snapshot in tensor `t`, read from `key`; `op` names the call in errors.
Result<Snapshot> decode_snapshot(const Tensor& t, const std::string& key, const std::string& op);

// Reads the manifest of the state dict under `key`.
Future<Snapshot> manifest_of(const caf::actor_addr& client, const std::string& key,
                             const std::string& op);

}  // namespace meshstore::state_dicts
