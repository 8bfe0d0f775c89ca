#pragma once
// Spawning CAF actors from threads that are not the spawning system's own.
#include <caf/actor_system.hpp>
#include <caf/logger.hpp>

namespace meshstore::internal {

/// The actor system (made by an ActorRuntime, alive) whose logger is
/// `logger`; nullptr when there is none.
caf::actor_system* system_of(const caf::logger* logger) noexcept;

/// Put one around a spawn (or a caf::scoped_actor, which spawns) on a
/// thread that may not be the spawning system's own. CAF's spawn leaves the
/// calling thread holding a reference to that system's logger (a
/// thread-local, replacing whatever it held), and ~actor_system waits until
/// every such reference is gone: a thread that outlives the system while
/// holding one (the copy engine's, a transport's, a caller's thread pool,
/// the thread that made a store another thread closes, a worker of another
/// store) hangs the shutdown forever. The guard gives the thread back what
/// it held before: nothing, or its own system (found by system_of(); a
/// system meshstore did not make cannot be named, and keeps the new
/// reference as before).
class ForeignThreadGuard {
 public:
  ForeignThreadGuard() noexcept : before_(caf::logger::current_logger()) {}
  ~ForeignThreadGuard() {
    if (caf::logger::current_logger() == before_) return;
    if (before_ == nullptr) {
      caf::logger::set_current_actor_system(nullptr);
    } else if (auto* sys = system_of(before_)) {
      caf::logger::set_current_actor_system(sys);
    }
  }
  ForeignThreadGuard(const ForeignThreadGuard&) = delete;
  ForeignThreadGuard& operator=(const ForeignThreadGuard&) = delete;

 private:
  const caf::logger* const before_;
};

}  // namespace meshstore::internal
