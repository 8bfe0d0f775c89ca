#pragma once

// GPU memory over transports that cannot copy it (tcp, rpc, cma, rdma):
// moved through page-locked host memory in pipelined pieces.
//
// Each piece's device copy runs on a copy engine thread and its transfer
// starts as soon as it is done, so the device copy of one piece overlaps the
// transfer of another (docs/gpu.md). shm and cuda-ipc copy GPU memory
// themselves, in one copy.

#include <cstddef>
#include <memory>

#include "meshstore/client/client_state.hpp"
#include "meshstore/future.hpp"
#include "meshstore/transports/wire/region_ref.hpp"

namespace meshstore::client {

// Writes `n` bytes of GPU memory at `src` into `region` with `transport`.
Future<void> write_from_device(const std::shared_ptr<transports::Transport>& transport,
                               const wire::RegionRef& region, const std::byte* src, std::size_t n);

// Reads `n` bytes of `region` over `c` into GPU memory at `dst`.
Future<void> read_into_device(const std::shared_ptr<VolumeConn>& c, const wire::RegionRef& region,
                              std::byte* dst, std::size_t n);

}  // namespace meshstore::client
