#include "meshstore/transports/cuda/cuda_ipc_transport.hpp"

#include <unistd.h>

#include <list>
#include <mutex>
#include <unordered_map>

#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/tensor.hpp"
#include "meshstore/transports/copy_engine.hpp"
#include "meshstore/transports/host_identity.hpp"
#include "meshstore/transports/region_description.hpp"
#include "meshstore/transports/shm/shm_transport.hpp"

namespace meshstore::transports::cuda_ipc {
namespace {

std::string uid_tag() { return "uid=" + std::to_string(geteuid()); }

// The volume's side: allocates device regions and describes them by their
// IPC handle (and, for a client in this very process, their address).
class CudaIpcServer final : public TransportServer {
 public:
  CudaIpcServer() {
    endpoint_.transport = "cuda-ipc";
    endpoint_.address = "pid=" + std::to_string(getpid()) + ";" + uid_tag();
    endpoint_.host_id = host_identity();
  }
  std::string_view name() const noexcept override { return "cuda-ipc"; }
  EndpointInfo endpoint() const override { return endpoint_; }

  Result<RegionMemory> allocate_device(std::size_t nbytes, int device) override {
    MESHSTORE_RETURN_IF_ERROR(meshstore::cuda::status());
    const int count = meshstore::cuda::device_count();
    if (device < 0 || device >= count) {
      return Status(Errc::invalid_argument, "cuda:" + std::to_string(device) +
                                                " does not exist in the volume's process (" +
                                                std::to_string(count) + " GPU(s) visible there)");
    }
    auto memory = internal::cuda::device_alloc(nbytes, device);
    if (!memory.ok()) return memory.status();
    RegionMemory m;
    m.memory = std::move(memory).value();
    m.device = device;
    return m;
  }

  Status describe(const Region& region, wire::RegionRef& ref) override {
    if (region.device() < 0) return Status();  // host memory: shm describes it
    // A handle names a whole allocation; a region may lie inside one (a
    // tensor a publisher lends, carved from its allocator's block).
    const auto at = reinterpret_cast<std::uintptr_t>(region.data());
    // Without the allocation's start a peer would open the handle at the
    // block's base and read the wrong bytes: no fallback to offset 0.
    auto a = internal::cuda::allocation_of(region.data());
    if (!a.ok()) {
      return a.status().with_context("cuda-ipc: region " + std::to_string(region.id()) +
                                     ": cannot find the device allocation it lies in");
    }
    if (at < a->first || region.size() > a->second - (at - a->first)) {
      return Status(Errc::invalid_argument, "cuda-ipc: region " + std::to_string(region.id()) +
                                                " runs past the end of its device allocation");
    }
    const std::uintptr_t base = a->first;
    auto handle = internal::cuda::ipc_handle(reinterpret_cast<const void*>(base));
    if (!handle.ok()) {
      return handle.status().with_context("cuda-ipc: region " + std::to_string(region.id()));
    }
    // The handle and the region's offset in its allocation, for other
    // processes; the address, for the volume's own (a process cannot open
    // its own IPC handles).
    ref.described["cuda-ipc"] = DescriptionWriter().bytes(*handle).u64(at).u64(at - base).take();
    ref.device = region.device();
    return Status();
  }
  void shutdown() override {}

 private:
  EndpointInfo endpoint_;
};

// Device memory of other processes, opened through IPC handles: one
// opening per allocation (a handle names one), kept for the next transfer
// of the same object, least recently used closed first. A transfer holds
// its opening, so closing never pulls memory from under a copy.
class OpenedHandles {
 public:
  static constexpr std::size_t kMax = 256;
  ~OpenedHandles() = default;  // the shared_ptrs close what they opened

  Result<std::shared_ptr<std::byte>> open(const std::string& handle, int device) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(handle);
    if (it != map_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.pos);
      return it->second.memory;
    }
    auto opened = internal::cuda::ipc_open(handle, device);
    if (!opened.ok()) return opened.status();
    std::shared_ptr<std::byte> memory = std::move(opened).value();
    lru_.push_front(handle);
    map_.emplace(handle, Entry{memory, lru_.begin()});
    while (map_.size() > kMax) {
      map_.erase(lru_.back());
      lru_.pop_back();
    }
    return memory;
  }

 private:
  struct Entry {
    std::shared_ptr<std::byte> memory;
    std::list<std::string>::iterator pos;
  };
  std::mutex mu_;  // guards map_ and lru_
  std::unordered_map<std::string, Entry> map_;
  std::list<std::string> lru_;
};

class CudaIpcTransport final : public Transport {
 public:
  CudaIpcTransport(std::unique_ptr<Transport> shm, bool same_process)
      : shm_(std::move(shm)), same_process_(same_process) {}

  std::string_view name() const noexcept override { return "cuda-ipc"; }
  Capabilities capabilities() const noexcept override {
    Capabilities c;
    c.one_sided = true;
    c.same_host_only = true;
    c.device_memory = true;
    c.device_copies = true;
    c.maps_memory = true;  // host objects, as shm maps them
    return c;
  }

  // Device objects: one copy from wherever `src` is (the runtime tells GPU
  // from host memory). Host objects: as shm, unless `src` is GPU memory.
  Future<void> write(const wire::RegionRef& dst, std::uint64_t offset, const std::byte* src,
                     std::size_t n) override {
    return transfer(dst, offset, const_cast<std::byte*>(src), n, true);
  }
  Future<void> read(const wire::RegionRef& src, std::uint64_t offset, std::byte* dst,
                    std::size_t n) override {
    return transfer(src, offset, dst, n, false);
  }

