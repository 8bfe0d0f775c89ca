#pragma once

// Reads into strided (or GPU) destinations: through a contiguous host
// temporary, copied into the destination after the read.

#include <cstddef>
#include <utility>
#include <vector>

#include "meshstore/status.hpp"
#include "meshstore/tensor.hpp"

namespace meshstore::client {

// Where a read into `dst` lands: `dst` itself when contiguous (and, with
// `host_only`, in host memory), else a contiguous host temporary queued in
// `unpack`, copied into `dst` afterwards by finish_unpack().
Result<std::byte*> contiguous_target(const TensorView& dst,
                                     std::vector<std::pair<Tensor, TensorView>>& unpack,
                                     bool host_only = false);

// Copies the temporaries of contiguous_target() into their destinations:
// GPU ones with CUDA (strided views by a kernel), the others by the CPU.
Status finish_unpack(std::vector<std::pair<Tensor, TensorView>>& unpack);

}  // namespace meshstore::client
