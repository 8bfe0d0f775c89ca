#pragma once

// Why a TLS handshake failed, on both sides of it. CAF 0.17's OpenSSL
// module reports every failure as "disconnect_during_handshake" and logs
// nothing; OpenSSL knows the reason (no certificate, an unknown CA, a peer
// that does not speak TLS). meshstore wraps the three OpenSSL calls CAF
// makes on a connection (SSL_connect, SSL_accept, SSL_read) and, when one
// fails for good, reads the reason without taking it off OpenSSL's error
// queue: the side that accepts logs it (logger "tls", warn), and the side
// that connects keeps it for the error its connect returns. Internal.

#include <cstdint>
#include <string>

struct ssl_st;

namespace meshstore::internal {

/// Counts actor systems with TLS on: failures are watched only while one
/// lives, so other TLS users in the process see nothing but a pass-through.
void tls_watch_begin();
void tls_watch_end();

/// TLS connections this process refused in their handshake (a peer with
/// no certificate or one its CA did not sign, or one not speaking TLS),
/// on any listener: the actor links' and the metrics endpoint's.
std::uint64_t tls_refusals();
/// Counts one such refusal (the listeners that report their own).
void count_tls_refusal();

/// Why a TLS handshake on `ssl` failed, given OpenSSL's reason string for
/// it (null: none), in the words the listeners log: no TLS, no
/// certificate, one the CA did not sign (naming its subject), a refusal of
/// ours. For a listener that reports its own refusals (store/http.cpp).
std::string describe_handshake_failure(ssl_st* ssl, const char* reason);

/// A point in the sequence of recorded failures, taken before a connect.
std::uint64_t tls_failure_mark();

/// The reason recorded for a failed TLS handshake with a peer on `port`
/// since `mark`; empty when none was.
std::string tls_failure_since(std::uint64_t mark, std::uint16_t port);

/// Why a connect to `address` failed in its handshake: `reason`, what
/// OpenSSL recorded (tls_failure_since), else what the disconnect most
/// likely means given whether this side uses TLS. One sentence, for the
/// connect's error.
std::string handshake_failure(const std::string& what, const std::string& address, bool tls,
                              std::string reason);

}  // namespace meshstore::internal
