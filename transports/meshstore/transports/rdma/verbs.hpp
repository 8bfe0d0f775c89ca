#pragma once

// The ibverbs layer of the rdma transport (rdma_transport.cpp): the
// process's device, memory registrations (host and GPU), and reliable
// queue pairs connected from five numbers each side tells the other.
// Internal to the transport.

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "meshstore/status.hpp"
#include "meshstore/transports/one_sided.hpp"

namespace meshstore::transports::rdma {

// Bytes per work request, requests per post, queue pairs per client-volume
// pair and the depth of each queue.
constexpr std::size_t kChunk = std::size_t{1} << 20;
constexpr std::size_t kBatch = 16;
constexpr int kQueuePairs = 2;
constexpr int kDepth = 64;
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;

// The device, port and GID index this process uses, from the environment.
struct Choice {
  std::string device;  // "" = the first
  int port = 1;
  int gid_index = 0;
};

/// The choice the environment makes (MESHSTORE_RDMA_DEVICE, _PORT,
/// _GID_INDEX).
Choice choice();

// An opened device: context and protection domain, shared by every server
// and client of the process. Closed with its last user.
class Device {
 public:
  static Result<std::shared_ptr<Device>> shared() {
    static std::mutex mu;
    static std::weak_ptr<Device> cached;
    std::lock_guard<std::mutex> lock(mu);
    if (auto d = cached.lock()) return d;
    auto d = open();
    if (!d.ok()) return d.status();
    cached = *d;
    return d;
  }
  ~Device() {
    if (pd) ibv_dealloc_pd(pd);
    if (ctx) ibv_close_device(ctx);
  }

  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_port_attr port_attr{};
  ibv_gid gid{};
  Choice where;
  std::string name;

 private:
  static Result<std::shared_ptr<Device>> open();
};

/// Registers host memory with the device's protection domain.
Result<ibv_mr*> register_host(const Device& d, std::byte* data, std::size_t n, int access);
/// A registration cache over register_host; its keys are ibv_mr pointers.
std::unique_ptr<one_sided::RegistrationCache> make_registrations(std::shared_ptr<Device> d,
                                                                 int access = kAccess);
/// Whether registrations can be on-demand-paging ones for RC READ and WRITE.
bool supports_odp(const Device& d);
/// Registers GPU memory (GPUDirect RDMA): dma-buf, else nvidia-peermem.
Result<ibv_mr*> register_gpu(const Device& d, std::byte* data, std::size_t n);
inline const ibv_mr* mr_of(std::uint64_t key) { return reinterpret_cast<const ibv_mr*>(key); }

// One queue pair with its own completion queue.
struct QueuePair {
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  std::uint32_t psn = 0;
  ~QueuePair() {
    if (qp) ibv_destroy_qp(qp);
    if (cq) ibv_destroy_cq(cq);
  }
};

/// What one side tells the other of a queue pair: qpn, lid, psn, gid (two
/// halves), as five numbers.
std::vector<std::uint64_t> describe_qp(const Device& d, const QueuePair& q);
/// A queue pair in INIT.
Result<std::unique_ptr<QueuePair>> make_qp(const Device& d);
/// Connects `q` to the peer's queue pair `peer` (describe_qp's five numbers).
Status connect_qp(const Device& d, QueuePair& q, const std::uint64_t* peer);

}  // namespace meshstore::transports::rdma
