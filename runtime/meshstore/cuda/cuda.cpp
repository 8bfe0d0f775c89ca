// CUDA support, built when MESHSTORE_WITH_CUDA finds a toolkit
// (cuda_none.cpp otherwise). Host API only, linked with the static CUDA
// runtime; the kernels are in strided.cu and pieces.cu.
#include <cuda.h>  // driver API types; its functions come through the runtime
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "meshstore/cuda/pieces.cuh"
#include "meshstore/cuda/strided.cuh"
#include "meshstore/internal/cuda_backend.hpp"
#include "meshstore/internal/cuda_device_scope.hpp"
#include "meshstore/internal/memory.hpp"

namespace meshstore::internal::cuda::native {

bool built() noexcept { return true; }

namespace {
struct Probe {
  Status status;
  int count = 0;
};
const Probe& probe() {
  static const Probe p = [] {
    Probe out;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();  // not sticky, but clear it anyway
      out.status = Status(Errc::unavailable, std::string("CUDA is not usable here: "
                                                         "cudaGetDeviceCount: ") +
                                                 cudaGetErrorString(e));
      return out;
    }
    if (n == 0) {
      out.status = Status(Errc::unavailable, "CUDA is not usable here: no CUDA device");
      return out;
    }
    out.count = n;
    return out;
  }();
  return p;
}
}  // namespace

Status status() { return probe().status; }
int device_count() { return probe().count; }

namespace {

std::string error_text(const char* call, cudaError_t e) {
  return std::string(call) + ": " + cudaGetErrorString(e);
}

// The GPU that holds `p` (device or managed memory), or -1 for host memory
// and addresses CUDA does not know.
int device_of(const void* p) {
  auto at = locate(p);
  return at.ok() ? *at : -1;
}

// Page-locked host buffers by size, reused by the next copy of the same
// size: page-locking costs about as much as copying the memory once.
// Process-wide and never destroyed (buffers may come back during exit);
// at most kMaxIdle bytes wait in it.
class PinnedPool {
 public:
  static PinnedPool& instance() {
    static auto* pool = new PinnedPool();
    return *pool;
  }
  std::shared_ptr<std::byte> take(std::size_t n) {
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(n);
      if (it != free_.end()) {
        p = it->second;
        free_.erase(it);
        idle_ -= n;
      }
    }
    if (!p && cudaHostAlloc(&p, n, cudaHostAllocPortable) != cudaSuccess) {
      cudaGetLastError();
      return internal::allocate_aligned(n);  // pageable: slower, still correct
    }
    return std::shared_ptr<std::byte>(static_cast<std::byte*>(p),
                                      [this, n](std::byte* b) { give(n, b); });
  }

 private:
  static constexpr std::size_t kMaxIdle = std::size_t{4} << 30;
  void give(std::size_t n, void* p) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (idle_ + n <= kMaxIdle) {
        free_.emplace(n, p);
        idle_ += n;
        return;
      }
    }
    cudaFreeHost(p);
  }
  std::mutex mu_;  // guards free_ and idle_
  std::multimap<std::size_t, void*> free_;
  std::size_t idle_ = 0;
};

Result<StridedLayout> layout_of(const TensorView& v) {
  if (v.ndim() > kMaxStridedDims) {
    return Status(Errc::unsupported, "a non-contiguous device view of " + std::to_string(v.ndim()) +
                                         " dims (at most " + std::to_string(kMaxStridedDims) + ")");
  }
  StridedLayout l;
  l.ndim = static_cast<int>(v.ndim());
  l.numel = v.numel();
  for (int d = 0; d < l.ndim; ++d) {
    l.shape[d] = v.shape()[static_cast<std::size_t>(d)];
    l.strides[d] = v.strides()[static_cast<std::size_t>(d)];
  }
  return l;
}

