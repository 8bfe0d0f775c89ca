#pragma once

// Spawning CAF actors from threads the spawning actor system does not own.
//
//   std::thread worker([&] {
//     meshstore::ForeignThreadGuard guard;   // before the spawn, in scope
//     auto a = sys.spawn(my_actor);          // or a caf::scoped_actor
//   });

namespace caf {
class logger;
}  // namespace caf

namespace meshstore {

/// Put one around every spawn (or caf::scoped_actor, which spawns) made on a
/// thread the spawning actor system does not own: a service's thread pool, a
/// std::thread of your own, the thread of another system's actor.
///
/// Why: CAF 0.17's spawn leaves the calling thread holding a reference to the
/// spawning system's logger (a thread-local that replaces whatever the thread
/// held), and ~actor_system waits until every such reference is gone. A
/// thread that outlives the system while holding one hangs that system's
/// shutdown (Store::close(), Mesh::close(), or the process exit) forever.
/// The guard gives the thread back what it held before: nothing, or its own
/// system when meshstore made that system. A system meshstore did not make
/// cannot be named, so a thread of such a system keeps the new reference as
/// it would without the guard.
///
/// Not copyable or movable; use it on one thread, in one scope.
class ForeignThreadGuard {
 public:
  ForeignThreadGuard() noexcept;
  ~ForeignThreadGuard();
  ForeignThreadGuard(const ForeignThreadGuard&) = delete;
  ForeignThreadGuard& operator=(const ForeignThreadGuard&) = delete;

 private:
  const caf::logger* const before_;
};

}  // namespace meshstore
