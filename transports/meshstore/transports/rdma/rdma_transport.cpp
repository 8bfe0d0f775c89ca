#include "meshstore/transports/rdma/rdma_transport.hpp"

#include <infiniband/verbs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include "meshstore/foreign_thread.hpp"
#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/tensor.hpp"
#include "meshstore/transports/host_identity.hpp"
#include "meshstore/transports/one_sided.hpp"
#include "meshstore/transports/rdma/verbs.hpp"

namespace meshstore::transports::rdma {
namespace {

using rdma_connect_atom = caf::atom_constant<caf::atom("rdma_conn")>;

// -- the volume's side -------------------------------------------------------------

// Answers a client's queue pairs with its own, connected to them. The
// responder's queue pairs need no polling: READ and WRITE complete in the
// NIC. They live until the server shuts down.
struct ServerState {
  std::shared_ptr<Device> device;
  std::mutex mu;  // guards qps
  std::deque<std::unique_ptr<QueuePair>> qps;
};

caf::behavior connector(caf::event_based_actor* self, std::shared_ptr<ServerState> st) {
  (void)self;
  return {
      [st](rdma_connect_atom,
           const std::vector<std::uint64_t>& theirs) -> caf::result<std::vector<std::uint64_t>> {
        if (theirs.empty() || theirs.size() % 5 != 0) {
          return caf::make_error(caf::sec::invalid_argument, "rdma_connect: malformed");
        }
        std::vector<std::uint64_t> ours;
        std::lock_guard<std::mutex> lock(st->mu);
        for (std::size_t i = 0; i < theirs.size(); i += 5) {
          auto q = make_qp(*st->device);
          if (!q.ok()) return caf::make_error(caf::sec::runtime_error, q.status().message());
          if (auto s = connect_qp(*st->device, **q, &theirs[i]); !s.ok()) {
            return caf::make_error(caf::sec::runtime_error, s.message());
          }
          auto mine = describe_qp(*st->device, **q);
          ours.insert(ours.end(), mine.begin(), mine.end());
          st->qps.push_back(std::move(q).value());
        }
        return ours;
      },
  };
}

class RdmaServer final : public TransportServer {
 public:
  RdmaServer(caf::actor_system& sys, std::shared_ptr<Device> device)
      : state_(std::make_shared<ServerState>()), registrations_(make_registrations(device)) {
    state_->device = std::move(device);
    actor_ = sys.spawn(connector, state_);
    endpoint_.transport = "rdma";
    endpoint_.actor = caf::actor_cast<caf::strong_actor_ptr>(actor_);
    endpoint_.host_id = host_identity();
    endpoint_.address = state_->device->name;
  }
  std::string_view name() const noexcept override { return "rdma"; }
  EndpointInfo endpoint() const override { return endpoint_; }
  Status describe(const Region& region, wire::RegionRef& ref) override {
    if (region.size() == 0) return Status();
    auto key = registrations_->key_for(region.data(), region.size());
    if (!key.ok()) return key.status();
    ref.described["rdma"] =
        one_sided::describe(reinterpret_cast<std::uint64_t>(region.data()), mr_of(*key)->rkey);
    return Status();
  }
  void forget(const std::byte* data) override {
    registrations_->forget(const_cast<std::byte*>(data));
  }
  bool registers_memory() const noexcept override { return true; }
  void shutdown() override {
    if (actor_) caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown);
    actor_ = nullptr;
    endpoint_.actor = nullptr;
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->qps.clear();
  }

