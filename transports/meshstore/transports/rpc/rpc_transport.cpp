#include "meshstore/transports/rpc/rpc_transport.hpp"

#include <algorithm>
#include <cstring>

#include "meshstore/foreign_thread.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/transports/internal/wire_glue.hpp"

namespace meshstore::transports::rpc {
namespace {

using internal::from_caf_error;
using internal::to_caf_error;

// Recycles chunk buffers. In-process, CAF moves a chunk's vector from sender
// to receiver without copying, so the receiver can hand it back here and the
// next chunk reuses memory that is already faulted in (a fresh 64 MiB
// allocation costs tens of milliseconds in page faults). Bounded; thread-safe.
class ChunkPool {
 public:
  static ChunkPool& instance() {
    static ChunkPool* pool = new ChunkPool();  // never destroyed: used until exit
    return *pool;
  }
  /// An empty vector, with at least `n` bytes of capacity when one is free.
  std::vector<char> acquire(std::size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->capacity() >= n) {
        std::vector<char> v = std::move(*it);
        free_.erase(it);
        free_bytes_ -= v.capacity();
        return v;
      }
    }
    std::vector<char> v;
    v.reserve(n);
    return v;
  }
  void release(std::vector<char>&& v) {
    if (v.capacity() == 0) return;
    v.clear();
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() >= kMaxFree || free_bytes_ + v.capacity() > kMaxFreeBytes)
      return;  // freed now
    free_bytes_ += v.capacity();
    free_.push_back(std::move(v));
  }

 private:
  // At most 4 idle buffers and 256 MiB: the window of one transfer at the
  // default chunk size. Memory past that is freed at once.
  static constexpr std::size_t kMaxFree = 4;
  static constexpr std::size_t kMaxFreeBytes = std::size_t{256} << 20;
  std::mutex mu_;  // guards free_ and free_bytes_
  std::vector<std::vector<char>> free_;
  std::size_t free_bytes_ = 0;
};

rpc_endpoint_actor::behavior_type endpoint_impl(rpc_endpoint_actor::pointer self,
                                                std::shared_ptr<RegionTable> regions) {
  return {
      [=](write_atom, std::uint64_t id, std::uint64_t offset,
          std::vector<char>& bytes) -> caf::result<caf::ok_atom> {
        auto region = regions->checked(id, offset, bytes.size(), "rpc write");
        if (!region.ok()) return to_caf_error(region.status());
        std::memcpy((*region)->data() + offset, bytes.data(), bytes.size());
        ChunkPool::instance().release(std::move(bytes));
        return caf::ok_atom::value;
      },
      [=](read_atom, std::uint64_t id, std::uint64_t offset,
          std::uint64_t length) -> caf::result<std::vector<char>> {
        auto region = regions->checked(id, offset, length, "rpc read");
        if (!region.ok()) return to_caf_error(region.status());
        const auto* p = reinterpret_cast<const char*>((*region)->data() + offset);
        auto out = ChunkPool::instance().acquire(length);
        out.assign(p, p + length);
        return out;
      },
  };
}

class RpcServer final : public TransportServer {
 public:
  explicit RpcServer(const ServerContext& ctx)
      : endpoint_(ctx.system->spawn(endpoint_impl, ctx.regions)) {}
  ~RpcServer() override { shutdown(); }

  std::string_view name() const noexcept override { return "rpc"; }
  EndpointInfo endpoint() const override {
    EndpointInfo e;
    e.transport = "rpc";
    e.actor = caf::actor_cast<caf::strong_actor_ptr>(endpoint_);
    return e;
  }
  void shutdown() override {
    if (endpoint_) {
      caf::anon_send_exit(endpoint_, caf::exit_reason::user_shutdown);
      endpoint_ = nullptr;
    }
  }

 private:
  rpc_endpoint_actor endpoint_;
};

// One transfer: chunks go out with at most `window` in flight; a helper
// actor owns the bookkeeping so responses are handled one at a time.
struct Transfer {
  bool is_write = false;
  wire::RegionRef region;
  std::uint64_t offset = 0;
  std::byte* dst = nullptr;        // reads
  const std::byte* src = nullptr;  // writes
  std::size_t n = 0;
  std::size_t chunk = 0;
  int window = 1;
  std::chrono::milliseconds timeout{0};
  rpc_endpoint_actor endpoint;
  std::shared_ptr<Promise<void>> promise;
  // progress
  std::size_t next = 0;
  std::size_t done = 0;
  int in_flight = 0;
  bool finished = false;
};

void pump(caf::event_based_actor* self, const std::shared_ptr<Transfer>& t);

void fail(caf::event_based_actor* self, const std::shared_ptr<Transfer>& t, const caf::error& e) {
  if (t->finished) return;
  t->finished = true;
  const char* op = t->is_write ? "rpc write" : "rpc read";
  auto s = from_caf_error(e, std::string(op) + " of region " + std::to_string(t->region.region_id));
  if (s.code() == Errc::internal) s = Status(Errc::transport_error, s.message());
  t->promise->set_error(std::move(s));
  self->quit();
}

void chunk_done(caf::event_based_actor* self, const std::shared_ptr<Transfer>& t, std::size_t len) {
  if (t->finished) return;
  --t->in_flight;
  t->done += len;
  if (t->done == t->n) {
    t->finished = true;
    t->promise->set_value();
    self->quit();
    return;
  }
  pump(self, t);
}

