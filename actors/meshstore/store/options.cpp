// StoreOptions: their validation, and the transport settings drawn from them.

#include "meshstore/store/options.hpp"

#include "meshstore/controller/controller.hpp"
#include "meshstore/internal/address.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/protocol/strategy_actor.hpp"
#include "meshstore/transports/registry.hpp"

namespace meshstore {

namespace store {

transports::TransportConfig transport_config(const StoreOptions& o) {
  transports::TransportConfig tc;
  tc.rpc_chunk_bytes = o.transport.rpc_chunk_bytes;
  tc.rpc_chunks_in_flight = o.transport.rpc_chunks_in_flight;
  tc.request_timeout = o.limits.request_timeout;
  tc.tcp_streams = o.transport.tcp_streams;
  tc.tcp_chunk_bytes = o.transport.tcp_chunk_bytes;
  tc.tcp_encrypt = o.security.encrypt_tcp;
  tc.small_ops_spin = o.transport.fast_path_spin;
  tc.shm_max_mappings = o.transport.shm_max_mappings;
  return tc;
}

}  // namespace store

namespace {

// StorePlacement's own ranges (its message, without "StoreOptions: ").
Status check_placement(const StorePlacement& p) {
  auto bad = [](const std::string& m) { return Status(Errc::invalid_argument, m); };
  if (p.num_volumes < 1 || p.num_volumes > 1024) {
    return bad("placement.num_volumes must be in [1, 1024], got " + std::to_string(p.num_volumes));
  }
  if (p.replicas < 1 || p.replicas > 16) {
    return bad("placement.replicas must be in [1, 16], got " + std::to_string(p.replicas));
  }
  if (!(p.repair_share > 0.0 && p.repair_share <= 1.0)) {
    return bad("placement.repair_share must be in (0, 1], got " + std::to_string(p.repair_share));
  }
  if (p.rank < 0) return bad("placement.rank must be >= 0, got " + std::to_string(p.rank));
  if (p.local_rank < -1) {
    return bad("placement.local_rank must be >= -1, got " + std::to_string(p.local_rank));
  }
  if (p.controller_process < -1) {
    return bad("placement.controller_process must be >= -1, got " +
               std::to_string(p.controller_process));
  }
  if (auto s = controller::policy_by_name(p.strategy); !s.ok()) {
    return bad("placement.strategy: " + s.status().message());
  }
  if (p.custom_strategy.select) {
    if (auto s = controller::policy_by_name(p.custom_strategy.placement); !s.ok()) {
      return bad("placement.custom_strategy.placement: " + s.status().message());
    }
  }
  return Status();
}

}  // namespace

Status StoreOptions::validate() const {
  auto bad = [](const std::string& m) {
    return Status(Errc::invalid_argument, "StoreOptions: " + m);
  };
  if (!standby_of.empty() && listen.empty()) {
    return bad("standby_of '" + standby_of + "' needs listen: a standby serves at its own address");
  }
  if (!state_dir.empty() && listen.empty()) {
    return bad("state_dir '" + state_dir + "' needs listen: it is a server's");
  }
  if (!metrics.empty()) {
    if (auto a = internal::parse_address(metrics); !a.ok()) {
      return bad("metrics: " + a.status().message());
    }
  }
  if (auto s = check_placement(placement); !s.ok()) return bad(s.message());
  if (limits.eviction != "none" && limits.eviction != "lru") {
    return bad("limits.eviction must be \"none\" or \"lru\", got \"" + limits.eviction + "\"");
  }
  if (limits.connect_timeout.count() <= 0) {
    return bad("limits.connect_timeout must be positive, got " +
               std::to_string(limits.connect_timeout.count()) + " ms");
  }
  if (limits.reconnect_timeout.count() < 0) {
    return bad("limits.reconnect_timeout must not be negative, got " +
               std::to_string(limits.reconnect_timeout.count()) + " ms");
  }
  if (limits.rebuild_timeout.count() <= 0) {
    return bad("limits.rebuild_timeout must be positive, got " +
               std::to_string(limits.rebuild_timeout.count()) + " ms");
  }
  if (limits.scheduler_threads < 0 || limits.scheduler_threads > 256) {
    return bad("limits.scheduler_threads must be in [0, 256], got " +
               std::to_string(limits.scheduler_threads));
  }
  const auto spin = transport.fast_path_spin;
  if (spin.count() < 0 || spin > std::chrono::seconds(1)) {
    return bad("transport.fast_path_spin must be in [0, 1 s], got " + std::to_string(spin.count()) +
               " us");
  }
  if (!transport.name.empty()) {
    auto f = transports::builtin_registry().find(transport.name);
    if (!f.ok()) return bad("transport.name: " + f.status().message());
    if (f->available) {
      if (auto s = f->available(); !s.ok()) {
        return Status(Errc::unsupported, "StoreOptions: transport '" + transport.name +
                                             "' is unavailable here: " + s.message());
      }
    }
  }
  if (auto s = store::transport_config(*this).validate(); !s.ok()) return bad(s.message());
  if (!log_level.empty()) {
    if (auto l = log::parse_level(log_level); !l.ok()) return bad(l.status().message());
  }
  return Status();
}

}  // namespace meshstore
