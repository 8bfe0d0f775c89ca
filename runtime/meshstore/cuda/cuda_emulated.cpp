// Emulated CUDA devices (meshstore/internal/cuda_emulation.hpp): the
// backend a test switches on where no GPU is, so the store's device paths
// (staging, pieces, packing, checkpoints, the checks on device views) run
// in every CI build. Built with and without the CUDA toolkit.
//
// An allocation is a memfd mapped twice: PROT_NONE at the address callers
// get (the CPU cannot touch "device memory", as on a GPU) and read-write at
// a private address only the copy calls below use.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "meshstore/internal/cuda_backend.hpp"
#include "meshstore/internal/cuda_emulation.hpp"
#include "meshstore/internal/memory.hpp"

namespace meshstore::internal::cuda {
namespace {

constexpr int kMaxDevices = 16;

std::string errno_text(const char* call) { return std::string(call) + ": " + std::strerror(errno); }

// One allocation of `size` bytes on emulated device `device` (or, opened
// through an IPC handle, another process's allocation).
struct Allocation {
  std::byte* at = nullptr;      // what callers see: PROT_NONE
  std::byte* shadow = nullptr;  // the same pages, read-write, for the copies
  std::size_t size = 0;         // as asked for: a byte past it is not device memory
  std::size_t mapped = 0;       // whole pages
  int device = 0;
  int fd = -1;               // the memfd: its IPC handle names it (/proc/PID/fd/FD)
  std::uint64_t serial = 0;  // this process's allocation number: handles never repeat
  Allocation() = default;
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;
  ~Allocation() {
    if (at) ::munmap(at, mapped);
    if (shadow) ::munmap(shadow, mapped);
    if (fd >= 0) ::close(fd);
  }
};

constexpr const char* kHandleTag = "emulated-cuda-ipc";

class Emulator {
 public:
  explicit Emulator(int count) : count_(count) {}
  int count() const noexcept { return count_; }
  Status check_device(int device) const {
    if (device >= 0 && device < count_) return Status();
    return Status(Errc::invalid_argument,
                  "cudaSetDevice: invalid device ordinal (cuda:" + std::to_string(device) + " of " +
                      std::to_string(count_) + " emulated devices)");
  }

  Result<std::shared_ptr<std::byte>> allocate(std::size_t n, int device) {
    MESHSTORE_RETURN_IF_ERROR(check_device(device));
    const int fd = ::memfd_create("meshstore-emulated-gpu", MFD_CLOEXEC);
    if (fd < 0) {
      return Status(Errc::out_of_capacity, "emulated cudaMalloc: " + errno_text("memfd_create"));
    }
    const std::size_t size = n ? n : 1;
    if (::ftruncate(fd, static_cast<off_t>(round_up(size))) != 0) {
      Status failed(Errc::out_of_capacity, "emulated cudaMalloc: " + errno_text("ftruncate"));
      ::close(fd);
      return failed.with_context(std::to_string(n) + " bytes");
    }
    auto mapped = map(fd, size, device, "emulated cudaMalloc");
    if (mapped.ok()) ++allocations_;
    return mapped;
  }
  std::uint64_t allocations() const noexcept { return allocations_.load(); }

  // The IPC handle of the allocation starting at `p`.
  Result<std::string> handle_of(const void* p) {
    auto a = find(p);
    if (!a || a->at != p || a->fd < 0) {
      return Status(Errc::internal,
                    "emulated cudaIpcGetMemHandle: invalid argument (not the start of a device "
                    "allocation of this process)");
    }
    return std::string(kHandleTag) + ":" + std::to_string(::getpid()) + ":" +
           std::to_string(a->fd) + ":" + std::to_string(a->size) + ":" + std::to_string(a->device) +
           ":" + std::to_string(a->serial);
  }

  // Another process's allocation, through its handle.
  Result<std::shared_ptr<std::byte>> open(const std::string& handle, int device) {
    MESHSTORE_RETURN_IF_ERROR(check_device(device));
    long long pid = 0, fd = 0, owner = 0;
    unsigned long long size = 0;
    char tail = 0;
    unsigned long long serial = 0;
    const std::string format = std::string(kHandleTag) + ":%lld:%lld:%llu:%lld:%llu%c";
    if (std::sscanf(handle.c_str(), format.c_str(), &pid, &fd, &size, &owner, &serial, &tail) !=
            5 ||
        size == 0) {
      return Status(Errc::unavailable, "emulated cudaIpcOpenMemHandle: not an emulated handle");
    }
    if (pid == ::getpid()) {
      return Status(Errc::unavailable,
                    "emulated cudaIpcOpenMemHandle: invalid device context (a process cannot "
                    "open its own IPC handles)");
    }
    const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
    const int local = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (local < 0) {
      return Status(Errc::unavailable,
                    "emulated cudaIpcOpenMemHandle: " + errno_text(("open " + path).c_str()));
    }
    return map(local, static_cast<std::size_t>(size), static_cast<int>(owner),
               "emulated cudaIpcOpenMemHandle");
  }

