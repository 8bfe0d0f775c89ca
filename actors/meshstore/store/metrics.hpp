#pragma once

// What a store's calls took, for /metrics (docs/operations.md): one
// latency histogram per kind of call and failures by error code, kept once
// per process. Recorded only by stores that serve
// metrics (StoreOptions::metrics): a store without them pays nothing.

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "meshstore/future.hpp"
#include "meshstore/status.hpp"

namespace prometheus {
struct MetricFamily;
}  // namespace prometheus

namespace meshstore::store {

/// Direct-publish loans this process has outstanding: versions whose lent
/// memory the store has not given back yet (publish.cpp counts them; the
/// meshstore_client_loans series).
std::atomic<std::uint64_t>& loans_outstanding();

/// The calls measured, each a value of the series' `op` label.
enum class Op {
  put,
  put_batch,
  get,
  get_batch,
  get_into,
  get_into_batch,
  remove,
  put_state_dict,
  get_state_dict,
  get_state_dict_into,
  publish,
  get_latest,
  count_
};

/// The label value of `op` ("put", "get_into", ...).
const char* op_name(Op op);

/// The histograms and failure counters of this process's calls, as
/// relaxed atomic counters: recording takes no lock. (prometheus-cpp's own
/// Histogram takes a mutex in each Observe, which the hot path must not;
/// its data model and text format write these out.)
class OpMetrics {
 public:
  /// The process's one instance (made on first use, never destroyed).
  static OpMetrics& instance();

  /// Counts one call of `op` that took `seconds` and ended with `status`.
  void observe(Op op, double seconds, const Status& status);

  /// The two families, meshstore_operation_duration_seconds and
  /// meshstore_operation_failures_total, as they stand.
  std::vector<prometheus::MetricFamily> collect() const;

  /// The buckets' upper bounds, in seconds (an implicit +Inf follows).
  static constexpr std::array<double, 22> kBounds{
      5e-6,   1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2,
      2.5e-2, 5e-2, 0.1,    0.25, 0.5,  1.0,    2.5,  5.0,  10.0,   30.0, 60.0};

 private:
  OpMetrics() = default;
  static constexpr std::size_t kOps = static_cast<std::size_t>(Op::count_);
  static constexpr std::size_t kCodes = static_cast<std::size_t>(kLastErrc) + 1;

  struct Latency {
    std::array<std::atomic<std::uint64_t>, kBounds.size() + 1> buckets{};  // not cumulative
    std::atomic<std::uint64_t> sum_ns{0};
  };
  std::array<Latency, kOps> latency_{};
  std::array<std::array<std::atomic<std::uint64_t>, kCodes>, kOps> failures_{};
};

/// Times one call: made before the call starts (its work on the caller's
/// thread included), then given the call's future, which it returns as it
/// is, counted in OpMetrics once it completes. Off, it only passes the
/// future on.
class Meter {
 public:
  Meter(bool on, Op op)
      : on_(on),
        op_(op),
        start_(on ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point()) {}

  template <class T>
  Future<T> operator()(Future<T> f) const {
    if (!on_) return f;
    f.on_complete([op = op_, start = start_](const Result<T>& r) {
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      OpMetrics::instance().observe(op, took.count(), r.status());
    });
    return f;
  }

 private:
  bool on_;
  Op op_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace meshstore::store
