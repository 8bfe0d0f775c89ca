#pragma once

// A host agent: a long-running process on each host that starts and stops
// worker processes for a controller (ProcMesh::attach), passes their output
// back line by line, and stops them when that controller goes away. The
// `meshstore agent --listen HOST:PORT` command runs one.
//
//   auto agent = meshstore::HostAgent::start({"10.0.0.2", 29600}).value();
//   // ... controllers attach; then:
//   agent.stop();   // stops every process it started

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "meshstore/status.hpp"
#include "meshstore/tls.hpp"

namespace meshstore {

/// How HostAgent::start runs an agent: where it listens, how it stops
/// processes, and its TLS.
struct AgentOptions {
  /// The address to listen on. Only controllers that can reach it can use
  /// the agent: 127.0.0.1 (the default) keeps it to this host.
  std::string host = "127.0.0.1";
  /// The port; 0 picks a free one (see HostAgent::port()).
  std::uint16_t port = 0;
  /// How long a process has to exit when its job stops before it is killed.
  std::chrono::milliseconds stop_grace{5000};
  /// Mutual TLS: only controllers with a certificate tls.ca_file signed may
  /// connect (docs/security.md). Unset: plain, and a warning beyond loopback.
  TlsOptions tls;
};

/// What a host agent has running and has done since it started
/// (HostAgent::stats; the meshstore_agent_* series of `meshstore agent
/// --metrics`, docs/operations.md).
struct AgentStats {
  std::uint64_t jobs = 0;               ///< launches running (not yet stopped)
  std::uint64_t processes = 0;          ///< worker processes alive now
  std::uint64_t processes_started = 0;  ///< started, relaunched ones included
  std::uint64_t process_exits = 0;      ///< exits seen, whatever their status
};

/// A running host agent. Move-only; stop() (or the destructor) stops every
/// process it started. Thread-safe.
class HostAgent {
 public:
  /// Listens on options.host:port. Errc::invalid_argument for an empty
  /// host, Errc::unavailable when the address cannot be bound.
  static Result<HostAgent> start(AgentOptions options = {});
  /// Moves the agent; the moved-from handle is empty (port() is 0).
  HostAgent(HostAgent&&) noexcept;
  /// Stops the agent this handle held (as stop() does), then takes over the other.
  HostAgent& operator=(HostAgent&&) noexcept;
  ~HostAgent();

  /// The port it listens on.
  std::uint16_t port() const noexcept;
  /// Its jobs and processes now (any thread).
  AgentStats stats() const;
  /// Stops every process it started, then itself. Idempotent.
  void stop();

 private:
  struct Impl;
  explicit HostAgent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshstore
