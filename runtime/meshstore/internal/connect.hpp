#pragma once

// Reaching an actor another process published, as ranks that start in any
// order need: retry with backoff until a deadline. Internal.

#include <algorithm>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "meshstore/logging.hpp"
#include "meshstore/result.hpp"

namespace meshstore::internal {

/// The actor of type Handle published at host:port, retrying every 50 ms
/// (doubling up to 1 s) for `timeout`. Fails with Errc::unavailable:
/// "no <what> answered at HOST:PORT after N attempts over M ms (last error: ...)".
template <class Handle>
Result<Handle> connect_with_retry(caf::actor_system& sys, const std::string& host,
                                  std::uint16_t port, std::chrono::milliseconds timeout,
                                  const std::string& what) {
  const std::string address = host + ":" + std::to_string(port);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto backoff = std::chrono::milliseconds(50);
  for (int attempt = 1;; ++attempt) {
    auto h = sys.middleman().remote_actor<Handle>(host, port);
    if (h) return std::move(*h);
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
