// The ibverbs layer of the rdma transport.

#include "meshstore/transports/rdma/verbs.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

#include "meshstore/internal/cuda_copy.hpp"

namespace meshstore::transports::rdma {

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

}  // namespace

Choice choice() {
  Choice c;
  c.device = env_or("MESHSTORE_RDMA_DEVICE", "");
  c.port = std::atoi(env_or("MESHSTORE_RDMA_PORT", "1").c_str());
  c.gid_index = std::atoi(env_or("MESHSTORE_RDMA_GID_INDEX", "0").c_str());
  return c;
}

Result<std::shared_ptr<Device>> Device::open() {
  const Choice c = choice();
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  const int e = errno;
  if (!list || n == 0) {
    if (list) ibv_free_device_list(list);
    return Status(Errc::unavailable, std::string("no RDMA device: ibv_get_device_list found none") +
                                         (e ? " (" + std::string(std::strerror(e)) + ")" : ""));
  }
  ibv_device* dev = nullptr;
  for (int i = 0; i < n && !dev; ++i) {
    if (c.device.empty() || c.device == ibv_get_device_name(list[i])) dev = list[i];
  }
  if (!dev) {
    ibv_free_device_list(list);
    return Status(Errc::unavailable, "no RDMA device named '" + c.device + "'");
  }
  auto d = std::make_shared<Device>();
  d->where = c;
  d->name = ibv_get_device_name(dev);
  d->ctx = ibv_open_device(dev);
  ibv_free_device_list(list);
  if (!d->ctx) return Status(Errc::unavailable, "rdma: cannot open device '" + d->name + "'");
  if (ibv_query_port(d->ctx, static_cast<std::uint8_t>(c.port), &d->port_attr) != 0) {
    return Status(Errc::unavailable,
                  "rdma: cannot query port " + std::to_string(c.port) + " of '" + d->name + "'");
  }
  if (d->port_attr.state != IBV_PORT_ACTIVE) {
    return Status(Errc::unavailable, "rdma: port " + std::to_string(c.port) + " of '" + d->name +
                                         "' is not active (" +
                                         ibv_port_state_str(d->port_attr.state) + ")");
  }
  if (ibv_query_gid(d->ctx, static_cast<std::uint8_t>(c.port), c.gid_index, &d->gid) != 0) {
    return Status(Errc::unavailable, "rdma: no GID " + std::to_string(c.gid_index) + " on port " +
                                         std::to_string(c.port) + " of '" + d->name + "'");
  }
  d->pd = ibv_alloc_pd(d->ctx);
  if (!d->pd) return Status(Errc::unavailable, "rdma: cannot allocate a protection domain");
  return d;
}

// Memory registrations of the device's protection domain, by buffer; the
// cache's key is the ibv_mr pointer (lkey and rkey live in it).
Result<ibv_mr*> register_host(const Device& d, std::byte* data, std::size_t n, int access) {
  ibv_mr* mr = ibv_reg_mr(d.pd, data, n, access);
  if (!mr) {
    const int e = errno;
    return Status(Errc::out_of_capacity, "rdma: cannot register " + std::to_string(n) + " bytes (" +
                                             std::strerror(e) +
                                             "; raise the memlock limit: ulimit -l unlimited)");
  }
  return mr;
}

std::unique_ptr<one_sided::RegistrationCache> make_registrations(std::shared_ptr<Device> d,
                                                                 int access) {
  return std::make_unique<one_sided::RegistrationCache>(
      [d, access](std::byte* data, std::size_t n) -> Result<std::uint64_t> {
        auto mr = register_host(*d, data, n, access);
        if (!mr.ok()) return mr.status();
        return reinterpret_cast<std::uint64_t>(*mr);
      },
      [d](std::uint64_t key) { ibv_dereg_mr(reinterpret_cast<ibv_mr*>(key)); });
}

// Whether the device's memory registrations can be on-demand-paging ones
// for RC RDMA READ and WRITE: such a registration follows the process's
// page tables, so it stays right when the memory behind an address
// changes (a buffer freed and another allocated at the same address).
bool supports_odp(const Device& d) {
  ibv_device_attr_ex attr{};
  if (ibv_query_device_ex(d.ctx, nullptr, &attr) != 0) return false;
  const std::uint32_t need = IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_WRITE;
  return (attr.odp_caps.general_caps & IBV_ODP_SUPPORT) != 0 &&
         (attr.odp_caps.per_transport_caps.rc_odp_caps & need) == need;
}

