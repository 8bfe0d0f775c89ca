#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "meshstore/status.hpp"

namespace meshstore {

template <class T>
class Future;
template <class T>
class Promise;

namespace internal {

/// Reports an exception that escaped an on_complete callback (logged, then
/// ignored: one bad callback must not stop the others).
void report_callback_exception(const char* what) noexcept;

/// The state a Promise and its Futures share. Completed at most once;
/// callbacks run on the completing thread after the lock is released, or
/// at once on the registering thread when already complete.
template <class T>
class FutureState {
 public:
  using Callback = std::function<void(const Result<T>&)>;

  explicit FutureState(Status if_dropped) : if_dropped_(std::move(if_dropped)) {}

  /// Stores the result and runs the callbacks. False if already completed.
  bool complete(Result<T> r) {
    std::vector<Callback> callbacks;
    std::function<bool()> canceller;  // dropped outside the lock
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (result_) return false;
      result_.emplace(std::move(r));
      callbacks.swap(callbacks_);
      canceller.swap(canceller_);
    }
    cv_.notify_all();
    // result_ never changes once set, so reading it unlocked is safe here.
    for (auto& cb : callbacks) run(cb);
    return true;
  }

  bool ready() const {
    std::lock_guard<std::mutex> lock(mu_);
    return result_.has_value();
  }

  template <class Clock, class Duration>
  bool wait_until(std::chrono::time_point<Clock, Duration> deadline) const {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, deadline, [this] { return result_.has_value(); });
  }

  void wait() const {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return result_.has_value(); });
  }

  /// The result; only after ready() returned true or wait() returned.
  const Result<T>& result() const { return *result_; }

  void on_complete(Callback cb) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!result_) {
        callbacks_.push_back(std::move(cb));
        return;
      }
    }
    run(cb);
  }

  const Status& if_dropped() const { return if_dropped_; }

  /// What cancel() runs, at most once and only while not complete: the
  /// operation's own cancellation (true when it took effect).
  void set_canceller(std::function<bool()> c) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!result_) canceller_ = std::move(c);
  }

  /// Runs the canceller, if any and not yet complete; its answer.
  bool cancel() {
    std::function<bool()> c;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (result_) return false;
      c.swap(canceller_);
    }
    return c ? c() : false;
  }

 private:
  void run(Callback& cb) const {
    try {
      cb(*result_);
    } catch (const std::exception& e) {
      report_callback_exception(e.what());
    } catch (...) {
      report_callback_exception("unknown exception");
    }
  }

  mutable std::mutex mu_;  // guards result_ (until set) and callbacks_
  mutable std::condition_variable cv_;
  std::optional<Result<T>> result_;
  std::vector<Callback> callbacks_;
  std::function<bool()> canceller_;
  const Status if_dropped_;
};

template <class R>
struct FutureValue {
  using type = R;
};
template <class U>
struct FutureValue<Future<U>> {
  using type = U;
};
template <class U>
struct FutureValue<Result<U>> {
  using type = U;
};
template <>
struct FutureValue<Status> {
  using type = void;
};

template <class T>
std::shared_ptr<FutureState<T>> make_state() {
  return std::make_shared<FutureState<T>>(
      Status(Errc::broken_promise, "promise destroyed without a result"));
}

/// Completes `out` with what `f(args...)` returns: a plain value, a Result,
/// a Status, nothing (void), or another Future (which is then awaited).
template <class U, class F, class... Args>
void fulfil_with(const std::shared_ptr<FutureState<U>>& out, F& f, Args&&... args) {
  using R = std::invoke_result_t<F&, Args...>;
  try {
    if constexpr (std::is_void_v<R>) {
      f(std::forward<Args>(args)...);
      out->complete(Result<void>());
    } else if constexpr (std::is_same_v<R, Status>) {
      out->complete(Result<void>(f(std::forward<Args>(args)...)));
    } else if constexpr (std::is_same_v<R, Future<U>>) {
      Future<U> inner = f(std::forward<Args>(args)...);
      inner.on_complete([out](const Result<U>& r) { out->complete(r); });
    } else {
      out->complete(Result<U>(f(std::forward<Args>(args)...)));
    }
  } catch (const std::exception& e) {
    out->complete(Status(Errc::internal, std::string("exception in continuation: ") + e.what()));
  } catch (...) {
    out->complete(Status(Errc::internal, "unknown exception in continuation"));
  }
}

}  // namespace internal

