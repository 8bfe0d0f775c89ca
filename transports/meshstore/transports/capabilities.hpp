#pragma once

#include <cstddef>

namespace meshstore::transports {

/// What a transport can do; selection and the client read these.
struct Capabilities {
  /// Reads and writes need no code on the volume's side per byte (shm, cma, rdma).
  bool one_sided = false;
  /// Works only when client and volume share a host.
  bool same_host_only = false;
  /// Objects may live in device (GPU) memory of the volume's process, and
  /// move without staging through the host (cuda-ipc).
  bool device_memory = false;
  /// The caller's buffer in write()/read() may be device memory: the
  /// transport copies it with CUDA itself, in one copy (shm, cuda-ipc).
  /// The client stages device memory through page-locked host memory for
  /// the others.
  bool device_copies = false;
  /// Can map a volume's region into the client's address space
  /// (map_read_only, map_writable): shm.
  bool maps_memory = false;
  /// Largest single piece moved at once (0 = no limit).
  std::size_t max_chunk_bytes = 0;
};

}  // namespace meshstore::transports
