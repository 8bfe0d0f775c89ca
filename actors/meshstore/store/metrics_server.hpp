#pragma once

// The HTTP endpoints a store process serves for its operators
// (StoreOptions::metrics; docs/operations.md), on civetweb:
//   /metrics  Prometheus' text format: the calls' latency histograms and
//             failures (OpMetrics), and what the store reports at the
//             scrape (volumes, the controller's counters, the client's routes)
//   /healthz  200 while the process is up
//   /readyz   200 when the store answers and its volumes serve; 503 with a
//             one-line reason otherwise

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "meshstore/status.hpp"
#include "meshstore/store_types.hpp"

struct mg_context;
struct mg_connection;

namespace meshstore::store {

/// What the server asks its store at each request (any civetweb thread).
struct MetricsSource {
  /// The volumes this process answers for: every volume the controller
  /// lists where the controller lives here, else the ones hosted here.
  std::function<Result<std::vector<VolumeStats>>()> volumes;
  /// The controller's counters; unset where the controller lives elsewhere.
  std::function<Result<ControllerCounters>()> controller;
  /// What this process's calls on the caller's thread did.
  std::function<FastPathStats()> client;
  /// Whether a process with no volume is ready (not where the controller
  /// lives: a store with no volume cannot take a put).
  bool ready_without_volumes = true;
};

/// A running server; stops (waiting for requests in flight) when destroyed.
class MetricsServer {
 public:
  /// Listens on `address` ("HOST:PORT", port 0 picks a free one).
  /// Errc::invalid_argument for a bad address, Errc::unavailable when it
  /// cannot listen (naming the address and civetweb's reason).
  static Result<std::unique_ptr<MetricsServer>> start(const std::string& address,
                                                      MetricsSource source);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  /// Where it listens, as "HOST:PORT" with the port it got.
  const std::string& address() const { return address_; }

  /// The body of /metrics now.
  std::string scrape() const;
  /// Empty when ready, else why not (one line).
  std::string not_ready() const;

 private:
  explicit MetricsServer(MetricsSource source) : source_(std::move(source)) {}
  static int on_metrics(mg_connection* conn, void* self);
  static int on_healthz(mg_connection* conn, void* self);
  static int on_readyz(mg_connection* conn, void* self);

  MetricsSource source_;
  mg_context* ctx_ = nullptr;
  std::string address_;
};

/// One HTTP GET answered, as a scraper sees it (`meshstore top`, tests).
struct HttpReply {
  int status = 0;  ///< 0 when no answer came (`error` says why)
  std::string body;
  std::string error;
};

/// GET `path` from "HOST:PORT" over civetweb's client, waiting at most
/// `timeout_ms` for the answer.
HttpReply http_get(const std::string& address, const std::string& path, int timeout_ms = 10000);

}  // namespace meshstore::store
