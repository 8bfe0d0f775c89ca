#pragma once

// A server's state directory (StoreOptions::state_dir; docs/reliability.md,
// "A server restarted in place"): how a server started again at its
// address tells a restart from a fresh start.

#include <memory>
#include <string>
#include <utility>

#include "meshstore/status.hpp"

namespace meshstore::store {

/// A server's hold on its state directory: a lock (flock on "lock", held
/// while the process lives, released by the kernel when it dies) and a
/// marker ("serving") written once the server serves and removed when it
/// closes. A marker found at the start means the last server from this
/// directory died serving: this one restarts its store.
class StateDir {
 public:
  /// Takes `dir` for this process. Errc::invalid_argument when `dir` is not
  /// a directory; Errc::unavailable when a live server holds it (naming
  /// where it serves); Errc::io_error when it cannot be written.
  static Result<std::unique_ptr<StateDir>> claim(const std::string& dir);

  /// Whether the last server from this directory died serving.
  bool restarted() const { return restarted_; }
  /// Where that server served ("" when unknown or not restarted).
  const std::string& last_address() const { return last_address_; }

  /// Records that this server serves at `address`: written to a temporary
  /// file and renamed over the marker, so a reader never sees half of it.
  Status serving(const std::string& address);

  /// Removes the marker if this server wrote it (a clean close); one that
  /// failed before it served leaves what it found. Then drops the lock.
  ~StateDir();
  StateDir(const StateDir&) = delete;
  StateDir& operator=(const StateDir&) = delete;

 private:
  StateDir(std::string dir, int lock_fd) : dir_(std::move(dir)), lock_fd_(lock_fd) {}
  std::string dir_;
  int lock_fd_ = -1;
  bool restarted_ = false;
  bool wrote_ = false;
  std::string last_address_;
};

}  // namespace meshstore::store