// Copies between device view `v` and contiguous memory `flat` (host or
// device) on the calling thread's stream; `to_flat` packs v into flat.
Status copy(const TensorView& v, void* flat, bool to_flat) {
  const std::size_t n = v.nbytes();
  if (n == 0) return Status();
  MESHSTORE_RETURN_IF_ERROR(status());
  DeviceScope scope(v.device().index);
  if (scope.error() != cudaSuccess) {
    return Status(Errc::invalid_argument, error_text("cudaSetDevice", scope.error()));
  }
  cudaStream_t stream = cudaStreamPerThread;
  // Unified addressing: cudaMemcpyDefault tells host from device memory.
  cudaError_t e = cudaSuccess;
  if (v.is_contiguous()) {
    e = to_flat ? cudaMemcpyAsync(flat, v.data(), n, cudaMemcpyDefault, stream)
                : cudaMemcpyAsync(v.data(), flat, n, cudaMemcpyDefault, stream);
    if (e != cudaSuccess) return Status(Errc::internal, error_text("cudaMemcpyAsync", e));
  } else {
    auto layout = layout_of(v);
    if (!layout.ok()) return layout.status();
    void* tmp = nullptr;
    e = cudaMallocAsync(&tmp, n, stream);
    if (e != cudaSuccess) {
      return Status(Errc::out_of_capacity, error_text("cudaMallocAsync", e) + " (" +
                                               std::to_string(n) +
                                               " bytes to pack a non-contiguous view)");
    }
    const std::size_t elsize = dtype_size(v.dtype());
    if (to_flat) {
      e = launch_strided_copy(tmp, v.data(), *layout, elsize, true, stream);
      if (e == cudaSuccess) e = cudaMemcpyAsync(flat, tmp, n, cudaMemcpyDefault, stream);
    } else {
      e = cudaMemcpyAsync(tmp, flat, n, cudaMemcpyDefault, stream);
      if (e == cudaSuccess) e = launch_strided_copy(tmp, v.data(), *layout, elsize, false, stream);
    }
    cudaFreeAsync(tmp, stream);
    if (e != cudaSuccess) return Status(Errc::internal, error_text("strided device copy", e));
  }
  e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) return Status(Errc::internal, error_text("cudaStreamSynchronize", e));
  return Status();
}

}  // namespace

Result<int> locate(const void* p) {
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Status(Errc::invalid_argument, error_text("cudaPointerGetAttributes", e));
  }
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) return -1;
  return a.device;
}

std::shared_ptr<std::byte> pinned(std::size_t n) {
  if (n == 0) n = 1;
  if (!status().ok()) return internal::allocate_aligned(n);
  return PinnedPool::instance().take(n);
}

Status to_host(std::byte* dst, const TensorView& src) { return copy(src, dst, true); }

Status copy_bytes(void* dst, const void* src, std::size_t n) {
  if (n == 0) return Status();
  MESHSTORE_RETURN_IF_ERROR(status());
  // The stream of the device that holds the memory: no detour through
  // another GPU's context.
  int device = device_of(dst);
  if (device < 0) device = device_of(src);
  DeviceScope scope(device < 0 ? 0 : device);
  if (scope.error() != cudaSuccess) {
    return Status(Errc::internal, error_text("cudaSetDevice", scope.error()));
  }
  cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, cudaStreamPerThread);
  if (e == cudaSuccess) e = cudaStreamSynchronize(cudaStreamPerThread);
  if (e != cudaSuccess) return Status(Errc::internal, error_text("cudaMemcpyAsync", e));
  return Status();
}