void pump(caf::event_based_actor* self, const std::shared_ptr<Transfer>& t) {
  while (!t->finished && t->in_flight < t->window && t->next < t->n) {
    const std::size_t pos = t->next;
    const std::size_t len = std::min(t->chunk, t->n - pos);
    t->next += len;
    ++t->in_flight;
    if (t->is_write) {
      const auto* p = reinterpret_cast<const char*>(t->src + pos);
      auto chunk = ChunkPool::instance().acquire(len);
      chunk.assign(p, p + len);
      self->request(t->endpoint, t->timeout, write_atom::value, t->region.region_id,
                    t->offset + pos, std::move(chunk))
          .then([=](caf::ok_atom) { chunk_done(self, t, len); },
                [=](caf::error& e) { fail(self, t, e); });
    } else {
      self->request(t->endpoint, t->timeout, read_atom::value, t->region.region_id, t->offset + pos,
                    static_cast<std::uint64_t>(len))
          .then(
              [=](std::vector<char>& bytes) {
                if (t->finished) return;
                if (bytes.size() != len) {
                  fail(self, t,
                       to_caf_error(Status(Errc::protocol_error,
                                           "rpc read: asked " + std::to_string(len) +
                                               " bytes, got " + std::to_string(bytes.size()))));
                  return;
                }
                std::memcpy(t->dst + pos, bytes.data(), len);
                ChunkPool::instance().release(std::move(bytes));
                chunk_done(self, t, len);
              },
              [=](caf::error& e) { fail(self, t, e); });
    }
  }
}

class RpcTransport final : public Transport {
 public:
  RpcTransport(const ClientContext& ctx, rpc_endpoint_actor endpoint)
      : system_(ctx.system), config_(ctx.config), endpoint_(std::move(endpoint)) {}

  std::string_view name() const noexcept override { return "rpc"; }
  Capabilities capabilities() const noexcept override {
    Capabilities c;
    c.max_chunk_bytes = config_.rpc_chunk_bytes;
    return c;
  }
  Future<void> write(const wire::RegionRef& dst, std::uint64_t offset, const std::byte* src,
                     std::size_t n) override {
    auto t = make(dst, offset, n, true);
    t->src = src;
    return start(t);
  }
  Future<void> read(const wire::RegionRef& src, std::uint64_t offset, std::byte* dst,
                    std::size_t n) override {
    auto t = make(src, offset, n, false);
    t->dst = dst;
    return start(t);
  }

 private:
  std::shared_ptr<Transfer> make(const wire::RegionRef& region, std::uint64_t offset, std::size_t n,
                                 bool is_write) {
    auto t = std::make_shared<Transfer>();
    t->is_write = is_write;
    t->region = region;
    t->offset = offset;
    t->n = n;
    t->chunk = config_.rpc_chunk_bytes;
    t->window = config_.rpc_chunks_in_flight;
    t->timeout = config_.request_timeout;
    t->endpoint = endpoint_;
    t->promise = std::make_shared<Promise<void>>(
        Status(Errc::shutdown, std::string(is_write ? "rpc write" : "rpc read") + " of region " +
                                   std::to_string(region.region_id) +
                                   " stopped: the actor system is shutting down"));
    return t;
  }

  Future<void> start(const std::shared_ptr<Transfer>& t) {
    auto fut = t->promise->future();
    if (auto s = check_range(t->region.region_id, t->region.nbytes, t->offset, t->n,
                             t->is_write ? "rpc write" : "rpc read");
        !s.ok()) {
      t->promise->set_error(std::move(s));
      return fut;
    }
    if (t->n == 0) {
      t->promise->set_value();
      return fut;
    }
    // Any thread may start a transfer (a GPU piece starts one on a copy
    // engine thread).
    ForeignThreadGuard guard;
    system_->spawn([t](caf::event_based_actor* self) {
      // A dead endpoint (its volume's process died) fails the transfer at
      // once; CAF alone would wait for every chunk's timeout.
      self->monitor(t->endpoint);
      self->set_down_handler([self, t](caf::down_msg& msg) {
        fail(self, t,
             to_caf_error(Status(Errc::unavailable, "the volume's rpc endpoint went down (" +
                                                        caf::to_string(msg.reason) + ")")));
      });
      pump(self, t);
    });
    return fut;
  }

  caf::actor_system* system_;
  TransportConfig config_;
  rpc_endpoint_actor endpoint_;
};

}  // namespace

TransportFactory rpc_factory() {
  TransportFactory f;
  f.name = "rpc";
  f.priority = 0;
  f.capabilities.max_chunk_bytes = TransportConfig{}.rpc_chunk_bytes;
  f.make_server = [](const ServerContext& ctx) -> Result<std::unique_ptr<TransportServer>> {
    if (!ctx.system || !ctx.regions)
      return Status(Errc::invalid_argument, "rpc server: incomplete context");
    return std::unique_ptr<TransportServer>(std::make_unique<RpcServer>(ctx));
  };
  f.make_client = [](const ClientContext& ctx,
                     const EndpointInfo& ep) -> Result<std::unique_ptr<Transport>> {
    if (!ctx.system) return Status(Errc::invalid_argument, "rpc client: no actor system");
    MESHSTORE_RETURN_IF_ERROR(ctx.config.validate());
    if (ep.transport != "rpc" || !ep.actor) {
      return Status(Errc::invalid_argument, "rpc client: endpoint is not an rpc endpoint");
    }
    auto hdl = caf::actor_cast<rpc_endpoint_actor>(ep.actor);
    return std::unique_ptr<Transport>(std::make_unique<RpcTransport>(ctx, std::move(hdl)));
  };
  return f;
}

}  // namespace meshstore::transports::rpc
