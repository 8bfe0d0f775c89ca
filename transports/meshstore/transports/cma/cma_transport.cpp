#include "meshstore/transports/cma/cma_transport.hpp"

#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "meshstore/transports/host_identity.hpp"
#include "meshstore/transports/one_sided.hpp"

namespace meshstore::transports::cma {
namespace {

// Pieces per system call (the kernel takes up to IOV_MAX iovecs).
constexpr std::size_t kBatch = 4;
// Bytes per piece, so a large transfer spreads over the copy threads.
constexpr std::size_t kChunk = std::size_t{8} << 20;
// Transfers below this run on the calling thread.
constexpr std::size_t kInlineBelow = std::size_t{1} << 20;

// The start time of process `pid` (field 22 of /proc/PID/stat), or "".
std::string start_time(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(f, stat);
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
  }
  return field;
}

// This process's pid namespace (the inode of /proc/self/ns/pid).
std::string pid_namespace() {
  char buf[128] = {0};
  const ssize_t n = ::readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
}

std::string uid_tag() { return std::to_string(::geteuid()); }

// What a cma endpoint says: "pidns=...;pid=...;start=...;uid=...".
struct Peer {
  std::string pidns, start, uid;
  pid_t pid = 0;
};

std::string encode_peer() {
  return "pidns=" + pid_namespace() + ";pid=" + std::to_string(::getpid()) +
         ";start=" + start_time(::getpid()) + ";uid=" + uid_tag();
}

Result<Peer> decode_peer(const std::string& address) {
  Peer p;
  std::istringstream in(address);
  std::string field;
  while (std::getline(in, field, ';')) {
    const auto eq = field.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = field.substr(0, eq), v = field.substr(eq + 1);
    if (k == "pidns") p.pidns = v;
    if (k == "pid") p.pid = static_cast<pid_t>(std::atol(v.c_str()));
    if (k == "start") p.start = v;
    if (k == "uid") p.uid = v;
  }
  if (p.pid <= 0 || p.start.empty() || p.uid.empty()) {
    return Status(Errc::invalid_argument, "cma client: endpoint '" + address + "' is malformed");
  }
  return p;
}

// The volume's side: describes regions by their address in this process.
class CmaServer final : public TransportServer {
 public:
  CmaServer() {
    // Lets clients of this user attach under kernel.yama.ptrace_scope 1
    // (the default on some distributions); harmless where Yama is absent.
    (void)::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    endpoint_.transport = "cma";
    endpoint_.address = encode_peer();
    endpoint_.host_id = host_identity();
  }
  std::string_view name() const noexcept override { return "cma"; }
  EndpointInfo endpoint() const override { return endpoint_; }
  Status describe(const Region& region, wire::RegionRef& ref) override {
    if (region.device() >= 0) return Status();  // GPU memory: cuda-ipc's to describe
    ref.described["cma"] = one_sided::describe(reinterpret_cast<std::uint64_t>(region.data()), 0);
    return Status();
  }
  void shutdown() override {}

 private:
  EndpointInfo endpoint_;
};

// The client's side: process_vm_readv / process_vm_writev.
class CmaTransport final : public Transport {
 public:
  CmaTransport(const TransportConfig& config, Peer peer)
      : config_(config), peer_(std::move(peer)) {}

  std::string_view name() const noexcept override { return "cma"; }
  Capabilities capabilities() const noexcept override {
    Capabilities c;
    c.one_sided = true;
    c.same_host_only = true;
    c.max_chunk_bytes = kChunk;
    return c;
  }
  Future<void> write(const wire::RegionRef& dst, std::uint64_t offset, const std::byte* src,
                     std::size_t n) override {
    return transfer(true, dst, offset, const_cast<std::byte*>(src), n);
  }
  Future<void> read(const wire::RegionRef& src, std::uint64_t offset, std::byte* dst,
                    std::size_t n) override {
    return transfer(false, src, offset, dst, n);
  }

 private:
  Future<void> transfer(bool write, const wire::RegionRef& ref, std::uint64_t offset,
                        std::byte* local, std::size_t n) {
    if (ref.device >= 0) {
      return make_error_future<void>(
          device_region_error(ref.region_id, ref.device, write ? "cma write" : "cma read"));
    }
    return transfer_host(write, ref, offset, local, n);
  }
  Future<void> transfer_host(bool write, const wire::RegionRef& ref, std::uint64_t offset,
                             std::byte* local, std::size_t n) {
    const char* what = write ? "cma write" : "cma read";
    auto pieces = one_sided::plan(ref, "cma", offset, local, n, kChunk, what);
    if (!pieces.ok()) return make_error_future<void>(pieces.status());
    const Peer peer = peer_;
    const std::uint64_t region = ref.region_id;
    return one_sided::run(std::move(pieces).value(), kBatch, kInlineBelow,
                          [peer, region, write, what](const one_sided::Piece* p, std::size_t k) {
                            return move(peer, region, write, what, p, k);
                          });
  }