// GPU memory (GPUDirect RDMA): exported by the CUDA driver as a dma-buf and
// registered with ibv_reg_dmabuf_mr; where that fails, ibv_reg_mr of the
// device address, which works where the nvidia-peermem module is loaded.
Result<ibv_mr*> register_gpu(const Device& d, std::byte* data, std::size_t n) {
  std::string why;
  std::uint64_t offset = 0;
  auto fd = internal::cuda::export_dmabuf(data, n, &offset);
  if (fd.ok()) {
    errno = 0;
    ibv_mr* mr =
        ibv_reg_dmabuf_mr(d.pd, offset, n, reinterpret_cast<std::uint64_t>(data), *fd, kAccess);
    const int e = errno;
    ::close(*fd);  // the registration holds the buffer
    if (mr) return mr;
    why = std::string("ibv_reg_dmabuf_mr: ") + std::strerror(e);
  } else {
    why = fd.status().message();
  }
  errno = 0;
  if (ibv_mr* mr = ibv_reg_mr(d.pd, data, n, kAccess)) return mr;
  why += std::string("; ibv_reg_mr of the GPU address (needs the nvidia-peermem module): ") +
         std::strerror(errno);
  return Status(Errc::unsupported, "GPUDirect RDMA cannot register " + std::to_string(n) +
                                       " bytes of GPU memory with '" + d.name + "': " + why);
}

// What one side tells the other of a queue pair: qpn, lid, psn, gid (two
// halves), as five numbers.
std::vector<std::uint64_t> describe_qp(const Device& d, const QueuePair& q) {
  std::uint64_t hi = 0, lo = 0;
  std::memcpy(&hi, d.gid.raw, 8);
  std::memcpy(&lo, d.gid.raw + 8, 8);
  return {q.qp->qp_num, d.port_attr.lid, q.psn, hi, lo};
}

Result<std::unique_ptr<QueuePair>> make_qp(const Device& d) {
  auto q = std::make_unique<QueuePair>();
  q->cq = ibv_create_cq(d.ctx, kDepth, nullptr, nullptr, 0);
  if (!q->cq) return Status(Errc::unavailable, "rdma: cannot create a completion queue");
  ibv_qp_init_attr init{};
  init.send_cq = q->cq;
  init.recv_cq = q->cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = kDepth;
  init.cap.max_recv_wr = 1;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  q->qp = ibv_create_qp(d.pd, &init);
  if (!q->qp) return Status(Errc::unavailable, "rdma: cannot create a queue pair");
  static std::mt19937 rng(std::random_device{}());
  q->psn = rng() & 0xffffff;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = static_cast<std::uint8_t>(d.where.port);
  a.qp_access_flags = kAccess;
  if (ibv_modify_qp(q->qp, &a,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
    return Status(Errc::unavailable, "rdma: queue pair to INIT failed");
  }
  return q;
}

// Connects `q` to the peer's queue pair `peer` (describe_qp's five numbers).
Status connect_qp(const Device& d, QueuePair& q, const std::uint64_t* peer) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = d.port_attr.active_mtu;
  a.dest_qp_num = static_cast<std::uint32_t>(peer[0]);
  a.rq_psn = static_cast<std::uint32_t>(peer[2]);
  a.max_dest_rd_atomic = 16;
  a.min_rnr_timer = 12;
  a.ah_attr.dlid = static_cast<std::uint16_t>(peer[1]);
  a.ah_attr.port_num = static_cast<std::uint8_t>(d.where.port);
  if (d.port_attr.link_layer == IBV_LINK_LAYER_ETHERNET) {  // RoCE: routed by GID
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, &peer[3], 8);
    std::memcpy(a.ah_attr.grh.dgid.raw + 8, &peer[4], 8);
    a.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(d.where.gid_index);
    a.ah_attr.grh.hop_limit = 64;
  }
  if (ibv_modify_qp(q.qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
    return Status(Errc::unavailable, "rdma: queue pair to RTR failed");
  }
  ibv_qp_attr r{};
  r.qp_state = IBV_QPS_RTS;
  r.timeout = 14;
  r.retry_cnt = 7;
  r.rnr_retry = 7;
  r.sq_psn = q.psn;
  r.max_rd_atomic = 16;
  if (ibv_modify_qp(q.qp, &r,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
    return Status(Errc::unavailable, "rdma: queue pair to RTS failed");
  }
  return Status();
}

}  // namespace meshstore::transports::rdma
