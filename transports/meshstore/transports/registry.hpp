#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "meshstore/status.hpp"
#include "meshstore/transports/transport.hpp"

namespace meshstore::transports {

/// How to make both halves of one transport.
struct TransportFactory {
  /// Unique name, for example "rpc"; what StoreOptions::transport.name names.
  std::string name;
  /// Higher wins when several transports can serve a pair.
  int priority = 0;
  Capabilities capabilities;
  std::function<Result<std::unique_ptr<TransportServer>>(const ServerContext&)> make_server;
  std::function<Result<std::unique_ptr<Transport>>(const ClientContext&, const EndpointInfo&)>
      make_client;
  /// Whether a client in this process can use `endpoint` (shm: same host
  /// and user). Empty = always. The error says why not.
  std::function<Status(const EndpointInfo& endpoint)> can_serve;
  /// Whether the transport can run in this process at all (rdma: a device
  /// exists). Empty = always. Volumes skip an unavailable transport unless
  /// it was asked for by name; the error says why.
  std::function<Status()> available;
  /// Whether the transport moves a caller's GPU memory itself, in this
  /// process, without staging it through host memory (Capabilities::
  /// device_copies): ok or why not. Empty = never (the client stages it).
  std::function<Status()> gpu_direct;
};

/// The transports a process knows. Transports register themselves here (see
/// builtin_registry()); core code never names a transport. Thread-safe.
class TransportRegistry {
 public:
  /// Adds a factory. Errc::invalid_argument if the name is empty or taken or
  /// a maker is missing.
  Status add(TransportFactory factory);
  /// The factory named `name`, or Errc::not_found listing the known names.
  Result<TransportFactory> find(const std::string& name) const;
  /// Registered names, highest priority first.
  std::vector<std::string> names() const;

 private:
  mutable std::mutex mu_;  // guards factories_
  std::vector<TransportFactory> factories_;
};

/// The registry holding every transport built into this binary.
TransportRegistry& builtin_registry();

/// The transport name forced by the environment (MESHSTORE_TRANSPORT), or "".
std::string transport_from_env();

/// Picks the transport a client uses for a volume offering `offered`:
/// `forced` when non-empty (Errc::unsupported if the volume does not offer it,
/// this binary lacks it or it cannot serve this pair, e.g. shm across hosts:
/// never a silent fallback), else the offered transport with the highest
/// priority that can serve the pair.
Result<EndpointInfo> select_transport(const TransportRegistry& registry,
                                      const std::vector<EndpointInfo>& offered,
                                      const std::string& forced, const std::string& volume_id);

}  // namespace meshstore::transports
