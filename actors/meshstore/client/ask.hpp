#pragma once

// Requests from the client actor to its peers that fail as soon as the peer
// is known to be down, instead of waiting for their timeout.

#include <caf/all.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "meshstore/client/client_state.hpp"

namespace meshstore::client {

// Calls `f` with a reply's values, once: the first of reply, error or
// peer-down wins; later ones are dropped.
template <class F, class Args>
struct OnReply;
template <class F, class... Args>
struct OnReply<F, caf::detail::type_list<Args...>> {
  std::shared_ptr<bool> done;
  std::function<void()> settle;
  F f;
  void operator()(Args... xs) {
    if (*done) return;
    *done = true;
    settle();
    f(std::forward<Args>(xs)...);
  }
};

/// A request to `peer` that fails with Errc::unavailable as soon as the
/// peer is known to be down, instead of waiting for its timeout. Used as
/// `ask(self, peer, args...).then(on_reply, on_error)`, like CAF's request.
template <class Handle, class... Ts>
struct Ask {
  client_pointer self;
  Handle peer;
  std::tuple<Ts...> args;
  caf::actor also;                       // a second peer whose death fails the request too
  std::chrono::milliseconds timeout{0};  // 0: the configured request timeout

  /// A deadline other than the configured request timeout.
  Ask& within(std::chrono::milliseconds t) {
    timeout = t;
    return *this;
  }

  /// Fails the request at once also if `other` goes down (the peer will
  /// ask it on our behalf).
  Ask& also_watch(caf::actor other) {
    also = std::move(other);
    return *this;
  }

  template <class F, class G>
  void then(F on_reply, G on_error) {
    auto& st = self->state;
    auto done = std::make_shared<bool>(false);
    std::vector<caf::actor_addr> addrs{peer.address()};
    if (st.monitored.insert(addrs.front()).second) self->monitor(peer);
    if (also) {
      addrs.push_back(also.address());
      if (st.monitored.insert(addrs.back()).second) self->monitor(also);
    }
    const auto token = st.next_wait++;
    for (const auto& addr : addrs) {
      st.waiting[addr][token] = [done, on_error](caf::error& e) mutable {
        if (*done) return;
        *done = true;
        on_error(e);
      };
    }
    auto client = self;
    auto settle = [client, addrs, token] {
      for (const auto& addr : addrs) {
        auto it = client->state.waiting.find(addr);
        if (it == client->state.waiting.end()) continue;
        it->second.erase(token);
        if (it->second.empty()) client->state.waiting.erase(it);
      }
    };
    using Traits = caf::detail::get_callable_trait<F>;
    std::apply(
        [&](auto&... xs) {
          self->request(peer, timeout.count() > 0 ? timeout : st.cfg.request_timeout, xs...)
              .then(OnReply<F, typename Traits::arg_types>{done, settle, std::move(on_reply)},
                    [done, settle, on_error](caf::error& e) mutable {
                      if (*done) return;
                      *done = true;
                      settle();
                      on_error(e);
                    });
        },
        args);
  }
};

template <class Handle, class... Ts>
Ask<Handle, std::decay_t<Ts>...> ask(client_pointer self, const Handle& peer, Ts&&... xs) {
  return Ask<Handle, std::decay_t<Ts>...>{self, peer, std::make_tuple(std::forward<Ts>(xs)...),
                                          caf::actor(), std::chrono::milliseconds(0)};
}

}  // namespace meshstore::client
