// The native CUDA backend of a build without a CUDA toolkit: every device
// path answers Errc::unavailable saying so.
#include "meshstore/internal/cuda_backend.hpp"
#include "meshstore/internal/memory.hpp"

namespace meshstore::internal::cuda::native {

namespace {
const char* const kWhy =
    "CUDA is not usable here: this build has no CUDA support (configure with the CUDA "
    "toolkit at /usr/local/cuda and MESHSTORE_WITH_CUDA=AUTO or ON)";
}

bool built() noexcept { return false; }
Status status() { return Status(Errc::unavailable, kWhy); }
int device_count() { return 0; }
Result<int> locate(const void*) { return -1; }
std::shared_ptr<std::byte> pinned(std::size_t n) { return internal::allocate_aligned(n ? n : 1); }
Status to_host(std::byte*, const TensorView&) { return status(); }
Status to_device(const TensorView&, const std::byte*) { return status(); }
Status copy_bytes(void*, const void*, std::size_t) { return status(); }
Status copy_pieces(std::byte*, const std::vector<DevicePiece>&, bool) { return status(); }
Result<std::shared_ptr<void>> register_host(void*, std::size_t) { return status(); }
Result<std::shared_ptr<std::byte>> device_alloc(std::size_t, int) { return status(); }
Result<int> export_dmabuf(const void*, std::size_t, std::uint64_t*) { return status(); }
Result<std::pair<std::uintptr_t, std::size_t>> allocation_of(const void*) { return status(); }
Result<std::string> ipc_handle(const void*) { return status(); }
Result<std::shared_ptr<std::byte>> ipc_open(const std::string&, int) { return status(); }

}  // namespace meshstore::internal::cuda::native
