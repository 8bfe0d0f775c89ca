// The operators' endpoints of a store with TLS (docs/operations.md, "Over
// TLS"): HTTPS with the store's certificates; /metrics for a client the
// store's CA signed, the health checks for any TLS client.

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "meshstore/store.hpp"
#include "meshstore/store/http.hpp"
#include "testing/prometheus.hpp"
#include "testing/test_util.hpp"
#include "testing/tls_fixture.hpp"

namespace meshstore {
namespace {

using store::http_get;

// The job's certificates (testing/tls_certs.hpp), made once.
class MetricsTls : public testing::TlsCertsTest {
 protected:
  // No certificate, only the CA that checks the server: a health probe.
  static TlsOptions probe() { return TlsOptions{"", "", certs_->file("job/ca.pem")}; }
  // Trusts the job's CA, so only the store's check of its certificate
  // refuses it.
  static TlsOptions rogue() { return certs_->rogue(true); }
  static Store tls_store() {
    StoreOptions o;
    o.security.tls = job("server");
    o.metrics = "127.0.0.1:0";
    return Store::embedded(o).value();
  }
};

TEST_F(MetricsTls, OnlyAClientTheStoresCaSignedReadsTheMetrics) {
  auto store = tls_store();
  float x = 1;
  ASSERT_OK(store.put("k", TensorView::of(&x, {})).get(testing::kWait));
  const auto at = store.admin().metrics_address();

  const auto scrape = http_get(at, "/metrics", 10000, job("client"));
  ASSERT_EQ(scrape.status, 200) << scrape.error;
  EXPECT_NE(scrape.body.find("\nmeshstore_keys{volume="), std::string::npos) << scrape.body;

  // A client without a certificate (a load balancer's probe) gets the
  // health checks, not the metrics.
  const auto health = http_get(at, "/healthz", 10000, probe());
  EXPECT_EQ(health.status, 200) << health.error;
  EXPECT_EQ(health.body, "ok\n");
  EXPECT_EQ(http_get(at, "/readyz", 10000, probe()).body, "ready\n");
  const auto refused = http_get(at, "/metrics", 10000, probe());
  EXPECT_EQ(refused.status, 403) << refused.error;
  EXPECT_NE(refused.body.find("client certificate signed by the store's CA"), std::string::npos)
      << refused.body;
}

// The value of the unlabelled sample `name` in a scrape; -1 when absent.
double sample(const std::string& scrape, const std::string& name) {
  const auto at = scrape.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(scrape.substr(at + name.size() + 2));
}

TEST_F(MetricsTls, PlainHttpAndAnotherCasCertificateAreRefusedAndCounted) {
  auto store = tls_store();
  const auto at = store.admin().metrics_address();
  const auto before =
      sample(http_get(at, "/metrics", 10000, job("client")).body, "meshstore_tls_refusals_total");
  ASSERT_GE(before, 0);
  const auto plain = http_get(at, "/healthz", 5000);
  EXPECT_EQ(plain.status, 0) << plain.body;
  EXPECT_FALSE(plain.error.empty());
  const auto other = http_get(at, "/metrics", 5000, rogue());
  EXPECT_EQ(other.status, 0) << other.body;
  EXPECT_FALSE(other.error.empty());
  // The server kept serving, and counted both.
  const auto after = http_get(at, "/metrics", 10000, job("client"));
  EXPECT_EQ(after.status, 200);
  EXPECT_EQ(sample(after.body, "meshstore_tls_refusals_total"), before + 2) << after.body;
}

// A client that does not trust the store's CA refuses the server.
TEST_F(MetricsTls, AClientChecksTheServersCertificate) {
  auto store = tls_store();
  const auto untrusting = http_get(store.admin().metrics_address(), "/healthz", 5000,
                                   TlsOptions{"", "", certs_->file("other/ca.pem")});
  EXPECT_EQ(untrusting.status, 0);
  EXPECT_NE(untrusting.error.find("certificate"), std::string::npos) << untrusting.error;
}

// Debian's real Prometheus scrapes a TLS store with a certificate the
// store's CA signed, checking the store's by its name (make_certs.sh writes
// it as a subjectAltName).
TEST_F(MetricsTls, ARealPrometheusScrapesOverTlsWithACertificate) {
  if (access(testing::Prometheus::kPath, X_OK) != 0)
    GTEST_SKIP() << testing::Prometheus::kPath << " absent (Debian's prometheus)";
  auto store = tls_store();
  float x = 1;
  ASSERT_OK(store.put("a", TensorView::of(&x, {})).get(testing::kWait));
  ASSERT_OK(store.put("b", TensorView::of(&x, {})).get(testing::kWait));
  const auto client = job("client");
  testing::Prometheus prometheus(
      "  - job_name: meshstore\n    scheme: https\n    tls_config:\n"
      "      ca_file: " +
      client.ca_file + "\n      cert_file: " + client.certificate +
      "\n      key_file: " + client.key + "\n      server_name: server\n" +
      "    static_configs:\n      - targets: ['" + store.admin().metrics_address() + "']\n");
  ASSERT_TRUE(prometheus.ok());
  double keys = -1;
  ASSERT_TRUE(testing::eventually(
      [&] {
        keys = prometheus.query("meshstore_keys");
        return keys == 2;
      },
      std::chrono::seconds(60)))
      << "keys " << keys << "\n"
      << prometheus.output();
}

TEST_F(MetricsTls, MissingCertificateFilesAreRefusedByName) {
  StoreOptions o;
  o.security.tls = job("server");
  o.security.tls.key = certs_->file("job/none.key");
  o.metrics = "127.0.0.1:0";
  auto bad = Store::embedded(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Errc::invalid_argument);
  EXPECT_NE(bad.status().message().find("none.key"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace meshstore
