// What the meshstore tool's subcommands share.

#include "cli.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>

namespace meshstore::cli {

using namespace std::chrono_literals;

int usage_error(const std::string& cmd, const std::string& why) {
  std::fprintf(stderr, "meshstore %s: %s (see meshstore --help)\n", cmd.c_str(), why.c_str());
  return 2;
}

// Parses argv[2...] allowing only `allowed` flags (each takes a value).
bool parse_args(const std::string& cmd, int argc, char** argv,
                const std::vector<std::string>& allowed, Args& out, int& rc) {
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) == 0) {
      std::string value;
      const auto eq = a.find('=');
      if (eq != std::string::npos) {
        value = a.substr(eq + 1);
        a = a.substr(0, eq);
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        rc = usage_error(cmd, a + " needs a value");
        return false;
      }
      bool known = false;
      for (const auto& f : allowed) known |= (a == "--" + f);
      if (!known) {
        rc = usage_error(cmd, "unknown option '" + a + "'");
        return false;
      }
      out.flags[a.substr(2)] = value;
    } else {
      out.positional.push_back(a);
    }
  }
  return true;
}

bool parse_number(const std::string& text, long long lo, long long hi, long long& out) {
  char* end = nullptr;
  errno = 0;
  out = std::strtoll(text.c_str(), &end, 10);
  return !text.empty() && *end == '\0' && errno == 0 && out >= lo && out <= hi;
}

// The TLS credentials of a command (docs/security.md): --tls-cert,
// --tls-key, --tls-ca, each falling back to MESHSTORE_TLS_CERT, _KEY, _CA.
namespace {
const std::vector<std::string> kTlsFlags = {"tls-cert", "tls-key", "tls-ca"};
}  // namespace

std::vector<std::string> with_tls(std::vector<std::string> flags) {
  flags.insert(flags.end(), kTlsFlags.begin(), kTlsFlags.end());
  return flags;
}

meshstore::TlsOptions tls_from(const Args& args) {
  auto tls = meshstore::TlsOptions::from_env();
  tls.certificate = args.get("tls-cert", tls.certificate);
  tls.key = args.get("tls-key", tls.key);
  tls.ca_file = args.get("tls-ca", tls.ca_file);
  return tls;
}

std::string default_store() {
  if (const char* a = std::getenv("MESHSTORE_ADDR"); a && *a) return a;
  return "127.0.0.1:" + std::to_string(meshstore::kDefaultStorePort);
}

// A store connection for the tools: hosts no volume, fails fast (requests
// moving data, as load and save make, get `request_timeout`).
meshstore::Result<meshstore::Store> dial(const Args& args,
                                         std::chrono::milliseconds request_timeout) {
  meshstore::StoreOptions o;
  o.placement.local_rank = -1;
  o.placement.host_volumes = false;
  o.limits.connect_timeout = 5s;
  o.limits.request_timeout = request_timeout;
  o.limits.reconnect_timeout = 0ms;  // a tool's one command fails rather than wait
  o.security.tls = tls_from(args);
  if (auto lvl = args.get("log-level", ""); !lvl.empty()) o.log_level = lvl;
  return meshstore::Store::connect(args.get("store", default_store()), o);
}

std::string human_bytes(std::uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

// A progress bar on stderr when it is a terminal, else a line at every
// quarter: "load: 50% (1.2 GiB of 2.4 GiB)".
meshstore::safetensors::Progress progress_bar(const std::string& what) {
  const bool tty = ::isatty(2) != 0;
  auto last = std::make_shared<int>(-1);
  return [what, tty, last](std::uint64_t done, std::uint64_t total) {
    const int pct = total == 0 ? 100 : static_cast<int>(done * 100 / total);
    if (tty) {
      const int filled = pct * 30 / 100;
      std::fprintf(stderr, "\r%s [%s%s] %3d%% %s of %s", what.c_str(),
                   std::string(static_cast<std::size_t>(filled), '#').c_str(),
                   std::string(static_cast<std::size_t>(30 - filled), '.').c_str(), pct,
                   human_bytes(done).c_str(), human_bytes(total).c_str());
      if (done >= total) std::fprintf(stderr, "\n");
    } else if (pct / 25 != *last / 25 || (done >= total && *last != 100)) {
      std::fprintf(stderr, "%s: %d%% (%s of %s)\n", what.c_str(), pct, human_bytes(done).c_str(),
                   human_bytes(total).c_str());
    }
    *last = pct;
  };
}

}  // namespace meshstore::cli
