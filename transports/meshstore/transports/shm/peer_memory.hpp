#pragma once

// Shared memory another process owns and may shrink under this one.
//
// A volume maps segments its clients create (a fast-path ring). A client that truncates such a
// segment (ftruncate, by bug or on purpose) turns every access past the new end into SIGBUS, which
// would kill the volume's process and every key it holds. While a
// PeerMemory guard covers a mapping, such a fault is survived: a signal
// handler maps a page of zeros over the faulting page and marks the guard
// poisoned, the access completes (reading zeros, or writing to a page
// nobody else sees), and the code that made it checks poisoned() and
// drops the peer as if it had sent garbage.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace meshstore::transports::shm {

class PeerMemory {
 public:
  /// Covers [data, data + n) until the guard is destroyed. Installs the
  /// process's SIGBUS handler at the first call, in front of the one there
  /// then; a fault outside every guarded range is handed to that one (the
  /// default kills the process, as without this). A handler installed
  /// later, in front of ours, sees guarded faults first. Null when all
  /// 1,024 slots are taken: the mapping is then unguarded.
  static std::unique_ptr<PeerMemory> guard(const void* data, std::size_t n);
  /// Unregisters the range; waits for a fault being handled in it. Call
  /// before unmapping the memory.
  ~PeerMemory();
  PeerMemory(const PeerMemory&) = delete;
  PeerMemory& operator=(const PeerMemory&) = delete;

  /// Whether an access faulted since the guard was made (the segment was
  /// shrunk under it): what was read from it since is not to be trusted.
  bool poisoned() const noexcept;

  /// Faults survived in guarded ranges since the process started.
  static std::uint64_t faults_survived() noexcept;

 private:
  explicit PeerMemory(int slot) : slot_(slot) {}
  int slot_;
};

}  // namespace meshstore::transports::shm
