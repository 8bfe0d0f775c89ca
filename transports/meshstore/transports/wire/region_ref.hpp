#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "meshstore/status.hpp"

/// The transport layer's wire vocabulary: how a volume's memory region is
/// addressed. A plain struct that actors exchange; in-process it travels as
/// it is, across processes it is encoded with its Protobuf twin in
/// region_ref.proto (see the codec functions below).
namespace meshstore::wire {

/// A memory region of a volume; its id is also the stored object's id.
/// A value type: not synchronized.
struct RegionRef {
  std::uint64_t region_id = 0;
  std::uint64_t nbytes = 0;
  /// The GPU of the volume holding the region's memory; -1 for host memory
  /// (only cuda-ipc reaches device regions).
  int device = -1;
  /// What each of the volume's transport servers said of the region
  /// (TransportServer::describe), by transport name: bytes that only that
  /// transport's client reads (shm: the segment holding it; cma and rdma:
  /// its address, and rdma's registration key; cuda-ipc: its IPC handle).
  /// A new transport adds an entry here, never a field
  /// (transports/region_description.hpp).
  std::map<std::string, std::string> described;
};

/// Encodes a RegionRef as its Protobuf bytes.
std::string encode(const RegionRef& x);

/// Decodes the Protobuf bytes of a RegionRef into `x`; fails with
/// Errc::protocol_error on a malformed encoding.
Status decode(const std::string& bytes, RegionRef& x);

}  // namespace meshstore::wire
