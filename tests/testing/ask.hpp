#pragma once
// Asking an actor from a test: a request from a scoped actor, waited for,
// its single-value reply or the error as a Status.
#include <caf/all.hpp>
#include <chrono>
#include <utility>

#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/status.hpp"

namespace meshstore::testing {

/// Asks `h` (30 s at most) and waits for a single-value reply of type R.
template <class R, class Handle, class... Ts>
Result<R> ask(caf::scoped_actor& self, const Handle& h, Ts&&... xs) {
  Result<R> out = Status(Errc::internal, "no reply");
  self->request(h, std::chrono::seconds(30), std::forward<Ts>(xs)...)
      .receive([&](R& r) { out = std::move(r); },
               [&](caf::error& e) { out = internal::from_caf_error(e, "ask"); });
  return out;
}

/// From inside actor `self`: asks `h` (10 s at most) and answers `self`'s
/// own caller with the single-value reply of type R, or the error. What
/// a test's relaying actor returns from its handler: a message from one
/// process's actor to another's, and back.
template <class R, class Self, class Handle, class... Ts>
caf::typed_response_promise<R> ask_and_answer(Self* self, const Handle& h, Ts&&... xs) {
  auto rp = self->template make_response_promise<R>();
  self->request(h, std::chrono::seconds(10), std::forward<Ts>(xs)...)
      .then([rp](R r) mutable { rp.deliver(std::move(r)); },
            [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
  return rp;
}

}  // namespace meshstore::testing
