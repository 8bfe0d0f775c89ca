// security_matrix: who each listener of a store lets in, and who it refuses
// with what reason on both sides (docs/security.md). Every row is run for
// real on loopback: the store's TLS control port against peers with the
// job's certificate, none, another CA's, or TLS against a plain store; and
// a volume's tcp data port against a wrong secret, a client in the clear
// to a volume that encrypts, the reverse, a wrong key, and the right one.
// Each row records what the connecting side got and what the accepting
// side logged, and passes when both are what the row expects.
//
//   security_matrix [--table FILE] [--doc FILE]
//     prints the table; writes it (Markdown) to FILE, and with --doc into
//     FILE between "<!-- security-matrix:begin -->" and
//     "<!-- security-matrix:end -->". Exits 0 and prints
//     "security_matrix: ok" when every row passes.

#include <spdlog/sinks/ostream_sink.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "meshstore/internal/memory.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/store.hpp"
#include "meshstore/store/http.hpp"
#include "meshstore/transports/registry.hpp"
#include "testing/doc_table.hpp"
#include "testing/region_ref.hpp"
#include "testing/tls_certs.hpp"

using namespace std::chrono_literals;

namespace meshstore {
namespace {

// What the accepting side logs (loggers "tls" and "tcp"), one capture at a time.
class Captured {
 public:
  Captured() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(seen_)) {
    sink_->set_pattern("%v");
    for (const char* name : {"tls", "tcp"}) {
      auto l = log::get(name);
      l->set_level(spdlog::level::info);
      l->sinks().push_back(sink_);
      loggers_.push_back(l);
    }
  }
  ~Captured() {
    for (auto& l : loggers_) l->sinks().pop_back();
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    seen_.str("");
  }
  // The first line holding `needle`, waiting for it up to 10 s (the
  // accepting side logs on its own thread); empty if none came.
  std::string line_with(const std::string& needle) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    for (;;) {
      for (auto& l : loggers_) l->flush();
      std::string text;
      {
        std::lock_guard<std::mutex> lock(mu_);
        text = seen_.str();
      }
      std::istringstream lines(text);
      for (std::string line; std::getline(lines, line);) {
        if (line.find(needle) != std::string::npos) return line;
      }
      if (needle.empty() || std::chrono::steady_clock::now() > deadline) return "";
      std::this_thread::sleep_for(20ms);
    }
  }

 private:
  std::mutex mu_;  // guards seen_ (the sink has its own lock for writes)
  std::ostringstream seen_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  std::vector<std::shared_ptr<spdlog::logger>> loggers_;
};

struct Row {
  std::string listener, peer, expected, got{}, logged{};
  bool pass = false;
};

// Checks `got` (a call's status) against the row's expectation: ok, or the
// code and a piece of the message; and the accepting side's log for
// `logged` ("" = nothing expected).
Row judge(Row row, Captured& log, const Status& got, bool want_ok, Errc code,
          const std::string& needle, const std::string& logged) {
  row.got = got.ok() ? "accepted" : got.to_string();
  bool pass =
      want_ok ? got.ok()
              : !got.ok() && got.code() == code && got.message().find(needle) != std::string::npos;
  if (!logged.empty()) {
    row.logged = log.line_with(logged);
    pass = pass && !row.logged.empty();
  } else {
    row.logged = "-";
  }
  row.pass = pass;
  return row;
}