namespace {

// Fewer pieces than this go one copy each (queued, one wait): a kernel's
// fixed cost (its table uploaded, a launch, a staging buffer) is about
// that of a few copies.
constexpr std::size_t kFewPieces = 4;

// One GPU's pieces (copy_pieces), on this thread's stream of that GPU.
Status copy_device_pieces(std::byte* host, const std::vector<const DevicePiece*>& pieces,
                          bool to_host, int device) {
  DeviceScope scope(device);
  if (scope.error() != cudaSuccess) {
    return Status(Errc::invalid_argument, error_text("cudaSetDevice", scope.error()));
  }
  cudaStream_t stream = cudaStreamPerThread;
  std::size_t lo = pieces.front()->offset, hi = 0, total = 0, largest = 0;
  for (const auto* p : pieces) {
    lo = std::min(lo, p->offset);
    hi = std::max(hi, p->offset + p->n);
    total += p->n;
    largest = std::max(largest, p->n);
  }
  const std::size_t span = hi - lo;
  // One copy of the host range the pieces span, when it holds little else.
  const bool batched = pieces.size() >= kFewPieces && span <= 2 * total + (std::size_t{64} << 10);
  cudaError_t e = cudaSuccess;
  std::shared_ptr<std::byte> table;  // page-locked: its upload is queued too
  void* staging = nullptr;
  void* device_table = nullptr;
  if (!batched) {
    for (const auto* p : pieces) {
      e = to_host
              ? cudaMemcpyAsync(host + p->offset, p->device_ptr, p->n, cudaMemcpyDefault, stream)
              : cudaMemcpyAsync(p->device_ptr, host + p->offset, p->n, cudaMemcpyDefault, stream);
      if (e != cudaSuccess) break;
    }
  } else {
    const std::size_t table_bytes = pieces.size() * sizeof(PieceCopy);
    table = pinned(table_bytes);
    auto* t = reinterpret_cast<PieceCopy*>(table.get());
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      t[i] = PieceCopy{reinterpret_cast<std::uintptr_t>(pieces[i]->device_ptr),
                       pieces[i]->offset - lo, pieces[i]->n};
    }
    e = cudaMallocAsync(&staging, span, stream);
    if (e == cudaSuccess) e = cudaMallocAsync(&device_table, table_bytes, stream);
    if (e == cudaSuccess) {
      e = cudaMemcpyAsync(device_table, t, table_bytes, cudaMemcpyHostToDevice, stream);
    }
    if (e == cudaSuccess && !to_host) {
      e = cudaMemcpyAsync(staging, host + lo, span, cudaMemcpyHostToDevice, stream);
    }
    if (e == cudaSuccess) {
      e = launch_piece_copy(static_cast<const PieceCopy*>(device_table), pieces.size(), largest,
                            staging, to_host, stream);
    }
    if (e == cudaSuccess && to_host) {
      e = cudaMemcpyAsync(host + lo, staging, span, cudaMemcpyDeviceToHost, stream);
    }
    if (device_table) cudaFreeAsync(device_table, stream);
    if (staging) cudaFreeAsync(staging, stream);
  }
  const cudaError_t waited = cudaStreamSynchronize(stream);
  if (e == cudaSuccess) e = waited;
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Status(Errc::internal,
                  error_text(batched ? "batched device copy" : "cudaMemcpyAsync", e) + " (" +
                      std::to_string(pieces.size()) + " pieces, " + std::to_string(total) +
                      " bytes, cuda:" + std::to_string(device) + ")");
  }
  return Status();
}

}  // namespace

Status copy_pieces(std::byte* host, const std::vector<DevicePiece>& pieces, bool to_host) {
  if (pieces.empty()) return Status();
  MESHSTORE_RETURN_IF_ERROR(status());
  std::map<int, std::vector<const DevicePiece*>> by_device;
  for (const auto& p : pieces) {
    if (p.n > 0) by_device[p.device].push_back(&p);
  }
  for (const auto& [device, mine] : by_device) {
    MESHSTORE_RETURN_IF_ERROR(copy_device_pieces(host, mine, to_host, device));
  }
  return Status();
}

Result<std::shared_ptr<void>> register_host(void* p, std::size_t n) {
  MESHSTORE_RETURN_IF_ERROR(status());
  if (n == 0 || p == nullptr) return std::shared_ptr<void>();
  const cudaError_t e = cudaHostRegister(p, n, cudaHostRegisterPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Status(Errc::internal, error_text("cudaHostRegister", e) + " (" + std::to_string(n) +
                                      " bytes of host memory)");
  }
  // At exit the runtime may be gone before the last owner: nothing to undo then.
  return std::shared_ptr<void>(p, [](void* q) { cudaHostUnregister(q); });
}