  Result<std::shared_ptr<std::byte>> map_read_only(const wire::RegionRef& ref) override {
    if (ref.device >= 0) return unmappable(ref);
    return shm_->map_read_only(ref);
  }
  Result<std::shared_ptr<std::byte>> map_writable(const wire::RegionRef& ref) override {
    if (ref.device >= 0) return unmappable(ref);
    return shm_->map_writable(ref);
  }

 private:
  static Status unmappable(const wire::RegionRef& ref) {
    return Status(Errc::unsupported, "cuda-ipc: region " + std::to_string(ref.region_id) +
                                         " is GPU memory (cuda:" + std::to_string(ref.device) +
                                         "), which cannot be mapped into host memory");
  }

  Future<void> transfer(const wire::RegionRef& ref, std::uint64_t offset, std::byte* local,
                        std::size_t n, bool write) {
    const char* op = write ? "cuda-ipc write" : "cuda-ipc read";
    if (auto s = check_range(ref.region_id, ref.nbytes, offset, n, op); !s.ok()) {
      return make_error_future<void>(s);
    }
    if (ref.device >= 0) {
      auto memory = device_memory(ref);
      if (!memory.ok()) return make_error_future<void>(memory.status().with_context(op));
      std::shared_ptr<std::byte> opened = std::move(memory).value();
      std::byte* remote = opened.get() + offset;
      std::byte* to = write ? remote : local;
      const std::byte* from = write ? local : remote;
      // On a copy engine thread: the copy blocks until the bytes are there,
      // and the caller is an actor. The opening stays held until then.
      return CopyEngine::instance().run_checked([opened, to, from, n, op] {
        return internal::cuda::copy_bytes(to, from, n).with_context(op);
      });
    }
    // A host object: as shm moves it (in one CUDA copy through the mapping
    // when `local` is GPU memory).
    return write ? shm_->write(ref, offset, local, n) : shm_->read(ref, offset, local, n);
  }

  // The object's device memory in this process: the volume's own pointer
  // when it lives here (a process cannot open its own IPC handles), else
  // the opened handle.
  Result<std::shared_ptr<std::byte>> device_memory(const wire::RegionRef& ref) {
    DescriptionReader d(ref, "cuda-ipc", "cuda-ipc device access");
    if (!d.present()) {
      return Status(Errc::protocol_error, "device region " + std::to_string(ref.region_id) +
                                              " came without a CUDA IPC handle");
    }
    auto handle = d.bytes();
    if (!handle.ok()) return handle.status();
    auto address = d.u64();
    if (!address.ok()) return address.status();
    auto offset = d.u64();
    if (!offset.ok()) return offset.status();
    MESHSTORE_RETURN_IF_ERROR(d.finish());
    if (same_process_) {
      if (*address == 0) return d.malformed("gives address 0");
      return std::shared_ptr<std::byte>(reinterpret_cast<std::byte*>(*address), [](std::byte*) {});
    }
    if (handle->empty()) return d.malformed("has an empty CUDA IPC handle");
    auto opened = handles_.open(*handle, ref.device);
    if (!opened.ok()) return opened.status();
    // The region, inside the allocation the handle opened (held by it).
    return std::shared_ptr<std::byte>(*opened, opened->get() + *offset);
  }

  std::unique_ptr<Transport> shm_;
  const bool same_process_;
  OpenedHandles handles_;
};

// The pid and uid tags of a cuda-ipc endpoint address ("pid=P;uid=U").
std::pair<std::string, std::string> tags(const std::string& address) {
  const auto semi = address.find(';');
  if (semi == std::string::npos) return {address, ""};
  return {address.substr(0, semi), address.substr(semi + 1)};
}

}  // namespace

TransportFactory cuda_ipc_factory() {
  TransportFactory f;
  f.name = "cuda-ipc";
  // Below shm: automatic selection keeps shm (device tensors then stage
  // through host memory); StoreOptions::transport.name = "cuda-ipc" asks for it.
  f.priority = 19;
  f.capabilities.one_sided = true;
  f.capabilities.same_host_only = true;
  f.capabilities.device_memory = true;
  f.capabilities.device_copies = true;
  f.capabilities.maps_memory = true;
  f.available = [] { return meshstore::cuda::status(); };
  f.gpu_direct = [] { return meshstore::cuda::status(); };
  f.make_server = [](const ServerContext&) -> Result<std::unique_ptr<TransportServer>> {
    MESHSTORE_RETURN_IF_ERROR(meshstore::cuda::status());
    return std::unique_ptr<TransportServer>(std::make_unique<CudaIpcServer>());
  };
  f.make_client = [](const ClientContext& ctx,
                     const EndpointInfo& ep) -> Result<std::unique_ptr<Transport>> {
    if (ep.transport != "cuda-ipc") {
      return Status(Errc::invalid_argument, "cuda-ipc client: not a cuda-ipc endpoint");
    }
    MESHSTORE_RETURN_IF_ERROR(meshstore::cuda::status());
    EndpointInfo host = ep;
    host.transport = "shm";  // host objects: the shm client
    auto shm = shm::shm_factory().make_client(ctx, host);
    if (!shm.ok()) return shm.status();
    const bool same_process = tags(ep.address).first == "pid=" + std::to_string(getpid());
    return std::unique_ptr<Transport>(
        std::make_unique<CudaIpcTransport>(std::move(shm).value(), same_process));
  };
  f.can_serve = [](const EndpointInfo& ep) -> Status {
    MESHSTORE_RETURN_IF_ERROR(same_host(ep.host_id));
    const std::string their_uid = tags(ep.address).second;
    if (their_uid != uid_tag()) {
      return Status(Errc::unsupported, "the volume runs as another user (" + their_uid +
                                           ", this process " + uid_tag() + ")");
    }
    return meshstore::cuda::status();
  };
  return f;
}

}  // namespace meshstore::transports::cuda_ipc
