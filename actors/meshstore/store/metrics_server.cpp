// MetricsServer: /metrics, /healthz and /readyz (on HttpServer).

#include "meshstore/store/metrics_server.hpp"

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <utility>

#include "meshstore/internal/address.hpp"
#include "meshstore/internal/tls_watch.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/store/metrics.hpp"

namespace meshstore::store {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily family(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

void add(MetricFamily& f, double value, std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric m;
  m.label = std::move(labels);
  if (f.type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
}

// A series of one sample, no labels.
struct Single {
  const char* name;
  const char* help;
  MetricType type;
  std::uint64_t value;
};

void add_singles(std::initializer_list<Single> singles, std::vector<MetricFamily>* out) {
  for (const auto& one : singles) {
    auto f = family(one.name, one.help, one.type);
    add(f, static_cast<double>(one.value));
    out->push_back(std::move(f));
  }
}

// One gauge a volume for each of its figures; the `up` gauge says which
// answered (the others' figures are zero).
void volume_families(const std::vector<VolumeStats>& volumes, std::vector<MetricFamily>* out) {
  auto keys = family("meshstore_keys", "Objects a volume holds committed", MetricType::Gauge);
  auto held = family("meshstore_held_bytes",
                     "Payload bytes a volume holds in memory, staged and leased included",
                     MetricType::Gauge);
  auto capacity =
      family("meshstore_capacity_bytes", "A volume's capacity (0 = unlimited)", MetricType::Gauge);
  auto staged = family("meshstore_staged_objects", "Objects of puts still in flight on a volume",
                       MetricType::Gauge);
  auto leases = family("meshstore_leases", "Read leases open on a volume", MetricType::Gauge);
  auto evictions = family("meshstore_evictions_total", "Objects a volume evicted to make room",
                          MetricType::Counter);
  auto evicted = family("meshstore_evicted_bytes_total", "Bytes of the objects a volume evicted",
                        MetricType::Counter);
  auto up = family("meshstore_volume_up",
                   "1 when a volume the controller lists answered, 0 when it is gone or cut off",
                   MetricType::Gauge);
  for (const auto& v : volumes) {
    std::vector<ClientMetric::Label> l{{"volume", v.volume_id}};
    add(keys, static_cast<double>(v.objects), l);
    add(held, static_cast<double>(v.bytes_held), l);
    add(capacity, static_cast<double>(v.capacity_bytes), l);
    add(staged, static_cast<double>(v.staged), l);
    add(leases, static_cast<double>(v.leases), l);
    add(evictions, static_cast<double>(v.evictions), l);
    add(evicted, static_cast<double>(v.evicted_bytes), l);
    add(up, v.unreachable.empty() ? 1.0 : 0.0, l);
  }
  for (auto* f : {&keys, &held, &capacity, &staged, &leases, &evictions, &evicted, &up}) {
    out->push_back(std::move(*f));
  }
}

void controller_families(const ControllerCounters& c, std::vector<MetricFamily>* out) {
  auto commits = family("meshstore_controller_commits_total",
                        "Commits the controller took (a put_batch or state dict commits once)",
                        MetricType::Counter);
  add(commits, static_cast<double>(c.notify_put + c.notify_put_batch));
  auto requests = family("meshstore_controller_requests_total",
                         "Control requests the controller handled, by kind", MetricType::Counter);
  const std::pair<const char*, std::uint64_t> kinds[] = {{"locate", c.locate},
                                                         {"exists", c.exists},
                                                         {"keys", c.keys},
                                                         {"remove", c.remove},
                                                         {"stream", c.streams},
                                                         {"stream_read", c.stream_readers},
                                                         {"pinned_locate", c.pinned_locates}};
  for (const auto& [kind, n] : kinds) add(requests, static_cast<double>(n), {{"kind", kind}});
  out->push_back(std::move(commits));
  out->push_back(std::move(requests));
}

// The client's routes: a get served on the caller's thread or by the
// client actor, and the channels its puts take.
void client_families(const FastPathStats& s, std::vector<MetricFamily>* out) {
  auto gets = family("meshstore_client_gets_total",
                     "Gets by route: caller_thread (a channel or shared memory), actor",
                     MetricType::Counter);
  add(gets, static_cast<double>(s.hits), {{"route", "caller_thread"}});
  add(gets, static_cast<double>(s.misses), {{"route", "actor"}});
  out->push_back(std::move(gets));
  auto channels = family("meshstore_client_channels",
                         "Channels open to volumes, by the transport each serves (shm: a ring; "
                         "tcp: a connection of its own; others: actor messages)",
                         MetricType::Gauge);
  for (const auto& [transport, n] : s.channels) {
    add(channels, static_cast<double>(n), {{"transport", transport}});
  }
  out->push_back(std::move(channels));
  add_singles({{"meshstore_client_direct_reads_total",
                "Gets copied straight from a same-host volume's shared memory", MetricType::Counter,
                s.direct_reads},
               {"meshstore_client_stale_locations_total",
                "Gets whose known location was superseded and located afresh", MetricType::Counter,
                s.stale},
               {"meshstore_client_channel_puts_total", "Puts committed over a channel to a volume",
                MetricType::Counter, s.puts},
               {"meshstore_client_resent_commits_total",
                "Commits sent again over a new connection after theirs failed", MetricType::Counter,
                s.resent_commits},
               {"meshstore_client_loans",
                "Direct-publish loans this process has outstanding: versions whose lent memory the "
                "store has not given back yet",
                MetricType::Gauge, loans_outstanding().load(std::memory_order_relaxed)}},
              out);
}

}  // namespace

MetricsSource agent_metrics(std::function<AgentStats()> stats) {
  MetricsSource source;
  source.calls = false;
  source.more = [stats = std::move(stats)](std::vector<MetricFamily>* out) {
    const AgentStats s = stats();
    add_singles(
        {{"meshstore_agent_jobs", "Launches the agent runs for controllers, not yet stopped",
          MetricType::Gauge, s.jobs},
         {"meshstore_agent_processes", "Worker processes of the agent alive now", MetricType::Gauge,
          s.processes},
         {"meshstore_agent_processes_started_total",
          "Worker processes the agent started, relaunched ones included", MetricType::Counter,
          s.processes_started},
         {"meshstore_agent_process_exits_total",
          "Exits of the agent's worker processes, whatever their status", MetricType::Counter,
          s.process_exits}},
        out);
  };
  return source;
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const std::string& address,
                                                            MetricsSource source,
                                                            const TlsOptions& tls) {
  auto at = internal::parse_address(address);
  if (!at.ok()) return at.status().with_context("metrics address");
  std::unique_ptr<MetricsServer> server(new MetricsServer(std::move(source)));
  const bool tls_on = tls.enabled();
  auto http = HttpServer::start(
      "metrics", address, tls,
      [self = server.get(), tls_on](const HttpAsk& ask) { return self->answer(ask, tls_on); });
  if (!http.ok()) return http.status();
  server->http_ = std::move(http).value();
  log::get("store")->info("serving /metrics, /healthz and /readyz on {}://{}",
                          server->http_->scheme(), server->address());
  internal::warn_if_exposed(at->host, server->http_->port(), "the metrics endpoint", tls_on,
                            "read the store's series: its volumes, their keys and bytes, and "
                            "its call rates");
  return server;
}

MetricsServer::~MetricsServer() = default;  // the server first: it stops at once

const std::string& MetricsServer::address() const { return http_->address(); }

HttpAnswer MetricsServer::answer(const HttpAsk& ask, bool tls) const {
  if (ask.path == "/metrics") {
    if (tls && !ask.certified) {
      return {403, "a client certificate signed by the store's CA is needed for /metrics\n"};
    }
    return {200, scrape(), "text/plain; version=0.0.4; charset=utf-8"};
  }
  if (ask.path == "/healthz") return {200, "ok\n"};
  if (ask.path == "/readyz") {
    auto why = not_ready();
    if (why.empty()) return {200, "ready\n"};
    return {503, "not ready: " + why + "\n"};
  }
  return {404, "no such path: " + ask.path + " (/metrics, /healthz, /readyz)\n"};
}

std::string MetricsServer::scrape() const {
  std::vector<MetricFamily> families;
  if (source_.calls) families = OpMetrics::instance().collect();
  auto refusals = family("meshstore_tls_refusals_total",
                         "TLS connections this process refused in their handshake (no "
                         "certificate its CA signed, or no TLS), on any of its listeners",
                         MetricType::Counter);
  add(refusals, static_cast<double>(internal::tls_refusals()));
  families.push_back(std::move(refusals));
  if (source_.more) source_.more(&families);
  if (source_.volumes) {
    auto v = source_.volumes();
    if (v.ok()) volume_families(*v, &families);
  }
  if (source_.controller) {
    auto c = source_.controller();
    if (c.ok()) controller_families(*c, &families);
  }
  if (source_.client) client_families(source_.client(), &families);
  return prometheus::TextSerializer().Serialize(families);
}

std::string MetricsServer::not_ready() const {
  if (source_.not_ready) {
    if (auto why = source_.not_ready(); !why.empty()) return why;
  }
  // A process with no store (a host agent) is ready while it runs.
  if (!source_.volumes) return {};
  auto v = source_.volumes();
  if (!v.ok()) return "the store does not answer: " + v.status().to_string();
  for (const auto& s : *v) {
    if (!s.unreachable.empty())
      return "volume '" + s.volume_id + "' is not serving: " + s.unreachable;
  }
  if (v->empty() && !source_.ready_without_volumes) return "no volume is serving";
  return {};
}

}  // namespace meshstore::store