std::string cell(std::string s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

// -- the control plane ----------------------------------------------------

using Certs = testing::TlsCerts;

// A client of the store at `address` with `tls`: its put and get, or why
// it could not connect.
Status client_round_trip(const std::string& address, TlsOptions tls) {
  StoreOptions o;
  o.security.tls = std::move(tls);
  o.limits.connect_timeout = 5s;
  o.placement.host_volumes = false;
  o.placement.local_rank = -1;
  auto store = Store::connect(address, o);
  if (!store.ok()) return store.status();
  float x = 7;
  if (auto s = store->put("security.k", TensorView::of(&x, {})).get(30s); !s.ok()) {
    return s.status();
  }
  return store->get("security.k").get(30s).status();
}

void control_plane(const Certs& certs, Captured& log, std::vector<Row>& rows) {
  StoreOptions so;
  so.listen = "127.0.0.1:0";
  so.security.tls = certs.job("server");
  auto tls_store = Store::embedded(so);
  if (!tls_store.ok()) {
    rows.push_back(
        {"store control port (TLS)", "-", "starts", tls_store.status().to_string(), "-"});
    return;
  }
  const std::string at = tls_store->admin().address();
  const std::string listener = "store control port, TLS";
  log.clear();
  rows.push_back(judge({listener, "a certificate the job's CA signed", "accepted: put and get"},
                       log, client_round_trip(at, certs.job("client")), true, Errc::ok, "", ""));
  log.clear();
  rows.push_back(judge({listener, "no TLS", "refused; told TLS is required"}, log,
                       client_round_trip(at, {}), false, Errc::unavailable, "requires TLS",
                       "does not speak TLS"));
  log.clear();
  rows.push_back(judge({listener, "a certificate another CA signed", "refused; both sides say why"},
                       log, client_round_trip(at, certs.rogue(true)), false, Errc::unauthenticated,
                       "refused our certificate", "does not verify under our CA file"));
  log.clear();
  rows.push_back(
      judge({listener, "TLS that does not trust the store's CA", "refused; both sides say why"},
            log, client_round_trip(at, certs.rogue(false)), false, Errc::unauthenticated,
            "does not verify under our CA file", "refused our certificate"));
  tls_store->close();

  StoreOptions po;
  po.listen = "127.0.0.1:0";
  auto plain_store = Store::embedded(po);
  if (!plain_store.ok()) return;
  log.clear();
  rows.push_back(judge({"store control port, no TLS", "TLS", "refused; told the store has none"},
                       log, client_round_trip(plain_store->admin().address(), certs.job("client")),
                       false, Errc::unauthenticated, "does not speak TLS", ""));
  plain_store->close();
}

// -- the metrics endpoint (HTTPS with the store's certificates) --------------

// A GET's answer as a status: ok for 200, else what came back or why
// nothing did.
Status http_status(const store::HttpReply& r) {
  if (r.status == 200) return Status();
  if (r.status == 403) {
    return Status(Errc::unauthenticated, "403 " + r.body.substr(0, r.body.find('\n')));
  }
  if (r.status != 0) return Status(Errc::protocol_error, "HTTP " + std::to_string(r.status));
  return Status(Errc::unavailable, r.error);
}

void metrics_endpoint(const Certs& certs, Captured& log, std::vector<Row>& rows) {
  StoreOptions so;
  so.security.tls = certs.job("server");
  so.metrics = "127.0.0.1:0";
  auto store = Store::embedded(so);
  if (!store.ok()) {
    rows.push_back({"metrics endpoint, TLS", "-", "starts", store.status().to_string(), "-"});
    return;
  }
  const std::string at = store->admin().metrics_address();
  const std::string listener = "metrics endpoint, TLS";
  const TlsOptions probe{"", "", certs.file("job/ca.pem")};
  auto get = [&](const std::string& path, const TlsOptions& tls) {
    return http_status(store::http_get(at, path, 10000, tls));
  };
  log.clear();
  rows.push_back(judge({listener, "a certificate the job's CA signed", "accepted: /metrics"}, log,
                       get("/metrics", certs.job("client")), true, Errc::ok, "", ""));
  log.clear();
  rows.push_back(judge({listener, "TLS, no certificate (a probe)", "accepted: /healthz"}, log,
                       get("/healthz", probe), true, Errc::ok, "", ""));
  log.clear();
  rows.push_back(judge({listener, "TLS, no certificate (a probe)", "/metrics refused: 403"}, log,
                       get("/metrics", probe), false, Errc::unauthenticated,
                       "client certificate signed by the store's CA", ""));
  log.clear();
  rows.push_back(judge({listener, "no TLS", "refused in the handshake; logged"}, log,
                       get("/healthz", {}), false, Errc::unavailable, "",
                       "refused an HTTPS connection"));
  log.clear();
  rows.push_back(judge({listener, "a certificate another CA signed", "refused; logged"}, log,
                       get("/metrics", certs.rogue(true)), false, Errc::unavailable, "",
                       "refused an HTTPS connection"));
  store->close();
}

// -- the data plane (a volume's tcp server) ---------------------------------

struct TcpVolume {
  std::shared_ptr<transports::RegionTable> regions = std::make_shared<transports::RegionTable>();
  std::shared_ptr<transports::Region> region;
  std::unique_ptr<transports::TransportServer> server;
  transports::TransportConfig config;
  wire::RegionRef ref;
  explicit TcpVolume(bool encrypt) {
    config.request_timeout = 10s;
    config.tcp_encrypt = encrypt;
    region = std::make_shared<transports::Region>(1, internal::allocate_aligned(4096), 4096);
    std::memset(region->data(), 0x5a, 4096);
    regions->add(region);
    server = transports::builtin_registry()
                 .find("tcp")
                 .value()
                 .make_server(transports::ServerContext{nullptr, regions, config, "v", "127.0.0.1"})
                 .value();
    ref = testing::region_ref(1, 4096);
    (void)server->describe(*region, ref);
  }
  // A read of the region by a client told `ep` (the volume's endpoint,
  // edited by the row).
  Status read(const transports::EndpointInfo& ep) {
    auto client = transports::builtin_registry().find("tcp").value().make_client(
        transports::ClientContext{nullptr, config}, ep);
    if (!client.ok()) return client.status();
    std::vector<std::byte> buf(4096);
    auto s = (*client)->read(ref, 0, buf.data(), buf.size()).get(30s);
    if (!s.ok()) return s.status();
    if (std::memcmp(buf.data(), region->data(), buf.size()) != 0) {
      return Status(Errc::internal, "the bytes read differ from the region's");
    }
    return Status();
  }
};

void data_plane(Captured& log, std::vector<Row>& rows) {
  {
    TcpVolume plain(false);
    auto ep = plain.server->endpoint();
    ep.secret[0] = ep.secret[0] == 'a' ? 'b' : 'a';
    log.clear();
    rows.push_back(judge({"volume tcp port", "the wrong secret", "refused at the hello"}, log,
                         plain.read(ep), false, Errc::unavailable, "handshake was refused",
                         "failed the handshake"));
    ep = plain.server->endpoint();
    ep.key = std::string(32, 'k');
    log.clear();
    rows.push_back(judge(
        {"volume tcp port, in the clear", "a client that encrypts", "refused; both sides say why"},
        log, plain.read(ep), false, Errc::unauthenticated,
        "this client encrypts and the volume does not", "refused an encrypted connection"));
  }
  TcpVolume sealed(true);
  const std::string listener = "volume tcp port, encrypt_tcp";
  auto ep = sealed.server->endpoint();
  log.clear();
  rows.push_back(judge({listener, "the secret and the key", "accepted: sealed read"}, log,
                       sealed.read(ep), true, Errc::ok, "", ""));
  ep.key.clear();
  log.clear();
  rows.push_back(judge({listener, "the secret, in the clear", "refused; both sides say why"}, log,
                       sealed.read(ep), false, Errc::unauthenticated,
                       "the volume encrypts its connections and this client does not",
                       "refused a connection in the clear"));
  ep = sealed.server->endpoint();
  ep.key[0] = static_cast<char>(ep.key[0] ^ 1);
  log.clear();
  rows.push_back(judge({listener, "the secret and a wrong key", "refused: no byte moves"}, log,
                       sealed.read(ep), false, Errc::unavailable, "", "failed authentication"));
}

}  // namespace
}  // namespace meshstore

