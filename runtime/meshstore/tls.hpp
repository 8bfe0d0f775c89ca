#pragma once

#include <string>
#include <utility>
#include <vector>

#include "meshstore/status.hpp"

namespace meshstore {

/// Mutual TLS for every actor connection between processes (docs/security.md).
///
/// When set, every control-plane connection a store, a mesh, a ProcMesh or
/// a host agent opens or accepts is TLS, and both ends present a
/// certificate that `ca_file` signed: a peer without one is refused, and
/// the error names the reason on both sides (Errc::unauthenticated on the
/// side that connects, a warning from the "tls" logger on the side that
/// accepts). The secrets of the data plane (the tcp transport's per-server
/// secret, shared-memory names) then travel only over authenticated
/// connections.
///
/// CAF 0.17 checks no host name: any certificate `ca_file` signed is
/// accepted from any address. Give each job (or each trust domain) a CA of
/// its own.
struct TlsOptions {
  /// This process's certificate (PEM; a chain, leaf first).
  std::string certificate;
  /// Its private key (PEM, unencrypted).
  std::string key;
  /// The CA certificates (PEM) that sign every peer's certificate.
  std::string ca_file;

  /// True when any of the three is set (all three must then be).
  bool enabled() const noexcept { return !certificate.empty() || !key.empty() || !ca_file.empty(); }

  /// MESHSTORE_TLS_CERT, MESHSTORE_TLS_KEY and MESHSTORE_TLS_CA: what
  /// meshrun, ProcMesh and `meshstore serve --tls-*` hand their ranks and
  /// workers. Empty fields where unset.
  static TlsOptions from_env();

  /// The environment assignments from_env() reads back (none when not
  /// enabled), for starting processes that must join with the same
  /// credentials.
  std::vector<std::pair<std::string, std::string>> env() const;
};

/// Checks TLS options before any connection uses them: all three files
/// set and readable, the certificate and key are PEM, the key belongs to
/// the certificate, and ca_file signed the certificate and it is valid
/// now. OK when not enabled. Errc::invalid_argument naming the file and
/// what is wrong.
Status check_tls(const TlsOptions& tls);

}  // namespace meshstore