/// The eventual result of an asynchronous operation: a value of type T (or
/// nothing, for Future<void>) or a Status. Like an asyncio future it can be
/// waited on, with or without a timeout, chained with then(), and combined
/// with when_all() and gather().
///
/// Thread-safe: any thread may wait on, chain or copy a Future, including
/// threads the actor runtime does not own. Copies share one state. Do not
/// block in get() on an actor-runtime thread (inside a continuation): use
/// then() there instead.
template <class T>
class [[nodiscard]] Future {
  struct Unit {};
  using ValueOrUnit = std::conditional_t<std::is_void_v<T>, Unit, T>;

 public:
  /// The type of the value this future yields (void for none).
  using value_type = T;

  /// An invalid future with no state; valid() is false.
  Future() = default;

  /// True when this future is bound to a promise.
  bool valid() const noexcept { return state_ != nullptr; }

  /// True once the result is available.
  bool ready() const { return state_ && state_->ready(); }

  /// Blocks until ready. Returns immediately for an invalid future.
  void wait() const {
    if (state_) state_->wait();
  }

  /// Blocks until ready or until `timeout` passes; true when ready.
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> timeout) const {
    if (!state_) return false;
    // A huge timeout would overflow the deadline: treat it as "forever".
    const auto now = std::chrono::steady_clock::now();
    const auto room = std::chrono::steady_clock::time_point::max() - now;
    // Compared in floating-point seconds: no cast between them can overflow.
    if (std::chrono::duration<long double>(timeout) >= std::chrono::duration<long double>(room)) {
      state_->wait();
      return true;
    }
    return state_->wait_until(now + timeout);
  }

  /// Blocks until ready and returns the result.
  Result<T> get() const {
    if (!state_) return invalid();
    state_->wait();
    return state_->result();
  }

  /// Waits at most `timeout`; returns Errc::wait_timeout if not ready by
  /// then: the operation keeps running (and keeps using its buffers), and
  /// the future can be waited on again. The operation's own deadline, when
  /// it has one, completes the future with Errc::timeout instead.
  template <class Rep, class Period>
  Result<T> get(std::chrono::duration<Rep, Period> timeout) const {
    if (!state_) return invalid();
    if (!wait_for(timeout)) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
      return Status(Errc::wait_timeout, "future not ready after " + std::to_string(ms) +
                                            " ms (the operation is still running)");
    }
    return state_->result();
  }

  /// Cancels the operation behind this future, where it supports that:
  /// the store's put, put_batch, sharded put, get_into and get_into_batch
  /// (docs/reliability.md, "Cancelling a call"). When cancel() returns, the store no
  /// longer reads or writes the caller's buffers; if the operation had not
  /// reached its commit it is abandoned (nothing of a put becomes visible)
  /// and the future completes with Errc::cancelled: true. Otherwise (it was
  /// complete or committing, or the operation cannot be cancelled) the
  /// future completes as it would have: false. Blocks while copies into or
  /// out of the buffers are running (at most the store's request timeout).
  /// A future from then() cancels the one it was chained to. Call it from
  /// your own threads, not inside a store callback.
  bool cancel() const { return state_ && state_->cancel(); }

  /// Calls `f(const Result<T>&)` once the result is known: at once on this
  /// thread if it already is, else on the thread that completes it.
  /// Exceptions escaping `f` are logged and ignored.
  template <class F>
  void on_complete(F&& f) const {
    if (!state_) {
      f(Result<T>(invalid()));
      return;
    }
    state_->on_complete(std::forward<F>(f));
  }

  /// Chains `f` after this future. `f` takes the value (nothing for
  /// Future<void>) and may return a value, a `Result<U>`, a Status, nothing,
  /// or a `Future<U>`; then() returns the matching Future. An error skips `f`
  /// and flows into the returned future unchanged. An exception thrown by
  /// `f` becomes Errc::internal. `f` runs where on_complete() callbacks run.
  template <class F>
  auto then(F&& f) const {
    using R = std::conditional_t<std::is_void_v<T>, std::invoke_result<std::decay_t<F>&>,
                                 std::invoke_result<std::decay_t<F>&, const ValueOrUnit&>>;
    using U = typename internal::FutureValue<typename R::type>::type;
    auto out = internal::make_state<U>();
    if (state_) {
      // Cancelling the chained future cancels this one.
      out->set_canceller([in = std::weak_ptr<internal::FutureState<T>>(state_)] {
        auto s = in.lock();
        return s && s->cancel();
      });
    }
    on_complete([out, fn = std::forward<F>(f)](const Result<T>& r) mutable {
      if (!r.ok()) {
        out->complete(r.status());
        return;
      }
      if constexpr (std::is_void_v<T>) {
        internal::fulfil_with<U>(out, fn);
      } else {
        internal::fulfil_with<U>(out, fn, r.value());
      }
    });
    return Future<U>(out);
  }

 private:
  template <class>
  friend class Promise;
  template <class>
  friend class Future;
  template <class U, class F, class... Args>
  friend void internal::fulfil_with(const std::shared_ptr<internal::FutureState<U>>&, F&,
                                    Args&&...);
  template <class U>
  friend Future<U> make_future_from_state(std::shared_ptr<internal::FutureState<U>>);
  template <class U>
  friend void set_canceller(const Future<U>&, std::function<bool()>);

  explicit Future(std::shared_ptr<internal::FutureState<T>> s) : state_(std::move(s)) {}
  static Status invalid() { return Status(Errc::invalid_argument, "future has no state"); }

  std::shared_ptr<internal::FutureState<T>> state_;
};

