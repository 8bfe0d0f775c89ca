#pragma once
// Spawning CAF actors from threads that are not CAF's own.
#include <caf/logger.hpp>

namespace meshstore::internal {

/// Put one around a spawn (or a caf::scoped_actor, which spawns) on a
/// thread that is not CAF's own. CAF's spawn leaves the calling thread
/// holding a reference to the actor system's logger (a thread-local), and
/// ~actor_system waits until every such reference is gone: a thread that
/// outlives the system while holding one (the copy engine's, a transport's,
/// a caller's thread pool, the thread that created a store another thread
/// closes) hangs the shutdown forever. The guard drops the reference again
/// when it goes, unless the thread held one before (CAF's own threads).
class ForeignThreadGuard {
 public:
  ForeignThreadGuard() noexcept : had_logger_(caf::logger::current_logger() != nullptr) {}
  ~ForeignThreadGuard() {
    if (!had_logger_) caf::logger::set_current_actor_system(nullptr);
  }
  ForeignThreadGuard(const ForeignThreadGuard&) = delete;
  ForeignThreadGuard& operator=(const ForeignThreadGuard&) = delete;

 private:
  const bool had_logger_;
};

}  // namespace meshstore::internal
