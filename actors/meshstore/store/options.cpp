// StoreOptions: their validation, and the transport settings drawn from them.

#include "meshstore/store/options.hpp"

#include "meshstore/controller/controller.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/protocol/strategy_actor.hpp"
#include "meshstore/transports/registry.hpp"

namespace meshstore {

namespace store {

transports::TransportConfig transport_config(const StoreOptions& o) {
  transports::TransportConfig tc;
  tc.rpc_chunk_bytes = o.rpc_chunk_bytes;
  tc.rpc_chunks_in_flight = o.rpc_chunks_in_flight;
  tc.request_timeout = o.request_timeout;
  tc.tcp_streams = o.tcp_streams;
  tc.tcp_chunk_bytes = o.tcp_chunk_bytes;
  tc.tcp_encrypt = o.encrypt_tcp;
  tc.small_ops_spin = o.fast_path_spin;
  tc.shm_max_mappings = o.shm_max_mappings;
  return tc;
}

}  // namespace store

Status StoreOptions::validate() const {
  auto bad = [](const std::string& m) {
    return Status(Errc::invalid_argument, "StoreOptions: " + m);
  };
  if (num_volumes < 1 || num_volumes > 1024) {
    return bad("num_volumes must be in [1, 1024], got " + std::to_string(num_volumes));
  }
  if (rank < 0) return bad("rank must be >= 0, got " + std::to_string(rank));
  if (eviction != "none" && eviction != "lru") {
    return bad("eviction must be \"none\" or \"lru\", got \"" + eviction + "\"");
  }
  if (local_rank < -1) return bad("local_rank must be >= -1, got " + std::to_string(local_rank));
  if (fast_path_spin.count() < 0 || fast_path_spin > std::chrono::seconds(1)) {
    return bad("fast_path_spin must be in [0, 1 s], got " + std::to_string(fast_path_spin.count()) +
               " us");
  }
  if (connect_timeout.count() <= 0) {
    return bad("connect_timeout must be positive, got " + std::to_string(connect_timeout.count()) +
               " ms");
  }
  if (auto p = controller::policy_by_name(strategy); !p.ok()) return bad(p.status().message());
  if (custom_strategy.select) {
    if (auto p = controller::policy_by_name(custom_strategy.placement); !p.ok()) {
      return bad("custom_strategy.placement: " + p.status().message());
    }
  }
  if (!transport.empty()) {
    auto f = transports::builtin_registry().find(transport);
    if (!f.ok()) return bad("transport: " + f.status().message());
    if (f->available) {
      if (auto s = f->available(); !s.ok()) {
        return Status(Errc::unsupported, "StoreOptions: transport '" + transport +
                                             "' is unavailable here: " + s.message());
      }
    }
  }
  if (auto s = store::transport_config(*this).validate(); !s.ok()) return bad(s.message());
  if (scheduler_threads < 0 || scheduler_threads > 256) {
    return bad("scheduler_threads must be in [0, 256], got " + std::to_string(scheduler_threads));
  }
  if (!log_level.empty()) {
    if (auto l = log::parse_level(log_level); !l.ok()) return bad(l.status().message());
  }
  return Status();
}

}  // namespace meshstore
