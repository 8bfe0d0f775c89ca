#pragma once

// Cancelling a call that uses the caller's buffers (Future::cancel): the
// places that read or write those buffers enter() before and leave() after;
// cancel() stops new entries and waits for the running ones, so that once
// it returns nothing touches the buffers. Internal.

#include <condition_variable>
#include <mutex>

namespace meshstore::internal {

class CallGuard {
 public:
  /// Before touching the caller's buffers: false once cancelled (then do
  /// not touch them, and stop the call).
  bool enter() {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::cancelled) return false;
    ++active_;
    return true;
  }
  /// After touching them (each enter() that answered true, once).
  void leave() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--active_ == 0) idle_.notify_all();
  }
  /// Before the call's commit: false once cancelled (do not commit);
  /// afterwards cancel() no longer takes effect.
  bool begin_commit() {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::cancelled) return false;
    state_ = State::committing;
    return true;
  }
  /// begin_commit() and enter() at once: for a last touch after which the
  /// call completes (copying a read's bytes to its device buffers).
  bool enter_final() {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::cancelled) return false;
    state_ = State::committing;
    ++active_;
    return true;
  }
  /// Stops the call unless it is committing; waits until no buffer is
  /// being touched either way. True when it stopped the call.
  bool cancel() {
    std::unique_lock<std::mutex> lock(mu_);
    const bool stopped = state_ != State::committing;
    if (stopped) state_ = State::cancelled;
    idle_.wait(lock, [this] { return active_ == 0; });
    return stopped;
  }
  bool cancelled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return state_ == State::cancelled;
  }

 private:
  enum class State { running, committing, cancelled };
  mutable std::mutex mu_;  // guards all below
  std::condition_variable idle_;
  State state_ = State::running;
  int active_ = 0;
};

}  // namespace meshstore::internal