 private:
  std::shared_ptr<ServerState> state_;
  std::unique_ptr<one_sided::RegistrationCache> registrations_;
  caf::actor actor_;
  EndpointInfo endpoint_;
};

// -- the client's side ---------------------------------------------------------------

class RdmaTransport final : public Transport {
 public:
  RdmaTransport(const ClientContext& ctx, std::shared_ptr<Device> device, EndpointInfo ep)
      : system_(ctx.system),
        config_(ctx.config),
        device_(std::move(device)),
        endpoint_(std::move(ep)),
        odp_(supports_odp(*device_)),
        gpu_direct_(gpudirect_availability().ok()) {
    if (odp_) registrations_ = make_registrations(device_, kAccess | IBV_ACCESS_ON_DEMAND);
    static std::once_flag said;
    std::call_once(said, [this] {
      auto log = log::get("rdma");
      if (!odp_) {
        log->info(
            "'{}' has no on-demand paging: the caller's memory is registered for each "
            "transfer",
            device_->name);
      }
      if (meshstore::cuda::status().ok()) {
        const Status g = gpudirect_availability();
        if (g.ok()) {
          log->info("GPUDirect RDMA on '{}': GPU tensors move without host staging", device_->name);
        } else {
          log->info("GPU tensors stage through host memory over rdma: {}", g.message());
        }
      }
    });
  }
  ~RdmaTransport() override {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.clear();
    qps_.clear();
  }

  std::string_view name() const noexcept override { return "rdma"; }
  Capabilities capabilities() const noexcept override {
    Capabilities c;
    c.one_sided = true;
    c.max_chunk_bytes = kChunk;
    c.device_copies = gpu_direct_;  // else the client stages GPU memory
    return c;
  }
  Future<void> write(const wire::RegionRef& dst, std::uint64_t offset, const std::byte* src,
                     std::size_t n) override {
    return transfer(IBV_WR_RDMA_WRITE, dst, offset, const_cast<std::byte*>(src), n);
  }
  Future<void> read(const wire::RegionRef& src, std::uint64_t offset, std::byte* dst,
                    std::size_t n) override {
    return transfer(IBV_WR_RDMA_READ, src, offset, dst, n);
  }

 private:
  Future<void> transfer(ibv_wr_opcode op, const wire::RegionRef& ref, std::uint64_t offset,
                        std::byte* local, std::size_t n) {
    const char* what = op == IBV_WR_RDMA_WRITE ? "rdma write" : "rdma read";
    auto pieces = one_sided::plan(ref, "rdma", offset, local, n, kChunk, what);
    if (!pieces.ok()) return make_error_future<void>(pieces.status());
    if (pieces->empty()) return make_ready_future();
    // The caller's buffer: with on-demand paging registered once (cached
    // by buffer); else registered for this transfer only, since a cached
    // registration pins the pages the buffer had then, and a buffer freed
    // and allocated again at the same address has other pages. GPU memory
    // is registered for each transfer too.
    std::uint32_t lkey = 0;
    std::shared_ptr<ibv_mr> scoped;
    if (internal::cuda::is_device_pointer(local)) {
      if (!gpu_direct_) {
        return make_error_future<void>(
            Status(Errc::unsupported, std::string(what) + ": the buffer is GPU memory and " +
                                          gpudirect_availability().message()));
      }
      auto mr = register_gpu(*device_, local, n);
      if (!mr.ok()) return make_error_future<void>(mr.status().with_context(what));
      scoped.reset(*mr, [](ibv_mr* m) { ibv_dereg_mr(m); });
      lkey = scoped->lkey;
    } else if (registrations_) {
      auto key = registrations_->key_for(local, n);
      if (!key.ok()) return make_error_future<void>(key.status());
      lkey = mr_of(*key)->lkey;
    } else {
      auto mr = register_host(*device_, local, n, kAccess);
      if (!mr.ok()) return make_error_future<void>(mr.status().with_context(what));
      scoped.reset(*mr, [](ibv_mr* m) { ibv_dereg_mr(m); });
      lkey = scoped->lkey;
    }
    const std::uint64_t region = ref.region_id;
    // Always on the copy engine's threads: connecting blocks, polling spins.
    auto moved =
        one_sided::run(std::move(pieces).value(), kBatch, 0,
                       [this, op, lkey, region, what](const one_sided::Piece* p, std::size_t k) {
                         return post_and_wait(op, lkey, region, what, p, k);
                       });
    if (!scoped) return moved;
    // Deregistered once every batch is done (run() completes only then).
    return moved.then([scoped] {});
  }

