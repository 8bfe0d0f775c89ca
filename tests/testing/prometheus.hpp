#pragma once

// Debian's real Prometheus server, started by a test with a scrape
// configuration of its own on loopback, and asked through its HTTP API
// (docs/operations.md's tests).

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "meshstore/store/http.hpp"
#include "testing/sockets.hpp"
#include "testing/subprocess.hpp"
#include "testing/temp_dir.hpp"

namespace meshstore::testing {

class Prometheus {
 public:
  static constexpr const char* kPath = "/usr/bin/prometheus";

  /// Starts it with `scrape_configs` (YAML, indented under the key) and
  /// every interval one second. `ok()` is false when no port was free.
  explicit Prometheus(const std::string& scrape_configs) {
    std::ofstream(dir_.file("prometheus.yml"))
        << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        << "scrape_configs:\n"
        << scrape_configs;
    const auto port = free_port();
    if (port == 0) return;
    web_ = "127.0.0.1:" + std::to_string(port);
    child_ = std::make_unique<Child>(
        std::vector<std::string>{kPath, "--config.file=" + dir_.file("prometheus.yml"),
                                 "--storage.tsdb.path=" + dir_.file("data"),
                                 "--web.listen-address=" + web_, "--log.level=warn"});
  }

  bool ok() const { return child_ != nullptr; }
  const TempDir& dir() const { return dir_; }
  std::string output() const { return child_ ? child_->output() : std::string(); }

  /// One instant query's single value (`q` URL-encoded), or -1 while
  /// Prometheus has none.
  double query(const std::string& q) const {
    auto r = store::http_get(web_, "/api/v1/query?query=" + q);
    if (r.status != 200) return -1.0;
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (j.is_discarded() || j["data"]["result"].empty()) return -1.0;
    return std::stod(j["data"]["result"][0]["value"][1].get<std::string>());
  }

 private:
  TempDir dir_;
  std::string web_;
  std::unique_ptr<Child> child_;
};

}  // namespace meshstore::testing