/// Makes `f.cancel()` run `c` (replacing what it would run): for operations
/// that can be cancelled. Internal to meshstore's layers.
template <class U>
void set_canceller(const Future<U>& f, std::function<bool()> c) {
  if (f.state_) f.state_->set_canceller(std::move(c));
}

/// Wraps an existing state in a Future (used by combinators).
template <class U>
Future<U> make_future_from_state(std::shared_ptr<internal::FutureState<U>> s) {
  return Future<U>(std::move(s));
}

/// The producing side of a Future. Move-only. Completing it twice is a no-op
/// that returns false. Destroying it without a result completes its futures
/// with Errc::broken_promise (or the Status given at construction), so a
/// waiter never hangs on a forgotten promise.
/// Thread-safe: completion may race with waiting and chaining on any thread.
template <class T>
class Promise {
 public:
  /// The type of the value this promise completes with (void for none).
  using value_type = T;

  /// A promise whose drop reports Errc::broken_promise.
  Promise() : state_(internal::make_state<T>()) {}
  /// A promise whose drop reports `if_dropped` (for example Errc::shutdown).
  explicit Promise(Status if_dropped)
      : state_(std::make_shared<internal::FutureState<T>>(std::move(if_dropped))) {}

  /// Moves the promise; the moved-from one has no state and completes nothing.
  Promise(Promise&&) noexcept = default;
  /// Drops this promise's own state first (as if destroyed: its futures get the
  /// drop Status unless already completed), then takes `other`'s.
  Promise& operator=(Promise&& other) noexcept {
    if (this != &other) {
      drop();
      state_ = std::move(other.state_);
    }
    return *this;
  }
  Promise(const Promise&) = delete;
  Promise& operator=(const Promise&) = delete;
  ~Promise() { drop(); }

  /// A future bound to this promise; may be called any number of times.
  Future<T> future() const { return Future<T>(state_); }

