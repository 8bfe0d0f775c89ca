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
//   client -> server  hello: "MSTC", u32 version (1), 32-byte secret
//   server -> client  u8 0 = accepted (anything else, or a close = refused)
//   then, repeatedly:
//   client -> server  u32 op (1 write, 2 read), u32 0, u64 region, u64 offset, u64 length
//                     [write: length bytes]
//   server -> client  u32 Errc, u32 message length, message
//                     [read, when Errc is ok: length bytes]

#include "meshstore/transports/registry.hpp"

namespace meshstore::transports::tcp {

/// The tcp transport's factory (name "tcp": above rpc, below shm).
TransportFactory tcp_factory();

}  // namespace meshstore::transports::tcp