  // The live allocation holding address `p`, or null.
  std::shared_ptr<const Allocation> find(const void* p) {
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.upper_bound(addr);
    if (it == live_.begin()) return nullptr;
    --it;
    if (addr >= it->first + it->second->size) return nullptr;
    return it->second;
  }

  Result<std::shared_ptr<void>> register_host(void* p, std::size_t n) {
    if (find(p)) {
      return Status(Errc::internal, "emulated cudaHostRegister: the memory is device memory");
    }
    const auto from = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard<std::mutex> lock(mu_);
    auto next = registered_.lower_bound(from);
    const bool overlaps_next = next != registered_.end() && next->first < from + n;
    const bool overlaps_prev =
        next != registered_.begin() && std::prev(next)->first + std::prev(next)->second > from;
    if (overlaps_next || overlaps_prev) {
      return Status(Errc::internal,
                    "emulated cudaHostRegister: part or all of the requested memory range "
                    "is already mapped (cudaErrorHostMemoryAlreadyRegistered), " +
                        std::to_string(n) + " bytes");
    }
    registered_.emplace(from, n);
    return std::shared_ptr<void>(p, [this, from](void*) {
      std::lock_guard<std::mutex> lock(mu_);
      registered_.erase(from);
    });
  }

 private:
  static std::size_t round_up(std::size_t n) {
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return (n + page - 1) / page * page;
  }
  // Maps `size` bytes of memfd `fd` (taking it over) on `device`: PROT_NONE
  // where callers see it, read-write for the copies; live until the
  // returned pointer's last owner lets go.
  Result<std::shared_ptr<std::byte>> map(int fd, std::size_t size, int device, const char* what) {
    auto a = std::make_shared<Allocation>();
    a->fd = fd;
    a->size = size;
    a->mapped = round_up(size);
    a->device = device;
    a->serial = ++serials_;
    void* at = ::mmap(nullptr, a->mapped, PROT_NONE, MAP_SHARED, fd, 0);
    void* shadow = ::mmap(nullptr, a->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (at != MAP_FAILED) a->at = static_cast<std::byte*>(at);
    if (shadow != MAP_FAILED) a->shadow = static_cast<std::byte*>(shadow);
    if (!a->at || !a->shadow) {
      return Status(Errc::out_of_capacity, std::string(what) + ": " + errno_text("mmap") + " (" +
                                               std::to_string(size) + " bytes)");
    }
    const auto key = reinterpret_cast<std::uintptr_t>(a->at);
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_.emplace(key, a);
    }
    // Freed when the caller lets go; a copy in flight keeps the pages.
    return std::shared_ptr<std::byte>(a->at, [this, key](std::byte*) {
      std::lock_guard<std::mutex> lock(mu_);
      live_.erase(key);
    });
  }

