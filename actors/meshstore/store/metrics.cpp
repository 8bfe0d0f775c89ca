// OpMetrics: the calls' latency histograms and failure counters.

#include "meshstore/store/metrics.hpp"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace meshstore::store {

namespace {

// From 5 us (a get on the caller's thread) to a minute (a large state dict
// across hosts), about three buckets a decade.
const prometheus::Histogram::BucketBoundaries& latency_buckets() {
  static const prometheus::Histogram::BucketBoundaries b{
      5e-6,   1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2,
      2.5e-2, 5e-2, 0.1,    0.25, 0.5,  1.0,    2.5,  5.0,  10.0,   30.0, 60.0};
  return b;
}

}  // namespace

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

OpMetrics::OpMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto& latency = prometheus::BuildHistogram()
                      .Name("meshstore_operation_duration_seconds")
                      .Help(
                          "Time from a store call to its completion, by call (op), "
                          "failed calls included")
                      .Register(*registry_);
  for (std::size_t i = 0; i < latency_.size(); ++i) {
    latency_[i] = &latency.Add({{"op", op_name(static_cast<Op>(i))}}, latency_buckets());
  }
  failures_ = &prometheus::BuildCounter()
                   .Name("meshstore_operation_failures_total")
                   .Help("Store calls that ended with an error, by call (op) and error code (code)")
                   .Register(*registry_);
}

void OpMetrics::observe(Op op, double seconds, const Status& status) {
  const auto i = static_cast<std::size_t>(op);
  if (i >= latency_.size()) return;
  latency_[i]->Observe(seconds);
  if (!status.ok()) {
    failures_->Add({{"op", op_name(op)}, {"code", std::string(errc_name(status.code()))}})
        .Increment();
  }
}

}  // namespace meshstore::store
