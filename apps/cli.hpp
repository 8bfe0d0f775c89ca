#pragma once

// What the meshstore tool's subcommands share: their flags, a store
// connection, byte counts for people, a progress bar; and the checkpoint
// subcommands (cli_checkpoints.cpp).

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "meshstore/safetensors.hpp"
#include "meshstore/store.hpp"

namespace meshstore::cli {

/// Flags of one subcommand: --name value pairs and positional arguments.
struct Args {
  std::map<std::string, std::string> flags;
  std::vector<std::string> positional;
  std::string get(const std::string& name, const std::string& fallback) const {
    auto it = flags.find(name);
    return it == flags.end() ? fallback : it->second;
  }
};

/// Prints "meshstore CMD: WHY (see meshstore --help)"; the exit status 2.
int usage_error(const std::string& cmd, const std::string& why);
/// Parses argv[2...] allowing only `allowed` flags (each takes a value);
/// false with `rc` set (a usage error printed) otherwise.
bool parse_args(const std::string& cmd, int argc, char** argv,
                const std::vector<std::string>& allowed, Args& out, int& rc);
/// An integer in [lo, hi], the whole of `text`.
bool parse_number(const std::string& text, long long lo, long long hi, long long& out);
/// `flags` and the TLS flags (docs/security.md): --tls-cert, --tls-key,
/// --tls-ca, each falling back to MESHSTORE_TLS_CERT, _KEY, _CA.
std::vector<std::string> with_tls(std::vector<std::string> flags);
TlsOptions tls_from(const Args& args);
/// MESHSTORE_ADDR, else 127.0.0.1 on the default port.
std::string default_store();
/// A store connection for the tools: hosts no volume, fails fast (requests
/// moving data, as load and save make, get `request_timeout`).
Result<Store> dial(const Args& args,
                   std::chrono::milliseconds request_timeout = std::chrono::seconds(10));
/// "1.5 GiB".
std::string human_bytes(std::uint64_t n);
/// A progress bar on stderr when it is a terminal, else a line at every
/// quarter: "load: 50% (1.2 GiB of 2.4 GiB)".
safetensors::Progress progress_bar(const std::string& what);

/// meshstore top (cli_top.cpp).
int cmd_top(int argc, char** argv);
/// meshstore inspect, load and save.
int cmd_inspect(int argc, char** argv);
int cmd_load(int argc, char** argv);
int cmd_save(int argc, char** argv);

}  // namespace meshstore::cli
