#include "meshstore/transports/registry.hpp"

#include <algorithm>

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
  return Status();
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
  if (!forced.empty()) {
    if (auto f = registry.find(forced); !f.ok()) {
      return Status(Errc::unsupported,
                    "transport '" + forced + "' was forced but " + f.status().message());
    }
    for (const auto& e : offered) {
      if (e.transport == forced) return e;
    }
    return Status(Errc::unsupported, "transport '" + forced + "' was forced but volume '" +
                                         volume_id + "' offers only [" + offered_names + "]");
  }
  for (const auto& name : registry.names()) {
    for (const auto& e : offered) {
      if (e.transport == name) return e;
    }
  }
  return Status(Errc::unsupported, "no transport of this build can reach volume '" + volume_id +
                                       "' (it offers [" + offered_names + "])");
}

}  // namespace meshstore::transports
