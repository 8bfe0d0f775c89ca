#pragma once

// What a store's calls took, for /metrics (docs/operations.md): one
// latency histogram per kind of call and failures by error code, in one
// process-wide prometheus-cpp registry. Recorded only by stores that serve
// metrics (StoreOptions::metrics): a store without them pays nothing.

#include <array>
#include <chrono>
#include <memory>
#include <string>

#include "meshstore/future.hpp"
#include "meshstore/status.hpp"

namespace prometheus {
class Histogram;
class Registry;
template <typename T>
class Family;
class Counter;
}  // namespace prometheus

namespace meshstore::store {

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

/// The histograms and failure counters of this process's calls. Recording
/// is lock-free (prometheus-cpp's atomic counters); a failure's first
/// (op, code) pair takes the family's lock once to make its series.
class OpMetrics {
 public:
  /// The process's one instance (made on first use, never destroyed).
  static OpMetrics& instance();

  /// Counts one call of `op` that took `seconds` and ended with `status`.
  void observe(Op op, double seconds, const Status& status);

  /// The registry holding the series, for the metrics server to serialize.
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

 private:
  OpMetrics();

  std::shared_ptr<prometheus::Registry> registry_;
  std::array<prometheus::Histogram*, static_cast<std::size_t>(Op::count_)> latency_{};
  prometheus::Family<prometheus::Counter>* failures_ = nullptr;
};

/// `f` as it is, counted in OpMetrics once it completes when `on`: the
/// time from this call to its completion.
template <class T>
Future<T> metered(bool on, Op op, Future<T> f) {
  if (!on) return f;
  const auto start = std::chrono::steady_clock::now();
  f.on_complete([op, start](const Result<T>& r) {
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    OpMetrics::instance().observe(op, took.count(), r.status());
  });
  return f;
}

}  // namespace meshstore::store