Result<std::shared_ptr<std::byte>> device_alloc(std::size_t n, int device) {
  MESHSTORE_RETURN_IF_ERROR(status());
  DeviceScope scope(device);
  if (scope.error() != cudaSuccess) {
    return Status(Errc::invalid_argument, error_text("cudaSetDevice", scope.error()));
  }
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, n ? n : 1);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Status(Errc::out_of_capacity, error_text("cudaMalloc", e) + " (" + std::to_string(n) +
                                             " bytes on cuda:" + std::to_string(device) + ")");
  }
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(p), [device](std::byte* q) {
    DeviceScope s(device);
    cudaFree(q);
  });
}

namespace {

// A driver API function looked up through the runtime (the binary does
// not link libcuda itself), in its ABI of CUDA version `version`; null,
// with `*why` set, when the driver has none.
// A driver function, looked up through the runtime (the library never
// links libcuda, so it loads where no driver is). `version` is the CUDA
// version whose signature the caller casts to; the lookup asks for the
// newest ABI of the symbol up to both this toolkit and the driver, which
// is that signature for every symbol used here (their _v2 ABIs are older
// than any toolkit this builds with).
void* driver_entry(const char* name, int version, std::string* why) {
  void* f = nullptr;
#if CUDART_VERSION >= 12000
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  cudaGetLastError();
  const int asked = std::min(CUDART_VERSION, driver);
  if (asked < version) {
    *why = std::string("the CUDA driver (") + std::to_string(driver) + ") is older than " + name +
           " (" + std::to_string(version) + ")";
    return nullptr;
  }
  cudaDriverEntryPointQueryResult q{};
#if CUDART_VERSION >= 12050
  const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &f, static_cast<unsigned>(asked),
                                                         cudaEnableDefault, &q);
#else
  const cudaError_t e = cudaGetDriverEntryPoint(name, &f, cudaEnableDefault, &q);
#endif
  if (e == cudaSuccess && q == cudaDriverEntryPointSuccess && f) return f;
  cudaGetLastError();
  *why = std::string("the CUDA driver has no ") + name + " (asked for CUDA " +
         std::to_string(asked) + ": " +
         (e != cudaSuccess                               ? error_text("cudaGetDriverEntryPoint", e)
          : q == cudaDriverEntryPointSymbolNotFound      ? std::string("symbol not found")
          : q == cudaDriverEntryPointVersionNotSufficent ? std::string("version not sufficient")
                                                         : std::string("no function")) +
         ")";
  return nullptr;
#else
  (void)version;
  *why = std::string("this CUDA toolkit (") + std::to_string(CUDART_VERSION) + ") cannot look up " +
         name + " (12.0 or later can)";
  return nullptr;
#endif
}

template <class Fn>
struct DriverEntry {
  Fn fn = nullptr;
  std::string why;  // when fn is null
  DriverEntry(const char* name, int version) {
    fn = reinterpret_cast<Fn>(driver_entry(name, version, &why));
  }
};

// cuMemGetHandleForAddressRange (CUDA 11.7+).
using GetHandleFn = CUresult (*)(void*, CUdeviceptr, std::size_t, CUmemRangeHandleType,
                                 unsigned long long);
const DriverEntry<GetHandleFn>& handle_entry() {
  static const DriverEntry<GetHandleFn> entry("cuMemGetHandleForAddressRange", 11070);
  return entry;
}

// cuMemGetAddressRange (its _v2 ABI, CUDA 3.2+).
using AddressRangeFn = CUresult (*)(CUdeviceptr*, std::size_t*, CUdeviceptr);
const DriverEntry<AddressRangeFn>& range_entry() {
  static const DriverEntry<AddressRangeFn> entry("cuMemGetAddressRange", 3020);
  return entry;
}

}  // namespace

