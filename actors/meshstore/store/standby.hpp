#pragma once

// The servers a connected store may join (a primary and its standbys), and
// a standby's wait for its primary's loss (StoreOptions::standby_of).
// docs/reliability.md, "A standby".

#include <chrono>
#include <string>
#include <vector>

#include "meshstore/protocol/directory_actor.hpp"
#include "meshstore/status.hpp"

namespace meshstore::store {

/// The servers `address` names: "HOST:PORT", or several comma-separated
/// (a primary, then its standbys). Errc::invalid_argument naming the bad
/// one (a port of 0 among them).
Result<std::vector<std::string>> servers_of(const std::string& address);

/// The directory of the first of `servers` that answers, trying each in
/// turn until `timeout` passed (a server may still be starting; a standby
/// does not listen until it takes over). One server: retried alone.
Result<protocol::directory_actor> reach_one(caf::actor_system& sys,
                                            const std::vector<std::string>& servers,
                                            std::chrono::milliseconds timeout);

/// Blocks until the store serving at `primary` is gone (its process died
/// or closed): reaches it within `timeout` (else Errc::unavailable), then
/// watches its directory. What a standby does before it takes over.
Status await_primary_loss(caf::actor_system& sys, const std::string& primary,
                          std::chrono::milliseconds timeout);

}  // namespace meshstore::store