  // A connected queue pair for this batch (connecting them on first use).
  Result<QueuePair*> acquire() {
    std::unique_lock<std::mutex> lock(mu_);
    if (qps_.empty()) {
      lock.unlock();
      MESHSTORE_RETURN_IF_ERROR(connect());
      lock.lock();
    }
    cv_.wait(lock, [&] { return !idle_.empty(); });
    QueuePair* q = idle_.front();
    idle_.pop_front();
    return q;
  }
  void release(QueuePair* q) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      idle_.push_back(q);
    }
    cv_.notify_one();
  }

  // Creates kQueuePairs queue pairs and connects them to the volume's,
  // exchanging their descriptions through the volume's server actor.
  Status connect() {
    std::lock_guard<std::mutex> once(connect_mu_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!qps_.empty()) return Status();
    }
    std::vector<std::unique_ptr<QueuePair>> made;
    std::vector<std::uint64_t> mine;
    for (int i = 0; i < kQueuePairs; ++i) {
      auto q = make_qp(*device_);
      if (!q.ok()) return q.status();
      auto d = describe_qp(*device_, **q);
      mine.insert(mine.end(), d.begin(), d.end());
      made.push_back(std::move(q).value());
    }
    auto server = caf::actor_cast<caf::actor>(endpoint_.actor);
    if (!server || !system_)
      return Status(Errc::unavailable, "rdma: the volume's endpoint is gone");
    std::vector<std::uint64_t> theirs;
    Status failed;
    {
      ForeignThreadGuard guard;  // before self: it goes after self
      caf::scoped_actor self{*system_};
      self->request(server, config_.request_timeout, rdma_connect_atom::value, mine)
          .receive([&](const std::vector<std::uint64_t>& r) { theirs = r; },
                   [&](caf::error& e) {
                     failed = Status(
                         Errc::unavailable,
                         "rdma: connecting queue pairs to the volume failed: " + caf::to_string(e));
                   });
    }
    if (!failed.ok()) return failed;
    if (theirs.size() != mine.size()) {
      return Status(Errc::protocol_error, "rdma: the volume answered " +
                                              std::to_string(theirs.size() / 5) +
                                              " queue pairs for " + std::to_string(made.size()));
    }
    for (std::size_t i = 0; i < made.size(); ++i) {
      MESHSTORE_RETURN_IF_ERROR(connect_qp(*device_, *made[i], &theirs[5 * i]));
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& q : made) {
      idle_.push_back(q.get());
      qps_.push_back(std::move(q));
    }
    cv_.notify_all();
    return Status();
  }

  // Posts one batch of work requests (only the last signalled) and polls
  // its completion queue until they are done.
  Status post_and_wait(ibv_wr_opcode op, std::uint32_t lkey, std::uint64_t region, const char* what,
                       const one_sided::Piece* p, std::size_t k) {
    auto q = acquire();
    if (!q.ok()) return q.status();
    std::vector<ibv_sge> sge(k);
    std::vector<ibv_send_wr> wr(k);
    for (std::size_t i = 0; i < k; ++i) {
      sge[i].addr = reinterpret_cast<std::uint64_t>(p[i].local);
      sge[i].length = static_cast<std::uint32_t>(p[i].length);
      sge[i].lkey = lkey;
      wr[i] = ibv_send_wr{};
      wr[i].wr_id = i;
      wr[i].sg_list = &sge[i];
      wr[i].num_sge = 1;
      wr[i].opcode = op;
      wr[i].send_flags = i + 1 == k ? IBV_SEND_SIGNALED : 0;
      wr[i].wr.rdma.remote_addr = p[i].remote;
      wr[i].wr.rdma.rkey = static_cast<std::uint32_t>(p[i].key);
      wr[i].next = i + 1 < k ? &wr[i + 1] : nullptr;
    }
    ibv_send_wr* bad = nullptr;
    Status s;
    if (ibv_post_send((*q)->qp, wr.data(), &bad) != 0) {
      s = Status(Errc::transport_error, std::string(what) + " of region " + std::to_string(region) +
                                            ": ibv_post_send failed");
    } else {
      const auto deadline = std::chrono::steady_clock::now() + config_.request_timeout;
      for (;;) {
        ibv_wc wc{};
        const int got = ibv_poll_cq((*q)->cq, 1, &wc);
        if (got < 0) {
          s = Status(Errc::transport_error, std::string(what) + ": ibv_poll_cq failed");
          break;
        }
        if (got == 1) {
          if (wc.status != IBV_WC_SUCCESS) {
            s = Status(wc.status == IBV_WC_REM_ACCESS_ERR ? Errc::not_found : Errc::transport_error,
                       std::string(what) + " of region " + std::to_string(region) +
                           ": completion failed: " + ibv_wc_status_str(wc.status));
          }
          break;
        }
        if (std::chrono::steady_clock::now() > deadline) {
          s = Status(Errc::timeout, std::string(what) + " of region " + std::to_string(region) +
                                        ": no completion within the request timeout");
          break;
        }
      }
    }
    release(*q);
    return s;
  }

  caf::actor_system* system_;
  TransportConfig config_;
  std::shared_ptr<Device> device_;
  EndpointInfo endpoint_;
  const bool odp_;         // the device registers on-demand-paging memory
  const bool gpu_direct_;  // GPU memory registers here (GPUDirect RDMA)
  std::unique_ptr<one_sided::RegistrationCache> registrations_;  // with odp_ only
  std::mutex connect_mu_;
  std::mutex mu_;  // guards qps_, idle_
  std::condition_variable cv_;
  std::vector<std::unique_ptr<QueuePair>> qps_;
  std::deque<QueuePair*> idle_;
};

}  // namespace

