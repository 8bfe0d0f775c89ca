#pragma once

// Writing tensors into files with pwrite: the one way write_file and
// save_sharded put tensor bytes into a file (docs/persistence.md).

#include <cstddef>
#include <cstdint>
#include <string>

#include "meshstore/status.hpp"
#include "meshstore/tensor.hpp"
#include "meshstore/tensor_slice.hpp"

namespace meshstore::safetensors::internal {

/// Writes the `n` bytes at `p` at offset `at` of `fd`, again after a short
/// write. Errc::io_error naming `path`.
Status pwrite_all(int fd, const std::byte* p, std::size_t n, std::uint64_t at,
                  const std::string& path);

/// Writes the elements of `view` (any strides; host memory, or GPU memory
/// through a host copy) into `fd` as the box `box` of a row-major tensor
/// whose bytes start at offset `base`: one pwrite per run of whole trailing
/// dimensions, so a whole tensor or a row shard is one run. A view that is
/// not contiguous host memory is packed into a host buffer first.
Status write_box(int fd, const std::string& path, std::uint64_t base, const TensorSlice& box,
                 const TensorView& view);

}  // namespace meshstore::safetensors::internal
