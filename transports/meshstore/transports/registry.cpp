#include "meshstore/transports/registry.hpp"

#include <algorithm>
#include <cstdlib>

namespace meshstore::transports {

Status TransportConfig::validate() const {
  constexpr std::size_t kMinChunk = std::size_t{4} << 10;
  constexpr std::size_t kMaxChunk = std::size_t{1} << 30;
  if (rpc_chunk_bytes < kMinChunk || rpc_chunk_bytes > kMaxChunk) {
    return Status(Errc::invalid_argument, "rpc_chunk_bytes must be in [4 KiB, 1 GiB], got " +
                                              std::to_string(rpc_chunk_bytes));
  }
  if (rpc_chunks_in_flight < 1 || rpc_chunks_in_flight > 64) {
    return Status(Errc::invalid_argument, "rpc_chunks_in_flight must be in [1, 64], got " +
                                              std::to_string(rpc_chunks_in_flight));
  }
  if (request_timeout.count() <= 0) {
    return Status(Errc::invalid_argument, "request_timeout must be positive, got " +
                                              std::to_string(request_timeout.count()) + " ms");
  }
  if (tcp_streams < 1 || tcp_streams > 16) {
    return Status(Errc::invalid_argument,
                  "tcp_streams must be in [1, 16], got " + std::to_string(tcp_streams));
  }
  if (tcp_chunk_bytes < (std::size_t{64} << 10) || tcp_chunk_bytes > kMaxChunk) {
    return Status(Errc::invalid_argument, "tcp_chunk_bytes must be in [64 KiB, 1 GiB], got " +
                                              std::to_string(tcp_chunk_bytes));
  }
  if (small_ops_spin.count() < 0 || small_ops_spin > std::chrono::seconds(1)) {
    return Status(Errc::invalid_argument, "small_ops_spin must be in [0, 1 s], got " +
                                              std::to_string(small_ops_spin.count()) + " us");
  }
  if (shm_max_mappings < 1 || shm_max_mappings > 60000) {
    return Status(Errc::invalid_argument, "shm_max_mappings must be in [1, 60000], got " +
                                              std::to_string(shm_max_mappings));
  }
  if (shm_parallel_copy_bytes < kMinChunk || shm_parallel_copy_bytes > kMaxChunk) {
    return Status(Errc::invalid_argument,
                  "shm_parallel_copy_bytes must be in [4 KiB, 1 GiB], got " +
                      std::to_string(shm_parallel_copy_bytes));
  }
  return Status();
}

std::string transport_from_env() {
  const char* t = std::getenv("MESHSTORE_TRANSPORT");
  return t ? std::string(t) : std::string();
}

Status TransportRegistry::add(TransportFactory factory) {
  if (factory.name.empty()) return Status(Errc::invalid_argument, "transport name is empty");
  if (!factory.make_server || !factory.make_client) {
    return Status(Errc::invalid_argument, "transport '" + factory.name + "' lacks a maker");
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& f : factories_) {
    if (f.name == factory.name) {
      return Status(Errc::invalid_argument,
                    "transport '" + factory.name + "' is already registered");
    }
  }
  factories_.push_back(std::move(factory));
  std::stable_sort(factories_.begin(), factories_.end(),
                   [](const auto& a, const auto& b) { return a.priority > b.priority; });
  return Status();
}

Result<TransportFactory> TransportRegistry::find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string known;
  for (const auto& f : factories_) {
    if (f.name == name) return f;
    known += (known.empty() ? "" : ", ") + f.name;
  }
  return Status(Errc::not_found,
                "no transport named '" + name + "' in this build (built: " + known + ")");
}

std::vector<std::string> TransportRegistry::names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& f : factories_) out.push_back(f.name);
  return out;
}

Result<EndpointInfo> select_transport(const TransportRegistry& registry,
                                      const std::vector<EndpointInfo>& offered,
                                      const std::string& forced, const std::string& volume_id) {
  std::string offered_names;
  for (const auto& e : offered) offered_names += (offered_names.empty() ? "" : ", ") + e.transport;
  auto usable = [&](const EndpointInfo& e) -> Status {
    auto f = registry.find(e.transport);
    if (!f.ok()) return f.status();
    if (f->can_serve) return f->can_serve(e);
    return Status();
  };
  if (!forced.empty()) {
    auto f = registry.find(forced);
    if (!f.ok()) {
      return Status(Errc::unsupported,
                    "transport '" + forced + "' was forced but " + f.status().message());
    }
    if (f->available) {
      if (auto s = f->available(); !s.ok()) {
        return Status(Errc::unsupported,
                      "transport '" + forced + "' was forced but is unavailable: " + s.message());
      }
    }
    for (const auto& e : offered) {
      if (e.transport != forced) continue;
      if (auto s = usable(e); !s.ok()) {
        return Status(Errc::unsupported, "transport '" + forced +
                                             "' was forced but cannot reach volume '" + volume_id +
                                             "': " + s.message());
      }
      return e;
    }
    return Status(Errc::unsupported, "transport '" + forced + "' was forced but volume '" +
                                         volume_id + "' offers only [" + offered_names + "]");
  }
  std::string refused;
  for (const auto& name : registry.names()) {
    for (const auto& e : offered) {
      if (e.transport != name) continue;
      auto s = usable(e);
      if (s.ok()) return e;
      refused += "; " + name + ": " + s.message();
    }
  }
  return Status(Errc::unsupported, "no transport of this build can reach volume '" + volume_id +
                                       "' (it offers [" + offered_names + "]" + refused + ")");
}

}  // namespace meshstore::transports
