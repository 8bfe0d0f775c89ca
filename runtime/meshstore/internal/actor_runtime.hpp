#pragma once

#include <caf/all.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "meshstore/internal/foreign_thread.hpp"
#include "meshstore/status.hpp"
#include "meshstore/tls.hpp"

namespace meshstore::internal {

/// Settings of the CAF actor system a store or mesh runs on.
struct RuntimeOptions {
  /// Scheduler worker threads; 0 picks max(2, the CPUs this process may
  /// run on: internal::usable_cpus()), capped at 8.
  int scheduler_threads = 0;
  /// Load CAF's middleman (network layer) for cross-process actors.
  bool with_middleman = false;
  /// With the middleman: BASP heartbeats to every connected node, and how
  /// long a silent connection may stay open. A host that vanishes without
  /// closing its sockets (power loss, a cut link) is then declared down
  /// (its actors' monitors fire) after `connection_timeout`, not never.
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds connection_timeout{10000};
  /// With the middleman: mutual TLS on every connection this system opens
  /// or accepts through internal::publish_actor / connect_with_retry.
  TlsOptions tls;
  /// Registers the message types of higher layers (transports, actors).
  std::function<void(caf::actor_system_config&)> add_types;
};

/// Owns a CAF actor system configured for meshstore: thread count, the
/// meshstore error category, the runtime's own message types
/// (std::vector<uint64_t>, std::vector<char>) and those of higher layers
/// (RuntimeOptions::add_types: the store's wire structs, actor handles),
/// each under a stable name so typed interfaces match across processes.
/// Destroy every actor handle before the ActorRuntime: CAF waits for live
/// actors when the system goes away. Thread-safe after construction.
class ActorRuntime {
 public:
  /// Fails with Errc::invalid_argument on a bad option.
  static Result<std::unique_ptr<ActorRuntime>> create(const RuntimeOptions& options);
  ~ActorRuntime();

  caf::actor_system& system() noexcept { return *system_; }
  int scheduler_threads() const noexcept { return threads_; }
  /// What it was made with (add_types aside).
  const RuntimeOptions& options() const noexcept { return options_; }
  /// Its configuration, with every registered message type.
  const caf::actor_system_config& config() const noexcept { return *config_; }
  /// Whether this system's connections are TLS (RuntimeOptions::tls).
  bool tls() const noexcept { return tls_; }
  /// "HOST:PORT" where other processes connect to this one directly (with
  /// the network: a door actor published on `host`, once per host, over TLS
  /// when the runtime has it). A process that reaches this one only through
  /// a third (each connected to a store's server) connects here, and CAF
  /// then routes their messages directly (docs/internals/connections.md,
  /// "Direct connections"). Errc::unavailable when it cannot listen there.
  Result<std::string> door(const std::string& host);

 private:
  ActorRuntime() = default;
  std::unique_ptr<caf::actor_system_config> config_;
  std::unique_ptr<caf::actor_system> system_;
  RuntimeOptions options_;
  std::mutex doors_mu_;                                       // guards doors_
  std::vector<std::pair<std::string, std::uint16_t>> doors_;  // host, port
  caf::actor door_;                                           // published on each
  int threads_ = 0;
  bool tls_ = false;
};

/// The process's runtime (docs/internals/runtime.md, "One runtime per
/// process"): every Store, Mesh, ProcMesh (controller and worker) and
/// HostAgent of a process runs on it. The first of them makes it, with the
/// network layer always loaded and every layer's message types
/// (register_process_types); it goes when the last lets go, and the next
/// one makes a new one. A later caller gets the running one when `wanted`
/// fits it: the same TLS identity when it uses the network (CAF 0.17 gives
/// an actor system one certificate, so a process that speaks with a second
/// one, a test of refusal, gets a runtime for each), and message types it
/// already has (else Errc::invalid_argument naming the missing ones, and
/// `who`). Other differences (threads, heartbeats) keep the running
/// runtime's settings and are logged once.
Result<std::shared_ptr<ActorRuntime>> process_runtime(const RuntimeOptions& wanted,
                                                      const std::string& who);

/// Adds message types to every process runtime made from now on. Each
/// layer calls it from a static initializer in the file that makes its
/// objects, so a linked layer's types are there whichever object the
/// program makes first. Returns true (for that initializer).
bool register_process_types(std::function<void(caf::actor_system_config&)> add);

/// Sends `actors` an exit and waits until each is gone, at most `limit`;
/// how many did not stop in time. An ActorRuntime that stays up (the
/// process's) does not wait for them as its destruction would.
std::size_t stop_actors(caf::actor_system& sys, const std::vector<caf::actor>& actors,
                        std::chrono::milliseconds limit);

/// A closure run inside an actor (continuations of futures that must touch
/// actor state). Local only: never crosses a process.
struct Closure {
  std::function<void()> fn;
};

}  // namespace meshstore::internal

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(meshstore::internal::Closure)
