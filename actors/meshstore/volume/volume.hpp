#pragma once

// The volume module's interface: what a volume is created with, and
// spawning one (its messages: protocol/storage_volume_actor.hpp).

#include <caf/all.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "meshstore/protocol/storage_volume_actor.hpp"
#include "meshstore/status.hpp"

namespace meshstore::volume {

/// What a volume is created with.
struct VolumeConfig {
  std::string volume_id;
  std::string host;
  /// Bytes the volume may hold; 0 = unlimited.
  std::uint64_t capacity_bytes = 0;
  /// How long objects staged by a client that died wait for a commit that
  /// may already be on its way before they are dropped.
  std::chrono::milliseconds orphan_grace{30000};
  /// Released region memory kept for reuse by later puts of the same size.
  std::uint64_t pool_bytes = std::uint64_t{1} << 30;
  /// How long its small-op service spins for a request before it sleeps
  /// (StoreOptions::transport.fast_path_spin).
  std::chrono::microseconds ring_spin{50};
  /// Transports to offer (registered names); empty = every built one.
  std::vector<std::string> transports;
  transports::TransportConfig transport_config;
  /// The interface network transports (tcp) listen on.
  std::string bind_host = "127.0.0.1";
  /// A lending volume: it allocates nothing and serves only buffers its
  /// process lends (lend_atom); no strategy places puts on it.
  bool lending = false;
  /// How long a channel's commit waits for a new controller when the
  /// store's controller went down (a failover: the store reconnects and
  /// registers this volume again); 0: it fails at once. A commit the dead
  /// controller never answered is sent again then, and done once
  /// (docs/reliability.md, "The controller's loss").
  std::chrono::milliseconds await_controller{0};
};

/// Spawns a storage volume. Fails, with nothing left running, if a requested
/// transport is not built or its server cannot start.
Result<protocol::storage_volume_actor> spawn_storage_volume(caf::actor_system& sys,
                                                            const VolumeConfig& config);

}  // namespace meshstore::volume