int main(int argc, char** argv) {
  using namespace meshstore;
  std::string table, doc;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--table" && i + 1 < argc) {
      table = argv[++i];
    } else if (a == "--doc" && i + 1 < argc) {
      doc = argv[++i];
    } else {
      std::fprintf(stderr, "usage: security_matrix [--table FILE] [--doc FILE]\n");
      return 2;
    }
  }
  (void)log::set_level("warn");
  Captured log;
  std::vector<Row> rows;
  {
    Certs certs;
    if (!certs.made()) {
      std::fprintf(stderr, "security_matrix: cannot make certificates with %s\n",
                   MESHSTORE_MAKE_CERTS);
      return 1;
    }
    control_plane(certs, log, rows);
    metrics_endpoint(certs, log, rows);
  }
  data_plane(log, rows);
  std::ostringstream md;
  md << "| listener | peer | expected | the peer got | the listener logged | outcome |\n"
     << "| --- | --- | --- | --- | --- | --- |\n";
  bool all = true;
  for (const auto& r : rows) {
    md << "| " << cell(r.listener) << " | " << cell(r.peer) << " | " << cell(r.expected) << " | "
       << cell(r.got) << " | " << cell(r.logged) << " | " << (r.pass ? "pass" : "FAIL") << " |\n";
    all = all && r.pass;
  }
  std::printf("%s", md.str().c_str());
  if (!table.empty()) std::ofstream(table) << md.str();
  if (!doc.empty() && !testing::replace_doc_table(doc, "security-matrix", md.str())) return 1;
  if (!all) return 1;
  std::printf("security_matrix: ok\n");
  return 0;
}
