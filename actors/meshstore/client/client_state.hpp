#pragma once

// The client actor's state, with the helpers its files share to wait on
// futures inside the actor.

#include <caf/all.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "meshstore/client/client.hpp"
#include "meshstore/client/fast_path.hpp"
#include "meshstore/future.hpp"
#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/connect.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/protocol/wire_glue.hpp"
#include "meshstore/status.hpp"
#include "meshstore/transports/shm/shm_segment.hpp"
#include "meshstore/transports/transport.hpp"

namespace meshstore::client {

/// A cancellable call's buffers (GetCall::guard; null: not
/// cancellable): touch them only between touch_begin (false: cancelled,
/// stop) and touch_end, and commit only after may_commit.
inline bool touch_begin(const std::shared_ptr<internal::CallGuard>& g) { return !g || g->enter(); }
inline void touch_end(const std::shared_ptr<internal::CallGuard>& g) {
  if (g) g->leave();
}
inline bool may_commit(const std::shared_ptr<internal::CallGuard>& g) {
  return !g || g->begin_commit();
}

/// A volume the client can move bytes to and from.
struct VolumeConn {
  wire::VolumeInfo info;
  protocol::storage_volume_actor handle;
  std::shared_ptr<transports::Transport> transport;
  /// Where objects of this volume lie, by object id, as this client saw
  /// them (its own puts' staging, read leases): lease-free reads
  /// (volume_reads.cpp) use them. Bounded by kMaxKnownRegions (all
  /// forgotten when full); a stale entry is harmless (the tag check fails).
  std::unordered_map<std::uint64_t, wire::RegionRef> known_regions;
  static constexpr std::size_t kMaxKnownRegions = 4096;
  /// Remembers where `regions` lie (host memory only).
  void remember(const std::vector<wire::RegionRef>& regions) {
    if (known_regions.size() + regions.size() > kMaxKnownRegions) known_regions.clear();
    for (const auto& r : regions) {
      if (r.device < 0 && r.region_id != 0 && known_regions.size() < kMaxKnownRegions) {
        known_regions[r.region_id] = r;
      }
    }
  }
};

using ConnResult = Result<std::shared_ptr<VolumeConn>>;
using ConnCallback = std::function<void(const ConnResult&)>;

/// The client actor's state; touched only by the client actor.
struct ClientState {
  static inline const char* name = "meshstore.client";

  ClientConfig cfg;
  std::uint64_t next_lease_id = 1;  // lease ids are this client's to choose
  protocol::controller_actor controller;
  protocol::strategy_actor strategy;
  // Volume connections by id, and callers waiting for one being set up.
  std::unordered_map<std::string, std::shared_ptr<VolumeConn>> conns;
  std::unordered_map<std::string, std::vector<ConnCallback>> conn_waiters;
  // The strategy's answer for this client (the volume puts go to).
  std::string home_volume;
  // Why this client's last home volume went (empty: it never had one, or
  // the strategy gave it another since): the strategy's "none yet" is then
  // no start-up race to wait out.
  std::string home_lost;
  // Every volume this client may be given has registered (spawn_store):
  // the strategy's "none fits" is then final, not a start-up race.
  bool placement_final = false;
  std::vector<ConnCallback> home_waiters;
  bool home_pending = false;
  // The doors (VolumeInfo::control) of other processes this client has
  // connected to directly, and what waits on one being connected.
  internal::DoorsReached doors;
  // Volumes whose fast-path channel is being opened, with whoever waits
  // for it (told whether it opened).
  std::unordered_map<std::string, std::vector<std::function<void(Status)>>> channel_waiters;
  // Why the last channel to each volume did not open (none: it did).
  std::unordered_map<std::string, Status> channel_refused;
  // key -> last record seen, shared with the fast path (the callers'
  // threads); validated by the volume on every read.
  std::shared_ptr<LocationCache> locations;
  // Requests waiting on each peer, failed at once if the peer goes down
  // (CAF 0.17 itself would only time them out).
  std::map<caf::actor_addr, std::map<std::uint64_t, std::function<void(caf::error&)>>> waiting;
  std::set<caf::actor_addr> monitored;
  std::uint64_t next_wait = 1;
  // Why the controller or strategy is gone (empty while they live), and
  // since when.
  std::string control_down;
  std::chrono::steady_clock::time_point control_down_at;
  // It stopped in order (its store was closed): calls fail at once rather
  // than wait (the store still reconnects, should a server come back).
  bool control_closed = false;
  // Calls that came while it was gone and the store reconnects
  // (ClientConfig::on_control_down): each runs once the store is back
  // (reconnected_atom), or fails at its deadline, the request timeout
  // after control_down_at.
  struct Parked {
    std::chrono::steady_clock::time_point deadline;
    std::function<void()> run;
    std::function<void(const Status&)> fail;
  };
  std::vector<Parked> parked;
  bool park_timer = false;  // a check of the deadlines is on its way
  // Why the store stopped reconnecting (reconnect_failed): calls fail at
  // once from then.
  std::string reconnect_over;
  // The controller's process where it runs on this host, another process
  // (null otherwise): lease-free reads (the fast path's direct ones too)
  // stop once it has exited, before its down message arrives, as the
  // leased way's round trip would.
  std::shared_ptr<transports::shm::ProcessWatch> controller_process;
  // Streamed reads following a writer, by state dict key.
  std::multimap<std::string, std::shared_ptr<struct StreamOp>> streams;
  std::shared_ptr<spdlog::logger> log = log::get("client");
};

using client_pointer = caf::stateful_actor<ClientState>*;

/// Whether a call cannot run now because the controller or the strategy
/// is gone. While the store waits for a failover (it reconnects to a
/// server that died, not one closed in order), `run` runs once the store
/// is back, or `fail` at the request timeout after the death; otherwise
/// `fail` runs at once. False, touching neither, while the store is up.
bool wait_for_store(client_pointer self, std::function<void()> run,
                    std::function<void(const Status&)> fail);

/// Runs `k(result)` inside the client actor once `fut` completes, whatever
/// thread completes it. Dropped (with its captures) if the client is gone.
template <class T, class F>
void await(client_pointer self, Future<T> fut, F k) {
  caf::actor_addr addr = self->address();
  fut.on_complete([addr, k](const Result<T>& r) {
    auto hdl = caf::actor_cast<caf::actor>(addr);
    if (!hdl) return;
    caf::anon_send(hdl, protocol::run_atom::value, internal::Closure{[k, r]() mutable { k(r); }});
  });
}

/// Completes once every input has completed (so no transfer still touches
/// a caller's buffer), with the first error in input order, if any.
Future<void> settle_all(std::vector<Future<void>> futures);

/// Names a call in errors: "OP 'KEY'", or "OP of N keys (first 'KEY')".
std::string describe(const std::string& op, const std::vector<std::string>& keys);

}  // namespace meshstore::client
