#pragma once

// Publishing an actor for other processes, and reaching one another process
// published, as ranks that start in any order need: retry with backoff
// until a deadline. Both speak TLS when the system was given TlsOptions
// (CAF's OpenSSL module is loaded). Internal.

#include <algorithm>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "meshstore/internal/address.hpp"
#include "meshstore/internal/tls_watch.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/status.hpp"

namespace meshstore::internal {

/// Publishes `whom` on host:port (port 0: a free one), over TLS when the
/// system has TLS. The bound port, or Errc::unavailable with CAF's reason.
template <class Handle>
Result<std::uint16_t> publish_actor(caf::actor_system& sys, const Handle& whom, std::uint16_t port,
                                    const std::string& host, bool reuse_address) {
  auto bound = sys.has_openssl_manager()
                   ? caf::openssl::publish(whom, port, host.c_str(), reuse_address)
                   : sys.middleman().publish(whom, port, host.c_str(), reuse_address);
  if (!bound) return Status(Errc::unavailable, sys.render(bound.error()));
  return *bound;
}

/// Stops accepting connections for `whom` on `port` (publish_actor's). TLS
/// listeners belong to the same BASP broker as plain ones, so the
/// middleman closes both (caf/openssl/unpublish.hpp does not compile in
/// CAF 0.17.6).
template <class Handle>
void unpublish_actor(caf::actor_system& sys, const Handle& whom, std::uint16_t port) {
  sys.middleman().unpublish(whom, port);
}

/// The actor that opens `sys`'s connections to other processes, for a
/// caf::connect_atom request from inside an actor: the OpenSSL manager's
/// with TLS, else the middleman's.
inline caf::io::middleman_actor connector(caf::actor_system& sys) {
  return sys.has_openssl_manager() ? sys.openssl_manager().actor_handle()
                                   : sys.middleman().actor_handle();
}

/// How long a process tries a peer's door (ActorRuntime::door) before its
/// messages to that peer keep going through the process that introduced
/// them.
inline constexpr std::chrono::milliseconds kDoorTimeout{5000};

/// Connects `sys` to each of `doors` ("HOST:PORT", other processes'
/// ActorRuntime::door), all at once, from a thread outside the system, and
/// waits for each (at most min(timeout, kDoorTimeout)). CAF then routes
/// messages between this process and each of them directly. One that cannot
/// be reached costs a warning: `via` (the process that introduced them)
/// still routes. Answers how many were reached.
inline std::size_t reach_doors(caf::actor_system& sys, const std::vector<std::string>& doors,
                               std::chrono::milliseconds timeout, const std::string& via) {
  const auto limit = std::min(timeout, kDoorTimeout);
  caf::scoped_actor self{sys};
  using Answer = decltype(self->request(connector(sys), limit, caf::connect_atom::value,
                                        std::string(), std::uint16_t()));
  std::vector<std::pair<std::string, Answer>> asked;
  std::size_t reached = 0;
  for (const auto& door : doors) {
    auto at = parse_address(door);
    if (!at.ok()) {
      log::get("connect")->warn("a peer's door is malformed: {}", at.status().to_string());
      continue;
    }
    asked.emplace_back(
        door, self->request(connector(sys), limit, caf::connect_atom::value, at->host, at->port));
  }
  for (auto& [door, answer] : asked) {
    answer.receive([&](const caf::node_id&, const caf::strong_actor_ptr&,
                       const std::set<std::string>&) { ++reached; },
                   [&, &d = door](caf::error& e) {
                     log::get("connect")->warn(
                         "cannot connect to the peer at {} ({}); its messages go through {}", d,
                         sys.render(e), via);
                   });
  }
  return reached;
}

/// The doors an event-based actor reached (reach_door), and the work
/// waiting for one being reached. Kept in the actor's state.
struct DoorsReached {
  std::set<std::string> reached;
  std::unordered_map<std::string, std::vector<std::function<void()>>> waiting;
};

/// From event-based actor `self`: connects this process to `door` (another
/// process's ActorRuntime::door), once per door, asynchronously through the
/// middleman's (or OpenSSL manager's) actor, then runs `k` whatever the
/// outcome: the process that introduced the other one still routes their
/// messages, at the cost a warning (naming `what`) tells. `doors` is
/// `self`'s own state.
template <class Self>
void reach_door(Self* self, DoorsReached& doors, const std::string& door,
                std::chrono::milliseconds timeout, const std::string& what,
                std::function<void()> k) {
  if (door.empty() || doors.reached.count(door)) return k();
  auto& waiters = doors.waiting[door];
  waiters.push_back(std::move(k));
  if (waiters.size() > 1) return;  // being connected
  auto done = [&doors, door] {
    doors.reached.insert(door);
    auto ks = std::move(doors.waiting[door]);
    doors.waiting.erase(door);
    for (auto& f : ks) f();
  };
  auto at = parse_address(door);
  if (!at.ok()) {
    log::get("connect")->warn("{}: its process's door '{}' is malformed: {}", what, door,
                              at.status().to_string());
    return done();
  }
  self->request(connector(self->system()), std::min(timeout, kDoorTimeout),
                caf::connect_atom::value, at->host, at->port)
      .then([done](const caf::node_id&, const caf::strong_actor_ptr&,
                   const std::set<std::string>&) { done(); },
            [self, done, door, what](caf::error& e) {
              log::get("connect")->warn(
                  "{}: cannot connect to its process at {} ({}); its messages go through the "
                  "process that introduced it",
                  what, door, self->system().render(e));
              done();
            });
}

/// The actor of type Handle published at host:port, retrying every 50 ms
/// (doubling up to 1 s) for `timeout`. Fails with Errc::unavailable:
/// "no <what> answered at HOST:PORT after N attempts over M ms (last error: ...)",
/// or at once when the peer was reached but the handshake failed, naming
/// the reason: Errc::unauthenticated with TLS here (a certificate the other
/// side's CA did not sign, a peer without TLS), Errc::unavailable without
/// (the peer requires TLS, or is no meshstore endpoint).
template <class Handle>
Result<Handle> connect_with_retry(caf::actor_system& sys, const std::string& host,
                                  std::uint16_t port, std::chrono::milliseconds timeout,
                                  const std::string& what) {
  const std::string address = host + ":" + std::to_string(port);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const bool tls = sys.has_openssl_manager();
  auto backoff = std::chrono::milliseconds(50);
  for (int attempt = 1;; ++attempt) {
    const auto mark = tls_failure_mark();
    auto h = tls ? caf::openssl::remote_actor<Handle>(sys, host, port)
                 : sys.middleman().remote_actor<Handle>(host, port);
    if (h) return std::move(*h);
    // A peer that closes during the handshake refused us (or we it): no
    // retry helps. A TLS peer of a plain server sees the server close, which
    // CAF reports as cannot_connect_to_node, so ask OpenSSL too.
    // Without TLS on this side the cause is a guess (a TLS-only peer, or
    // no meshstore endpoint at all): unavailable, naming both.
    const std::string recorded = tls ? tls_failure_since(mark, port) : std::string();
    if (h.error() == caf::sec::disconnect_during_handshake || !recorded.empty()) {
      return Status(tls ? Errc::unauthenticated : Errc::unavailable,
                    handshake_failure(what, address, tls, recorded));
    }
    const std::string last_error = sys.render(h.error());
    if (std::chrono::steady_clock::now() + backoff > deadline) {
      return Status(Errc::unavailable, "no " + what + " answered at " + address + " after " +
                                           std::to_string(attempt) + " attempts over " +
                                           std::to_string(timeout.count()) +
                                           " ms (last error: " + last_error + ")");
    }
    log::get("connect")->debug("{} at {}: attempt {} failed ({}), retrying in {} ms", what, address,
                               attempt, last_error, backoff.count());
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

}  // namespace meshstore::internal