Status gpudirect_availability() {
  static const Status status = []() -> Status {
    MESHSTORE_RETURN_IF_ERROR(availability());
    MESHSTORE_RETURN_IF_ERROR(meshstore::cuda::status());
    auto d = Device::shared();
    if (!d.ok()) return d.status();
    constexpr std::size_t kProbe = std::size_t{2} << 20;
    auto mem = internal::cuda::device_alloc(kProbe, 0);
    if (!mem.ok()) return mem.status();
    auto mr = register_gpu(**d, mem->get(), kProbe);
    if (!mr.ok()) return mr.status();
    ibv_dereg_mr(*mr);
    return Status();
  }();
  return status;
}

Status availability() {
  static const Status status = [] {
    auto d = Device::shared();
    return d.ok() ? Status() : d.status();
  }();
  return status;
}

TransportFactory rdma_factory() {
  TransportFactory f;
  f.name = "rdma";
  f.priority = 16;
  f.capabilities.one_sided = true;
  f.capabilities.max_chunk_bytes = kChunk;
  f.available = [] { return availability(); };
  f.gpu_direct = [] { return gpudirect_availability(); };
  f.make_server = [](const ServerContext& ctx) -> Result<std::unique_ptr<TransportServer>> {
    if (!ctx.system) return Status(Errc::invalid_argument, "rdma server: incomplete context");
    auto d = Device::shared();
    if (!d.ok()) return d.status();
    return std::unique_ptr<TransportServer>(std::make_unique<RdmaServer>(*ctx.system, *d));
  };
  f.make_client = [](const ClientContext& ctx,
                     const EndpointInfo& ep) -> Result<std::unique_ptr<Transport>> {
    MESHSTORE_RETURN_IF_ERROR(ctx.config.validate());
    if (ep.transport != "rdma" || !ep.actor) {
      return Status(Errc::invalid_argument, "rdma client: endpoint is not an rdma endpoint");
    }
    auto d = Device::shared();
    if (!d.ok()) return d.status();
    return std::unique_ptr<Transport>(std::make_unique<RdmaTransport>(ctx, *d, ep));
  };
  // On one host shm and cma rank higher; forced, rdma runs there too (the
  // NIC loops back), which is how its tests run on one machine.
  f.can_serve = [](const EndpointInfo&) -> Status { return availability(); };
  return f;
}

}  // namespace meshstore::transports::rdma
