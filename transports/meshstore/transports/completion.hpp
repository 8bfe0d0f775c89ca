#pragma once

// A transfer cut into parts that finish on any thread (tcp's chunks on its
// connections, a one-sided transport's batches on the copy engine): one
// future for the whole, completed when the last part is done, with the
// first error.

#include <atomic>
#include <cstddef>
#include <mutex>

#include "meshstore/future.hpp"

namespace meshstore::transports {

class PartedTransfer {
 public:
  /// `parts` parts to wait for; `dropped` is the future's error if the
  /// transfer is destroyed before its last part is done.
  PartedTransfer(std::size_t parts, Status dropped) : promise_(std::move(dropped)), left_(parts) {}

  Future<void> future() { return promise_.future(); }
  /// Whether a part failed already (later parts may skip their work).
  bool failed() const noexcept { return failed_.load(); }
  /// One part is done with `s`; the last one completes the future.
  void part_done(const Status& s) {
    if (!s.ok() && !failed_.exchange(true)) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = s;
    }
    if (left_.fetch_sub(1) != 1) return;
    if (failed_.load()) {
      std::lock_guard<std::mutex> lock(mu_);
      promise_.set_error(error_);
    } else {
      promise_.set_value();
    }
  }

 private:
  Promise<void> promise_;
  std::atomic<std::size_t> left_;
  std::atomic<bool> failed_{false};
  std::mutex mu_;  // guards error_
  Status error_;
};

}  // namespace meshstore::transports
