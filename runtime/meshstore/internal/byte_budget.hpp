#pragma once
// A bound on bytes in flight, for work that holds memory while it waits on
// something else (the client's GPU staging pieces: page-locked buffers held
// through a transfer). Asynchronous: a request that does not fit waits in
// line without blocking a thread.
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <utility>

namespace meshstore::internal {

class ByteBudget {
 public:
  /// At most `limit` bytes admitted at once (at least 1).
  explicit ByteBudget(std::size_t limit) : limit_(limit ? limit : 1) {}
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  /// Runs `go` once `n` more bytes fit under the limit: now, on this thread,
  /// or later, on the thread of the release() that makes room. First come,
  /// first served: nothing overtakes a waiting request. A request larger
  /// than the limit runs when nothing else is in flight. The caller calls
  /// release(n) when the work is done. `go` runs outside the lock and may
  /// itself call admit() or release().
  void admit(std::size_t n, std::function<void()> go) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!waiting_.empty() || !fits(n)) {
        waiting_.emplace_back(n, std::move(go));
        return;
      }
      in_flight_ += n;
    }
    go();
  }

  /// Gives back `n` admitted bytes, and runs the waiting requests that now
  /// fit, in order.
  void release(std::size_t n) {
    std::deque<std::function<void()>> ready;
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_flight_ -= n < in_flight_ ? n : in_flight_;
      while (!waiting_.empty() && fits(waiting_.front().first)) {
        in_flight_ += waiting_.front().first;
        ready.push_back(std::move(waiting_.front().second));
        waiting_.pop_front();
      }
    }
    for (auto& go : ready) go();
  }

  /// Bytes admitted and not released.
  std::size_t in_flight() const {
    std::lock_guard<std::mutex> lock(mu_);
    return in_flight_;
  }
  /// Requests waiting for room.
  std::size_t waiting() const {
    std::lock_guard<std::mutex> lock(mu_);
    return waiting_.size();
  }
  std::size_t limit() const noexcept { return limit_; }

 private:
  bool fits(std::size_t n) const { return in_flight_ == 0 || in_flight_ + n <= limit_; }

  const std::size_t limit_;
  mutable std::mutex mu_;  // guards in_flight_ and waiting_
  std::size_t in_flight_ = 0;
  std::deque<std::pair<std::size_t, std::function<void()>>> waiting_;
};

}  // namespace meshstore::internal
