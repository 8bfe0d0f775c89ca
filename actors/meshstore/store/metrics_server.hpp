#pragma once

// The HTTP endpoints a store process serves for its operators
// (StoreOptions::metrics, `meshstore agent --metrics`; docs/operations.md),
// on HttpServer (http.hpp), over TLS with the process's certificates when
// it has them:
//   /metrics  Prometheus' text format: the calls' latency histograms and
//             failures (OpMetrics), and what the store reports at the
//             scrape (volumes, the controller's counters, the client's routes)
//   /healthz  200 while the process is up
//   /readyz   200 when the store answers and its volumes serve; 503 with a
//             one-line reason otherwise
// Over TLS, /metrics answers only a client whose certificate the CA signed
// (as Prometheus' tls_config sends); the health checks answer any client,
// as a load balancer's or Kubernetes' probes show none.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "meshstore/host_agent.hpp"
#include "meshstore/status.hpp"
#include "meshstore/store/http.hpp"
#include "meshstore/store_types.hpp"
#include "meshstore/tls.hpp"

namespace prometheus {
struct MetricFamily;
}  // namespace prometheus

namespace meshstore::store {

/// What the server asks its process at each request (any server thread).
struct MetricsSource {
  /// The volumes this process answers for: every volume the controller
  /// lists where the controller lives here, else the ones hosted here.
  /// Unset in a process with no store (a host agent), ready while it runs.
  std::function<Result<std::vector<VolumeStats>>()> volumes;
  /// The controller's counters; unset where the controller lives elsewhere.
  std::function<Result<ControllerCounters>()> controller;
  /// What this process's calls on the caller's thread did.
  std::function<FastPathStats()> client;
  /// Whether a process with no volume is ready (not where the controller
  /// lives: a store with no volume cannot take a put).
  bool ready_without_volumes = true;
  /// More series (a host agent's), appended at each scrape.
  std::function<void(std::vector<prometheus::MetricFamily>*)> more;
  /// Why the process is not ready ("" when it is), asked before the
  /// volumes (a store whose controller is gone: a failover is under way).
  std::function<std::string()> not_ready;
  /// Whether the scrape holds this process's calls (OpMetrics): not in a
  /// process that makes none (a host agent).
  bool calls = true;
};

/// What `meshstore agent --metrics` serves: the agent's jobs and
/// processes (meshstore_agent_*); ready while it runs.
MetricsSource agent_metrics(std::function<AgentStats()> stats);

/// A running server; stops (waiting for requests in flight) when destroyed.
class MetricsServer {
 public:
  /// Listens on `address` ("HOST:PORT", port 0 picks a free one), over
  /// TLS when `tls` is enabled; warns when the host is not a loopback one.
  /// Errc::invalid_argument for a bad address or TLS files,
  /// Errc::unavailable when it cannot listen ("cannot serve metrics on
  /// ADDR: why").
  static Result<std::unique_ptr<MetricsServer>> start(const std::string& address,
                                                      MetricsSource source,
                                                      const TlsOptions& tls = {});
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  /// Where it listens, as "HOST:PORT" with the port it got.
  const std::string& address() const;
  /// "https" over TLS, else "http".
  const char* scheme() const { return http_->scheme(); }

  /// The body of /metrics now.
  std::string scrape() const;
  /// Empty when ready, else why not (one line).
  std::string not_ready() const;

 private:
  explicit MetricsServer(MetricsSource source) : source_(std::move(source)) {}
  HttpAnswer answer(const HttpAsk& ask, bool tls) const;

  MetricsSource source_;
  std::unique_ptr<HttpServer> http_;  // last: stopped first, before source_ goes
};

}  // namespace meshstore::store
