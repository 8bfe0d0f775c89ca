// meshstore top: a terminal view of a running store, refreshed every
// second: its volumes (from the store), the calls per second with their
// p50 and p99 (from the /metrics of the processes named), and the keys
// holding the most bytes (docs/operations.md, "meshstore top").

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "meshstore/internal/address.hpp"
#include "meshstore/store/metrics_server.hpp"

namespace meshstore::cli {
namespace {

using namespace std::chrono_literals;

// One call's histogram: cumulative counts by upper bound (+Inf last).
using Buckets = std::map<double, double>;
// By op, as one scrape of one or more processes gave them (summed).
using Histograms = std::map<std::string, Buckets>;

// The call histograms in a scrape, added into `out`.
void add_histograms(const std::string& text, Histograms* out) {
  static const std::regex line(
      R"re(^meshstore_operation_duration_seconds_bucket\{op="([a-z_]+)",le="([^"]+)"\} (\S+))re");
  std::istringstream in(text);
  std::string l;
  std::smatch m;
  while (std::getline(in, l)) {
    if (!std::regex_search(l, m, line)) continue;
    const double le = m[2] == "+Inf" ? INFINITY : std::stod(m[2]);
    (*out)[m[1]][le] += std::stod(m[3]);
  }
}

// The q-quantile of the calls between two histograms, interpolated inside
// its bucket as Prometheus' histogram_quantile does; NaN without calls.
double quantile(const Buckets& before, const Buckets& now, double q) {
  const double total = now.rbegin()->second - (before.empty() ? 0 : before.rbegin()->second);
  if (total <= 0) return NAN;
  double lower = 0, below = 0;
  for (const auto& [le, cum] : now) {
    const auto b = before.find(le);
    const double count = cum - (b == before.end() ? 0 : b->second);
    if (count >= q * total) {
      if (std::isinf(le)) return lower;  // past the last bound: report it
      return lower + (le - lower) * (q * total - below) / std::max(count - below, 1e-9);
    }
    lower = le;
    below = count;
  }
  return lower;
}

std::string seconds_text(double s) {
  char buf[32];
  if (std::isnan(s)) return "-";
  if (s < 1e-3) {
    std::snprintf(buf, sizeof buf, "%.0f us", s * 1e6);
  } else if (s < 1) {
    std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  }
  return buf;
}

struct Top {
  Args args;
  std::vector<std::string> metrics;  // the processes whose calls are shown
  TlsOptions tls;                    // the store's: its /metrics are HTTPS then
  int keys = 5;
  std::chrono::milliseconds interval{1000};
};

// The processes' histograms now; one line a process that did not answer.
Histograms scrape_all(const Top& t, std::vector<std::string>* notes) {
  Histograms h;
  for (const auto& at : t.metrics) {
    const auto got = store::http_get(at, "/metrics", 10000, t.tls);
    if (got.status == 200) {
      add_histograms(got.body, &h);
    } else {
      notes->push_back("metrics " + at + ": " +
                       (got.status ? "answered " + std::to_string(got.status) : got.error));
    }
  }
  return h;
}

void print_volumes(Store& store) {
  auto stats = store.admin().stats().get(10s);
  if (!stats.ok()) {
    std::printf("volumes: %s\n", stats.status().to_string().c_str());
    return;
  }
  std::printf("%-28s %-11s %12s %12s %9s %7s\n", "VOLUME", "STATE", "HELD", "CAPACITY", "OBJECTS",
              "LEASES");
  for (const auto& s : *stats) {
    std::printf(
        "%-28s %-11s %12s %12s %9llu %7llu\n", s.volume_id.c_str(),
        s.unreachable.empty() ? "serving" : "unreachable", human_bytes(s.bytes_held).c_str(),
        s.capacity_bytes ? human_bytes(s.capacity_bytes).c_str() : "unlimited",
        static_cast<unsigned long long>(s.objects), static_cast<unsigned long long>(s.leases));
  }
}

void print_calls(const Histograms& before, const Histograms& now, double seconds) {
  std::printf("\n%-22s %10s %10s %10s\n", "CALL", "PER SEC", "P50", "P99");
  for (const auto& [op, buckets] : now) {
    const auto b = before.find(op);
    const Buckets none;
    const auto& was = b == before.end() ? none : b->second;
    const double calls = buckets.rbegin()->second - (was.empty() ? 0 : was.rbegin()->second);
    if (calls <= 0) continue;
    std::printf("%-22s %10.1f %10s %10s\n", op.c_str(), calls / seconds,
                seconds_text(quantile(was, buckets, 0.5)).c_str(),
                seconds_text(quantile(was, buckets, 0.99)).c_str());
  }
}

void print_keys(Store& store, int n) {
  auto listed = store.list("").get(10s);
  if (!listed.ok()) {
    std::printf("\nkeys: %s\n", listed.status().to_string().c_str());
    return;
  }
  auto& keys = *listed;
  std::sort(keys.begin(), keys.end(), [](const KeyInfo& a, const KeyInfo& b) {
    return a.nbytes != b.nbytes ? a.nbytes > b.nbytes : a.key < b.key;
  });
  std::printf("\n%zu keys; the %d holding the most bytes:\n", keys.size(),
              std::min<int>(n, static_cast<int>(keys.size())));
  for (int i = 0; i < n && i < static_cast<int>(keys.size()); ++i) {
    std::printf("  %-40s %12s\n", keys[static_cast<std::size_t>(i)].key.c_str(),
                human_bytes(keys[static_cast<std::size_t>(i)].nbytes).c_str());
  }
}

// One frame: what happened between `before` and now (`seconds` apart).
Histograms frame(const Top& t, Store& store, const Histograms& before, double seconds, bool clear) {
  std::vector<std::string> notes;
  auto now = scrape_all(t, &notes);
  if (clear) std::printf("\x1b[H\x1b[2J");
  const std::time_t wall = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof when, "%H:%M:%S", std::localtime(&wall));
  std::printf("meshstore top: store %s at %s\n\n", t.args.get("store", default_store()).c_str(),
              when);
  print_volumes(store);
  if (t.metrics.empty()) {
    std::printf("\ncalls: give --metrics HOST:PORT[,HOST:PORT...] (StoreOptions::metrics)\n");
  } else {
    print_calls(before, now, seconds);
  }
  for (const auto& n : notes) std::printf("%s\n", n.c_str());
  print_keys(store, t.keys);
  std::fflush(stdout);
  return now;
}

}  // namespace

int cmd_top(int argc, char** argv) {
  bool once = false;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (i >= 2 && std::string(argv[i]) == "--once") {
      once = true;
    } else {
      rest.push_back(argv[i]);
    }
  }
  Top t;
  int rc = 0;
  if (!parse_args("top", static_cast<int>(rest.size()), rest.data(),
                  with_tls({"store", "metrics", "keys", "interval-ms", "log-level"}), t.args, rc)) {
    return rc;
  }
  long long keys = 0, interval = 0;
  if (!parse_number(t.args.get("keys", "5"), 0, 1000, keys)) {
    return usage_error("top", "--keys wants a number in [0, 1000]");
  }
  if (!parse_number(t.args.get("interval-ms", "1000"), 100, 3600000, interval)) {
    return usage_error("top", "--interval-ms wants milliseconds in [100, 3600000]");
  }
  t.keys = static_cast<int>(keys);
  t.interval = std::chrono::milliseconds(interval);
  t.tls = tls_from(t.args);
  std::stringstream list(t.args.get("metrics", ""));
  for (std::string at; std::getline(list, at, ',');) {
    if (at.empty()) continue;
    if (auto a = internal::parse_address(at); !a.ok()) {
      return usage_error("top", "--metrics: " + a.status().message());
    }
    t.metrics.push_back(at);
  }
  auto store = dial(t.args);
  if (!store.ok()) {
    std::fprintf(stderr, "meshstore top: %s\n", store.status().to_string().c_str());
    return 1;
  }
  std::vector<std::string> ignored;
  auto before = scrape_all(t, &ignored);
  const double seconds = std::chrono::duration<double>(t.interval).count();
  const bool clear = !once && isatty(STDOUT_FILENO);
  do {
    std::this_thread::sleep_for(t.interval);  // the window the rates cover
    before = frame(t, *store, before, seconds, clear);
  } while (!once);
  return 0;
}

}  // namespace meshstore::cli