  // One system call per batch; a short transfer continues where it stopped.
  static Status move(const Peer& peer, std::uint64_t region, bool write, const char* what,
                     const one_sided::Piece* pieces, std::size_t count) {
    std::vector<iovec> local(count), remote(count);
    std::size_t want = 0;
    for (std::size_t i = 0; i < count; ++i) {
      local[i] = {pieces[i].local, pieces[i].length};
      remote[i] = {reinterpret_cast<void*>(pieces[i].remote), pieces[i].length};
      want += pieces[i].length;
    }
    std::size_t done = 0, li = 0, ri = 0;
    while (done < want) {
      const ssize_t got = write ? ::process_vm_writev(peer.pid, local.data() + li, count - li,
                                                      remote.data() + ri, count - ri, 0)
                                : ::process_vm_readv(peer.pid, local.data() + li, count - li,
                                                     remote.data() + ri, count - ri, 0);
      if (got < 0) {
        if (errno == EINTR) continue;
        return error(peer, region, what, errno);
      }
      if (got == 0) return error(peer, region, what, EFAULT);
      done += static_cast<std::size_t>(got);
      // Advance both iovec arrays past `got` bytes (the pieces pair up).
      std::size_t left = static_cast<std::size_t>(got);
      while (left > 0 && li < count) {
        const std::size_t step = std::min(left, local[li].iov_len);
        local[li].iov_base = static_cast<char*>(local[li].iov_base) + step;
        local[li].iov_len -= step;
        remote[ri].iov_base = static_cast<char*>(remote[ri].iov_base) + step;
        remote[ri].iov_len -= step;
        left -= step;
        if (local[li].iov_len == 0) {
          ++li;
          ++ri;
        }
      }
    }
    return Status();
  }

  static Status error(const Peer& peer, std::uint64_t region, const char* what, int e) {
    const std::string where = std::string(what) + " of region " + std::to_string(region) +
                              " in process " + std::to_string(peer.pid);
    // A pid reused by another process reads as the volume gone.
    if (e == ESRCH || start_time(peer.pid) != peer.start) {
      return Status(Errc::unavailable, where + ": the volume's process is gone");
    }
    if (e == EPERM) {
      return Status(Errc::unavailable, where +
                                           ": not permitted (the volume runs as another user, or "
                                           "kernel.yama.ptrace_scope forbids attaching): " +
                                           std::strerror(e));
    }
    if (e == EFAULT) {
      return Status(Errc::not_found,
                    where + ": the memory is no longer mapped there (the region is gone)");
    }
    return Status(Errc::transport_error, where + ": " + std::strerror(e));
  }

  TransportConfig config_;
  Peer peer_;
};

}  // namespace

TransportFactory cma_factory() {
  TransportFactory f;
  f.name = "cma";
  f.priority = 18;
  f.capabilities.one_sided = true;
  f.capabilities.same_host_only = true;
  f.capabilities.max_chunk_bytes = kChunk;
  f.make_server = [](const ServerContext& ctx) -> Result<std::unique_ptr<TransportServer>> {
    (void)ctx;
    return std::unique_ptr<TransportServer>(std::make_unique<CmaServer>());
  };
  f.make_client = [](const ClientContext& ctx,
                     const EndpointInfo& ep) -> Result<std::unique_ptr<Transport>> {
    MESHSTORE_RETURN_IF_ERROR(ctx.config.validate());
    if (ep.transport != "cma") {
      return Status(Errc::invalid_argument, "cma client: endpoint is not a cma endpoint");
    }
    auto peer = decode_peer(ep.address);
    if (!peer.ok()) return peer.status();
    return std::unique_ptr<Transport>(std::make_unique<CmaTransport>(ctx.config, *peer));
  };
  f.can_serve = [](const EndpointInfo& ep) -> Status {
    MESHSTORE_RETURN_IF_ERROR(same_host(ep.host_id));
    auto peer = decode_peer(ep.address);
    if (!peer.ok()) return peer.status();
    if (peer->pidns != pid_namespace()) {
      return Status(Errc::unsupported, "the volume is in another pid namespace");
    }
    if (peer->uid != uid_tag()) {
      return Status(Errc::unsupported, "the volume runs as another user (uid " + peer->uid +
                                           ", this process " + uid_tag() + ")");
    }
    return Status();
  };
  return f;
}

}  // namespace meshstore::transports::cma
