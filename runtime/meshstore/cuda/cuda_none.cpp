// CUDA support in a build without a CUDA toolkit: every device path
// answers Errc::unavailable saying so.
#include "meshstore/cuda.hpp"
#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/internal/memory.hpp"

namespace meshstore {
namespace cuda {

namespace {
const char* const kWhy =
    "CUDA is not usable here: this build has no CUDA support (configure with the CUDA "
    "toolkit at /usr/local/cuda and MESHSTORE_WITH_CUDA=AUTO or ON)";
}

bool built() noexcept { return false; }
Status status() { return Status(Errc::unavailable, kWhy); }
int device_count() { return 0; }

}  // namespace cuda

namespace internal::cuda {

Status check_device_view(const TensorView& view, const std::string& what) {
  return Status(Errc::unavailable, what + ": device " + view.device().to_string() + ": " +
                                       meshstore::cuda::status().message());
}

std::shared_ptr<std::byte> pinned(std::size_t n) { return internal::allocate_aligned(n ? n : 1); }

Status to_host(std::byte*, const TensorView&) { return meshstore::cuda::status(); }
Status copy_bytes(void*, const void*, std::size_t) { return meshstore::cuda::status(); }
bool is_device_pointer(const void*) { return false; }
Result<std::shared_ptr<void>> register_host(void*, std::size_t) {
  return meshstore::cuda::status();
}
Result<std::shared_ptr<std::byte>> device_alloc(std::size_t, int) {
  return meshstore::cuda::status();
}
Result<int> export_dmabuf(const void*, std::size_t, std::uint64_t*) {
  return meshstore::cuda::status();
}
Status to_device(const TensorView&, const std::byte*) { return meshstore::cuda::status(); }

}  // namespace internal::cuda
}  // namespace meshstore