  /// Completes with a value.
  template <class U = T, class = std::enable_if_t<!std::is_void_v<U>>>
  bool set_value(U value) {
    return state_ && state_->complete(Result<T>(std::move(value)));
  }
  /// Completes a Promise<void> successfully.
  template <class U = T, class = std::enable_if_t<std::is_void_v<U>>>
  bool set_value() {
    return state_ && state_->complete(Result<void>());
  }
  /// Completes with an error. An ok `status` is turned into Errc::internal.
  bool set_error(Status status) {
    if (status.ok()) status = Status(Errc::internal, "Promise::set_error with an ok status");
    return state_ && state_->complete(Result<T>(std::move(status)));
  }
  /// Completes with a value or an error.
  bool set(Result<T> r) { return state_ && state_->complete(std::move(r)); }

  /// True once completed.
  bool completed() const { return state_ && state_->ready(); }

 private:
  void drop() {
    if (state_) state_->complete(Result<T>(state_->if_dropped()));
  }
  std::shared_ptr<internal::FutureState<T>> state_;
};

/// A future that is already complete with `value`.
template <class T>
Future<T> make_ready_future(T value) {
  Promise<T> p;
  p.set_value(std::move(value));
  return p.future();
}
/// A Future<void> that is already complete.
inline Future<void> make_ready_future() {
  Promise<void> p;
  p.set_value();
  return p.future();
}
/// A future that is already complete with the error `status`.
template <class T>
Future<T> make_error_future(Status status) {
  Promise<T> p;
  p.set_error(std::move(status));
  return p.future();
}

/// Completes when every input has completed, with every input's Result in
/// input order (errors included; it never fails itself).
template <class T>
Future<std::vector<Result<T>>> when_all(std::vector<Future<T>> futures) {
  struct Shared {
    std::vector<Result<T>> results;
    std::atomic<size_t> remaining;
    Promise<std::vector<Result<T>>> promise;
  };
  auto shared = std::make_shared<Shared>();
  shared->results.assign(futures.size(), Result<T>(Status(Errc::internal, "pending")));
  shared->remaining = futures.size();
  auto out = shared->promise.future();
  if (futures.empty()) {
    shared->promise.set_value({});
    return out;
  }
  for (size_t i = 0; i < futures.size(); ++i) {
    futures[i].on_complete([shared, i](const Result<T>& r) {
      // Each slot is written by exactly one callback; the acq_rel decrement
      // orders all writes before the final read.
      shared->results[i] = r;
      if (shared->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        shared->promise.set_value(std::move(shared->results));
      }
    });
  }
  return out;
}

/// Like asyncio.gather: the values in input order once all succeed, or the
/// first error to arrive (the other operations keep running).
template <class T>
auto gather(std::vector<Future<T>> futures) {
  using Out = std::conditional_t<std::is_void_v<T>, void, std::vector<T>>;
  struct Shared {
    std::vector<std::optional<std::conditional_t<std::is_void_v<T>, char, T>>> values;
    std::atomic<size_t> remaining;
    Promise<Out> promise;
  };
  auto shared = std::make_shared<Shared>();
  shared->values.resize(futures.size());
  shared->remaining = futures.size();
  auto finish = [](Shared& s) {
    if constexpr (std::is_void_v<T>) {
      s.promise.set_value();
    } else {
      std::vector<T> vals;
      vals.reserve(s.values.size());
      for (auto& v : s.values) vals.push_back(std::move(*v));
      s.promise.set_value(std::move(vals));
    }
  };
  Future<Out> out = shared->promise.future();
  if (futures.empty()) {
    finish(*shared);
    return out;
  }
  for (size_t i = 0; i < futures.size(); ++i) {
    futures[i].on_complete([shared, i, finish](const Result<T>& r) {
      if (!r.ok()) {
        shared->promise.set_error(r.status());
      } else {
        if constexpr (std::is_void_v<T>) {
          shared->values[i] = char{1};
        } else {
          shared->values[i] = r.value();
        }
      }
      if (shared->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1 &&
          !shared->promise.completed()) {
        finish(*shared);
      }
    });
  }
  return out;
}

}  // namespace meshstore