Result<int> export_dmabuf(const void* p, std::size_t n, std::uint64_t* offset) {
  MESHSTORE_RETURN_IF_ERROR(status());
  const int device = device_of(p);
  if (device < 0) {
    return Status(Errc::invalid_argument, "export_dmabuf: the memory is not CUDA device memory");
  }
  const auto& entry = handle_entry();
  if (!entry.fn) {
    return Status(Errc::unsupported,
                  entry.why + " (dma-buf export needs driver and toolkit 11.7 or later)");
  }
  const auto scope = DeviceScope::for_driver_calls(device);
  if (scope.error() != cudaSuccess) {
    return Status(Errc::internal, error_text("cudaSetDevice", scope.error()));
  }
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t base = at & ~(page - 1);
  const std::uintptr_t end = (at + n + page - 1) & ~(page - 1);
  int fd = -1;
  const CUresult r = entry.fn(&fd, static_cast<CUdeviceptr>(base), end - base,
                              CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  if (r != CUDA_SUCCESS || fd < 0) {
    return Status(Errc::unsupported,
                  "cuMemGetHandleForAddressRange (dma-buf) failed with CUresult " +
                      std::to_string(static_cast<int>(r)) + " for " + std::to_string(end - base) +
                      " bytes on cuda:" + std::to_string(device));
  }
  *offset = at - base;
  return fd;
}

Result<std::pair<std::uintptr_t, std::size_t>> allocation_of(const void* p) {
  MESHSTORE_RETURN_IF_ERROR(status());
  const auto& entry = range_entry();
  if (!entry.fn) return Status(Errc::unsupported, entry.why);
  const int device = device_of(p);
  if (device < 0) return Status(Errc::invalid_argument, "not CUDA device memory");
  const auto scope = DeviceScope::for_driver_calls(device);
  if (scope.error() != cudaSuccess) {
    return Status(Errc::internal, error_text("cudaSetDevice", scope.error()));
  }
  CUdeviceptr base = 0;
  std::size_t size = 0;
  const CUresult r =
      entry.fn(&base, &size, static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)));
  if (r != CUDA_SUCCESS) {
    return Status(Errc::unsupported, "cuMemGetAddressRange failed with CUresult " +
                                         std::to_string(static_cast<int>(r)));
  }
  return std::make_pair(static_cast<std::uintptr_t>(base), size);
}

Result<std::string> ipc_handle(const void* p) {
  MESHSTORE_RETURN_IF_ERROR(status());
  cudaIpcMemHandle_t handle;
  const cudaError_t e = cudaIpcGetMemHandle(&handle, const_cast<void*>(p));
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Status(Errc::internal, error_text("cudaIpcGetMemHandle", e));
  }
  return std::string(reinterpret_cast<const char*>(&handle), sizeof(handle));
}

Result<std::shared_ptr<std::byte>> ipc_open(const std::string& handle, int device) {
  MESHSTORE_RETURN_IF_ERROR(status());
  cudaIpcMemHandle_t h;
  if (handle.size() != sizeof(h)) {
    return Status(Errc::unavailable, "cudaIpcOpenMemHandle: a handle of " +
                                         std::to_string(handle.size()) + " bytes, not " +
                                         std::to_string(sizeof(h)));
  }
  std::memcpy(&h, handle.data(), sizeof(h));
  DeviceScope scope(device);
  if (scope.error() != cudaSuccess) {
    return Status(Errc::unavailable, error_text("cudaSetDevice", scope.error()));
  }
  void* p = nullptr;
  const cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Status(Errc::unavailable,
                  error_text("cudaIpcOpenMemHandle", e) + " (cuda:" + std::to_string(device) + ")");
  }
  // At exit the runtime may be gone before the last owner: nothing to undo then.
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(p),
                                    [](std::byte* q) { cudaIpcCloseMemHandle(q); });
}

Status to_device(const TensorView& dst, const std::byte* src) {
  return copy(dst, const_cast<std::byte*>(src), false);
}

}  // namespace meshstore::internal::cuda::native
