#pragma once

#include <cstdint>
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
  /// The shared-memory segment holding the region ("" = process memory):
  /// same-host clients map it (the shm transport).
  std::string segment;
  /// Where the region starts inside `segment`.
  std::uint64_t segment_offset = 0;
  /// One-sided transports (cma, rdma): the region's address in the
  /// volume's process, set by TransportServer::describe (0 = not described).
  std::uint64_t address = 0;
  /// rdma: the remote key of the region's memory registration.
  std::uint64_t rkey = 0;
  /// cuda-ipc: the CUDA IPC handle of the region's device memory.
  std::string ipc_handle;
  /// The GPU of the volume holding the region's memory; -1 for host memory
  /// (only cuda-ipc reaches device regions).
  int device = -1;
};

/// Encodes a RegionRef as its Protobuf bytes.
std::string encode(const RegionRef& x);

/// Decodes the Protobuf bytes of a RegionRef into `x`; fails with
/// Errc::protocol_error on a malformed encoding.
Status decode(const std::string& bytes, RegionRef& x);

}  // namespace meshstore::wire
