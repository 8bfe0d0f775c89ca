#pragma once

// The tcp transport: payload bytes over dedicated TCP connections between a
// client and a volume, the data plane across hosts where no RDMA NIC exists.
// The volume's server listens on the interface the store's control plane
// uses (ServerContext::bind_host) at a free port; clients learn the address
// and a per-server secret through the volume's endpoints message, open up
// to TransportConfig::tcp_streams connections and spread each large
// transfer over them in tcp_chunk_bytes pieces. Bytes are sent straight
// from the caller's buffer and received straight into the volume's region
// (and the reverse): no staging copy on either side.
//
// Wire protocol (little-endian), per connection:
//   client -> server  hello: "MSTC", u32 version, 32-byte secret
//                     [version 2: 16-byte client salt]
//   server -> client  u8 verdict: 0 accepted, 1 refused (bad hello or
//                     secret), 2 this server encrypts and the hello is
//                     version 1, 3 this server does not encrypt and the
//                     hello is version 2 (a close is a refusal too)
//                     [version 2, accepted: 16-byte server salt]
//   then, repeatedly, each of these a record:
//   client -> server  u32 op (1 write, 2 read, 3 small), u32 0, u64 region, u64 offset,
//                     u64 length
//                     [write, small: length bytes]
//   server -> client  u32 Errc, u32 message length
//                     [message, when its length is not 0]
//                     [read, when Errc is ok: length bytes]
// Op 3 is a small operation (transport.hpp's SmallOps: the fast path for
// small gets and puts across hosts, on a connection of its own): its
// `length` bytes (at most kMaxSmallOpBytes; more is a protocol error that
// ends the connection) go to the volume's handler, and an ok reply's
// second field is the length of the handler's reply, which follows in
// place of a message. A header and the bytes after it leave in one send
// (MSG_MORE), and both ends of a small-operations connection spin 50 us
// for the next record before they sleep in recv.
// Version 1 sends records as they are. Version 2 (a server started with
// TransportConfig::tcp_encrypt, whose endpoint carries a key) seals each
// with AES-256-GCM: the ciphertext, then a 16-byte tag (tcp_cipher.hpp).

#include "meshstore/transports/registry.hpp"

namespace meshstore::transports::tcp {

/// The tcp transport's factory (name "tcp": above rpc, below shm).
TransportFactory tcp_factory();

}  // namespace meshstore::transports::tcp