  const int count_;
  std::atomic<std::uint64_t> serials_{0};
  std::atomic<std::uint64_t> allocations_{0};
  std::mutex mu_;                                               // guards live_ and registered_
  std::map<std::uintptr_t, std::shared_ptr<Allocation>> live_;  // by caller address
  std::map<std::uintptr_t, std::size_t> registered_;  // page-locked host ranges: start, length
};

std::atomic<Emulator*> g_emulator{nullptr};

Emulator& emulator() { return *g_emulator.load(std::memory_order_acquire); }

// Where the copy calls reach [p, p + n): the private mapping of emulated
// device memory (held in `*keep` while the copy runs), or `p` itself for
// host memory. A range that starts in an allocation and runs past its end
// fails, as cudaMemcpy fails.
Result<std::byte*> reach(const void* p, std::size_t n, std::shared_ptr<const Allocation>* keep) {
  *keep = emulator().find(p);
  if (!*keep) return static_cast<std::byte*>(const_cast<void*>(p));
  const Allocation& a = **keep;
  const std::size_t offset = static_cast<std::size_t>(static_cast<const std::byte*>(p) - a.at);
  if (n > a.size - offset) {
    return Status(Errc::internal, "emulated cudaMemcpy: invalid argument: " + std::to_string(n) +
                                      " bytes from offset " + std::to_string(offset) + " of a " +
                                      std::to_string(a.size) +
                                      "-byte allocation on cuda:" + std::to_string(a.device));
  }
  return a.shadow + offset;
}

// Copies between device view `v` (any strides) and row-major `flat`.
Status copy(const TensorView& v, std::byte* flat, bool to_flat) {
  if (v.nbytes() == 0) return Status();
  MESHSTORE_RETURN_IF_ERROR(emulator().check_device(v.device().index));
  std::shared_ptr<const Allocation> keep_v, keep_flat;
  auto at = reach(v.data(), span_of(v), &keep_v);
  if (!at.ok()) return at.status();
  auto flat_at = reach(flat, v.nbytes(), &keep_flat);
  if (!flat_at.ok()) return flat_at.status();
  const TensorView shadow(*at, v.dtype(), v.shape(), v.strides());
  const TensorView packed(*flat_at, v.dtype(), v.shape());
  return to_flat ? copy_into(shadow, packed) : copy_into(packed, shadow);
}

}  // namespace

Status emulate_devices(int count) {
  if (count < 1 || count > kMaxDevices) {
    return Status(Errc::invalid_argument, "emulate_devices: " + std::to_string(count) +
                                              " devices (1 to " + std::to_string(kMaxDevices) +
                                              ")");
  }
  auto* fresh = new Emulator(count);  // never destroyed: used until exit
  Emulator* none = nullptr;
  if (!g_emulator.compare_exchange_strong(none, fresh, std::memory_order_acq_rel)) {
    delete fresh;
    return Status(Errc::invalid_argument, "emulate_devices: emulated devices are already on");
  }
  return Status();
}

bool emulating() noexcept { return g_emulator.load(std::memory_order_acquire) != nullptr; }

std::uint64_t emulated_allocations() noexcept {
  auto* e = g_emulator.load(std::memory_order_acquire);
  return e ? e->allocations() : 0;
}

namespace emulated {

Status status() { return Status(); }
int device_count() { return emulator().count(); }

Result<int> locate(const void* p) {
  auto a = emulator().find(p);
  return a ? a->device : -1;
}

std::shared_ptr<std::byte> pinned(std::size_t n) { return internal::allocate_aligned(n ? n : 1); }

Status to_host(std::byte* dst, const TensorView& src) { return copy(src, dst, true); }

Status to_device(const TensorView& dst, const std::byte* src) {
  return copy(dst, const_cast<std::byte*>(src), false);
}

Status copy_bytes(void* dst, const void* src, std::size_t n) {
  if (n == 0) return Status();
  std::shared_ptr<const Allocation> keep_dst, keep_src;
  auto to = reach(dst, n, &keep_dst);
  if (!to.ok()) return to.status();
  auto from = reach(src, n, &keep_src);
  if (!from.ok()) return from.status();
  std::memmove(*to, *from, n);
  return Status();
}

// One copy per piece: the emulator checks each against its allocation as
// the real one's kernel would fault on a bad pointer.
Status copy_pieces(std::byte* host, const std::vector<DevicePiece>& pieces, bool to_host) {
  for (const auto& p : pieces) {
    MESHSTORE_RETURN_IF_ERROR(to_host ? copy_bytes(host + p.offset, p.device_ptr, p.n)
                                      : copy_bytes(p.device_ptr, host + p.offset, p.n));
  }
  return Status();
}

Result<std::shared_ptr<void>> register_host(void* p, std::size_t n) {
  if (n == 0 || p == nullptr) return std::shared_ptr<void>();
  return emulator().register_host(p, n);
}

Result<std::shared_ptr<std::byte>> device_alloc(std::size_t n, int device) {
  return emulator().allocate(n, device);
}

Result<std::pair<std::uintptr_t, std::size_t>> allocation_of(const void* p) {
  auto a = emulator().find(p);
  if (!a) return Status(Errc::invalid_argument, "not CUDA device memory");
  return std::make_pair(reinterpret_cast<std::uintptr_t>(a->at), a->size);
}

Result<std::string> ipc_handle(const void* p) { return emulator().handle_of(p); }

Result<std::shared_ptr<std::byte>> ipc_open(const std::string& handle, int device) {
  return emulator().open(handle, device);
}

Result<int> export_dmabuf(const void*, std::size_t, std::uint64_t*) {
  return Status(Errc::unsupported,
                "emulated CUDA devices export no dma-buf (GPUDirect RDMA needs a real GPU)");
}

}  // namespace emulated
}  // namespace meshstore::internal::cuda
