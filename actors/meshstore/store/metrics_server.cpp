// MetricsServer: /metrics, /healthz and /readyz on civetweb.

#include "meshstore/store/metrics_server.hpp"

#include <civetweb.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <cstring>
#include <mutex>
#include <utility>

#include "meshstore/internal/address.hpp"
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
    add(up, v.unreachable.empty() ? 1.0 : 0.0, l);
  }
  for (auto* f : {&keys, &held, &capacity, &staged, &leases, &up}) out->push_back(std::move(*f));
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
  // One sample each, no labels.
  const struct {
    const char* name;
    const char* help;
    MetricType type;
    std::uint64_t value;
  } singles[] = {
      {"meshstore_client_direct_reads_total",
       "Gets copied straight from a same-host volume's shared memory", MetricType::Counter,
       s.direct_reads},
      {"meshstore_client_stale_locations_total",
       "Gets whose known location was superseded and located afresh", MetricType::Counter, s.stale},
      {"meshstore_client_channel_puts_total", "Puts committed over a channel to a volume",
       MetricType::Counter, s.puts},
      {"meshstore_client_resent_commits_total",
       "Commits sent again over a new connection after theirs failed", MetricType::Counter,
       s.resent_commits},
      {"meshstore_client_channels",
       "Channels open to volumes (a ring, a tcp connection, actor messages)", MetricType::Gauge,
       s.rings},
  };
  for (const auto& one : singles) {
    auto f = family(one.name, one.help, one.type);
    add(f, static_cast<double>(one.value));
    out->push_back(std::move(f));
  }
}

// A complete response with a plain-text body.
void answer(mg_connection* conn, int code, const char* reason, const char* type,
            const std::string& body) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-cache\r\nConnection: close\r\n\r\n",
            code, reason, type, body.size());
  mg_write(conn, body.data(), body.size());
}

void init_civetweb_once() {
  static std::once_flag once;
  std::call_once(once, [] { mg_init_library(0); });
}

}  // namespace

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const std::string& address,
                                                            MetricsSource source) {
  auto at = internal::parse_address(address);
  if (!at.ok()) return at.status().with_context("metrics address");
  init_civetweb_once();
  std::unique_ptr<MetricsServer> server(new MetricsServer(std::move(source)));
  // An IPv6 literal in brackets, as civetweb and "HOST:PORT" write it.
  const std::string host =
      at->host.find(':') != std::string::npos ? "[" + at->host + "]" : at->host;
  const std::string ports = host + ":" + std::to_string(at->port);
  // Two threads serve: a scrape, and a health check beside it.
  const char* options[] = {
      "listening_ports", ports.c_str(),       "num_threads", "2",    "request_timeout_ms",
      "10000",           "enable_keep_alive", "no",          nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof callbacks);
  mg_init_data init{&callbacks, server.get(), options};
  char why[256] = {0};
  unsigned code = 0;
  mg_error_data error{&code, why, sizeof why};
  server->ctx_ = mg_start2(&init, &error);
  if (!server->ctx_) {
    return Status(Errc::unavailable, "cannot serve metrics on " + address + ": " +
                                         (why[0] ? std::string(why) : "civetweb did not start"));
  }
  mg_set_request_handler(server->ctx_, "/metrics$", &MetricsServer::on_metrics, server.get());
  mg_set_request_handler(server->ctx_, "/healthz$", &MetricsServer::on_healthz, server.get());
  mg_set_request_handler(server->ctx_, "/readyz$", &MetricsServer::on_readyz, server.get());
  mg_server_port bound[4];
  const int n = mg_get_server_ports(server->ctx_, 4, bound);
  const int port = n > 0 ? bound[0].port : at->port;
  server->address_ = host + ":" + std::to_string(port);
  log::get("store")->info("serving /metrics, /healthz and /readyz on {}", server->address_);
  return server;
}

MetricsServer::~MetricsServer() {
  if (ctx_) mg_stop(ctx_);  // waits for the requests in flight
}

std::string MetricsServer::scrape() const {
  auto families = OpMetrics::instance().collect();
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
  if (!source_.volumes) return "no store";
  auto v = source_.volumes();
  if (!v.ok()) return "the store does not answer: " + v.status().to_string();
  for (const auto& s : *v) {
    if (!s.unreachable.empty())
      return "volume '" + s.volume_id + "' is not serving: " + s.unreachable;
  }
  if (v->empty() && !source_.ready_without_volumes) return "no volume is serving";
  return {};
}

HttpReply http_get(const std::string& address, const std::string& path, int timeout_ms) {
  HttpReply out;
  auto at = internal::parse_address(address);
  if (!at.ok()) {
    out.error = at.status().message();
    return out;
  }
  init_civetweb_once();
  char why[256] = {0};
  mg_connection* conn = mg_connect_client(at->host.c_str(), at->port, 0, why, sizeof why);
  if (!conn) {
    out.error = std::string("cannot connect: ") + why;
    return out;
  }
  mg_printf(conn, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path.c_str(), address.c_str());
  if (mg_get_response(conn, why, sizeof why, timeout_ms) < 0) {
    out.error = std::string("no answer: ") + why;
  } else {
    out.status = mg_get_response_info(conn)->status_code;
    char buf[16384];
    int n = 0;
    while ((n = mg_read(conn, buf, sizeof buf)) > 0)
      out.body.append(buf, static_cast<std::size_t>(n));
  }
  mg_close_connection(conn);
  return out;
}

int MetricsServer::on_metrics(mg_connection* conn, void* self) {
  answer(conn, 200, "OK", "text/plain; version=0.0.4; charset=utf-8",
         static_cast<MetricsServer*>(self)->scrape());
  return 200;
}

int MetricsServer::on_healthz(mg_connection* conn, void*) {
  answer(conn, 200, "OK", "text/plain; charset=utf-8", "ok\n");
  return 200;
}

int MetricsServer::on_readyz(mg_connection* conn, void* self) {
  auto why = static_cast<MetricsServer*>(self)->not_ready();
  if (why.empty()) {
    answer(conn, 200, "OK", "text/plain; charset=utf-8", "ready\n");
    return 200;
  }
  answer(conn, 503, "Service Unavailable", "text/plain; charset=utf-8", "not ready: " + why + "\n");
  return 503;
}

}  // namespace meshstore::store
