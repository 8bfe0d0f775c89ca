// OpMetrics: the calls' latency histograms and failure counters.

#include "meshstore/store/metrics.hpp"

#include <prometheus/metric_family.h>

#include <algorithm>
#include <cstdint>
#include <limits>

namespace meshstore::store {

std::atomic<std::uint64_t>& loans_outstanding() {
  static std::atomic<std::uint64_t> n{0};
  return n;
}

const char* op_name(Op op) {
  switch (op) {
    case Op::put:
      return "put";
    case Op::put_batch:
      return "put_batch";
    case Op::get:
      return "get";
    case Op::get_batch:
      return "get_batch";
    case Op::get_into:
      return "get_into";
    case Op::get_into_batch:
      return "get_into_batch";
    case Op::remove:
      return "remove";
    case Op::put_state_dict:
      return "put_state_dict";
    case Op::get_state_dict:
      return "get_state_dict";
    case Op::get_state_dict_into:
      return "get_state_dict_into";
    case Op::publish:
      return "publish";
    case Op::get_latest:
      return "get_latest";
    case Op::count_:
      break;
  }
  return "unknown";
}

OpMetrics& OpMetrics::instance() {
  static OpMetrics* metrics = new OpMetrics();  // never destroyed: callbacks may run at exit
  return *metrics;
}

void OpMetrics::observe(Op op, double seconds, const Status& status) {
  const auto i = static_cast<std::size_t>(op);
  if (i >= kOps) return;
  auto& l = latency_[i];
  const auto b = std::lower_bound(kBounds.begin(), kBounds.end(), seconds) - kBounds.begin();
  l.buckets[static_cast<std::size_t>(b)].fetch_add(1, std::memory_order_relaxed);
  l.sum_ns.fetch_add(static_cast<std::uint64_t>(std::max(0.0, seconds) * 1e9),
                     std::memory_order_relaxed);
  if (!status.ok()) {
    const auto code = static_cast<std::size_t>(status.code());
    if (code < kCodes) failures_[i][code].fetch_add(1, std::memory_order_relaxed);
  }
}

std::vector<prometheus::MetricFamily> OpMetrics::collect() const {
  using prometheus::ClientMetric;
  prometheus::MetricFamily latency;
  latency.name = "meshstore_operation_duration_seconds";
  latency.help = "Time from a store call to its completion, by call (op), failed calls included";
  latency.type = prometheus::MetricType::Histogram;
  prometheus::MetricFamily failures;
  failures.name = "meshstore_operation_failures_total";
  failures.help = "Store calls that ended with an error, by call (op) and error code (code)";
  failures.type = prometheus::MetricType::Counter;
  for (std::size_t i = 0; i < kOps; ++i) {
    const char* op = op_name(static_cast<Op>(i));
    const auto& l = latency_[i];
    ClientMetric m;
    m.label = {{"op", op}};
    // Read without a lock: the count is the buckets' sum, so the two always
    // agree; a call counted during the read may miss the sum until the next.
    std::uint64_t cumulative = 0;
    for (std::size_t b = 0; b < l.buckets.size(); ++b) {
      cumulative += l.buckets[b].load(std::memory_order_relaxed);
      const double bound =
          b < kBounds.size() ? kBounds[b] : std::numeric_limits<double>::infinity();
      m.histogram.bucket.push_back({cumulative, bound});
    }
    m.histogram.sample_count = cumulative;
    m.histogram.sample_sum = static_cast<double>(l.sum_ns.load(std::memory_order_relaxed)) / 1e9;
    latency.metric.push_back(std::move(m));
    for (std::size_t c = 1; c < kCodes; ++c) {
      const auto n = failures_[i][c].load(std::memory_order_relaxed);
      if (n == 0) continue;  // a series appears with its first failure
      ClientMetric f;
      f.label = {{"code", std::string(errc_name(static_cast<Errc>(c)))}, {"op", op}};
      f.counter.value = static_cast<double>(n);
      failures.metric.push_back(std::move(f));
    }
  }
  return {std::move(latency), std::move(failures)};
}

}  // namespace meshstore::store
