#pragma once

// The transport contract: how payload bytes move between a client and a
// storage volume. Every transport (rpc now; shm, tcp, cma, rdma, cuda later)
// implements the same two halves: a TransportServer that lives with a volume
// and exposes its regions, and a Transport that a client uses to write into
// and read from those regions. Control (which region, when it is valid)
// travels in actor messages; a transport only moves bytes.

#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "meshstore/future.hpp"
#include "meshstore/transports/capabilities.hpp"
#include "meshstore/transports/region.hpp"
#include "meshstore/transports/wire/region_ref.hpp"

namespace meshstore::transports {

/// How a client reaches one transport of one volume. CAF-native (it may hold
/// an actor handle), so it is inspected field by field, not as Protobuf.
struct EndpointInfo {
  /// The transport's registered name, for example "rpc".
  std::string transport;
  /// The endpoint actor, for transports that have one.
  caf::strong_actor_ptr actor;
  /// Transport-specific address (host:port, segment prefix, ...).
  std::string address;
  /// The host identity of the volume's process (host_identity()); transports
  /// that work only on one host compare it with the client's.
  std::string host_id;
  /// A per-server secret a client presents when it opens a connection (tcp);
  /// it travels only in control messages.
  std::string secret;
  /// The key a client seals its records with when the server encrypts
  /// (tcp with TransportConfig::tcp_encrypt; empty otherwise); it travels
  /// only in control messages.
  std::string key;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EndpointInfo& x) {
  return f(caf::meta::type_name("meshstore::transports::EndpointInfo"), x.transport, x.actor,
           x.address, x.host_id, x.secret, x.key);
}

/// Tunables shared by every transport.
struct TransportConfig {
  /// Largest rpc chunk (one CAF message). Must stay far below CAF's 4 GiB
  /// message limit; validated to [4 KiB, 1 GiB].
  std::size_t rpc_chunk_bytes = std::size_t{64} << 20;
  /// rpc chunks in flight per transfer.
  int rpc_chunks_in_flight = 4;
  /// Deadline of each request a transport makes.
  std::chrono::milliseconds request_timeout{30000};
  /// tcp: connections (streams) per client-volume pair; a large transfer
  /// is spread over them. In [1, 16].
  int tcp_streams = 2;
  /// tcp: bytes per request on one stream; in [64 KiB, 1 GiB].
  std::size_t tcp_chunk_bytes = std::size_t{16} << 20;
  /// tcp: a server seals every byte of its connections with AES-256-GCM
  /// (requests, replies and payloads) under a key it hands out in its
  /// endpoint, and refuses clients that do not; clients follow the server.
  bool tcp_encrypt = false;
  /// tcp: how long each end of a small-operations connection (SmallOps)
  /// spins for the next record before it sleeps in the kernel, as the shm
  /// rings' ends do: the server after each request, the client after
  /// sending one (StoreOptions::transport.fast_path_spin). In [0, 1 s].
  std::chrono::microseconds small_ops_spin{50};
  /// shm: segments a client keeps mapped (least recently used unmapped
  /// first); in [1, 60000].
  int shm_max_mappings = 4096;
  /// shm: copies of at least this many bytes are split over the copy
  /// threads; in [4 KiB, 1 GiB].
  std::size_t shm_parallel_copy_bytes = std::size_t{8} << 20;

  /// Checks the ranges above; Errc::invalid_argument names the bad field.
  Status validate() const;
};

/// What a volume gives its transport servers.
struct ServerContext {
  caf::actor_system* system = nullptr;
  std::shared_ptr<RegionTable> regions;
  TransportConfig config;
  std::string volume_id;
  /// The interface network transports (tcp) listen on: the one the store's
  /// control plane uses. Default loopback.
  std::string bind_host = "127.0.0.1";
};

/// What a client gives the transports it creates.
struct ClientContext {
  caf::actor_system* system = nullptr;
  TransportConfig config;
};

/// The largest request or reply of a small operation (SmallOps).
inline constexpr std::size_t kMaxSmallOpBytes = std::size_t{1} << 20;

/// What a volume answers to a small-operation request (the fast path's
/// protocol, protocol/fast_get.hpp): called on the transport's
/// thread for the connection, one request at a time per connection. It
/// must answer every request (errors are encoded in the reply).
using SmallOpHandler =
    std::function<std::vector<std::byte>(const std::byte* request, std::size_t n)>;

/// A client's request/reply channel for small operations beside a
/// transport's bulk bytes: the fast path across hosts (issue 26), over a
/// connection of its own. One request at a time: the caller serializes.
class SmallOps {
 public:
  virtual ~SmallOps() = default;
  /// Sends the `n` bytes at `request` and answers the volume's reply.
  /// Errc::timeout when none came by `deadline`, Errc::unavailable when the
  /// volume closed the connection (it stopped, or its process died),
  /// Errc::protocol_error for a malformed reply, the volume's error when
  /// it refused the request (too large, no handler). After an error other
  /// than the volume's refusal the channel is unusable: open another.
  virtual Result<std::vector<std::byte>> exchange(
      const std::byte* request, std::size_t n, std::chrono::steady_clock::time_point deadline) = 0;
};

/// The volume side of a transport: serves reads and writes of the volume's
/// regions. Created by the volume, one per transport it offers.
/// Thread-safe; shutdown() is called once, by the owning volume.
class TransportServer {
 public:
  virtual ~TransportServer() = default;
  /// The transport's registered name.
  virtual std::string_view name() const noexcept = 0;
  /// How clients reach this server.
  virtual EndpointInfo endpoint() const = 0;
  /// Where the volume must allocate region memory for this transport to
  /// reach it (shm: shared memory), or nullptr when any memory will do.
  virtual std::shared_ptr<RegionAllocator> allocator() const { return nullptr; }
  /// Device memory for a region on GPU `device` of the volume's process
  /// (cuda-ipc); Errc::unsupported from transports that cannot serve it.
  virtual Result<RegionMemory> allocate_device(std::size_t nbytes, int device) {
    (void)nbytes;
    return Status(Errc::unsupported, std::string(name()) + " cannot hold GPU memory (cuda:" +
                                         std::to_string(device) + ")");
  }
  /// One-sided transports: fills in what a client needs to reach `region`
  /// directly (its address; rdma: the key of its registration) in the
  /// descriptor `ref` the volume is about to send. The volume calls it for
  /// every region it hands out (stage, open_read), and keeps the region
  /// alive as long as the protocol lets a client touch it (staged until
  /// commit or release, leased until close_read). Others leave it alone.
  virtual Status describe(const Region& region, wire::RegionRef& ref) {
    (void)region;
    (void)ref;
    return Status();
  }
  /// The memory starting at `data` is about to be freed for good (not
  /// pooled): a one-sided server drops what it registered for it (rdma:
  /// the memory registration). May be called from any thread.
  virtual void forget(const std::byte* data) { (void)data; }
  /// Whether forget() matters: the server keeps state per piece of memory
  /// it served (rdma's registrations). A volume none of whose servers does
  /// skips the bookkeeping that calls forget().
  virtual bool registers_memory() const noexcept { return false; }
  /// Answers small-operation requests (SmallOps) with `handler` from now
  /// on; transports that carry none (all but tcp) ignore it. Requests that
  /// come before it are refused with Errc::unsupported.
  virtual void serve_small_ops(SmallOpHandler handler) { (void)handler; }
  /// Ends at once the transfers under way of regions `ids` (a revoked
  /// loan, already withdrawn from the region table): their connections are
  /// closed, so their clients fail (and read again elsewhere) instead of
  /// holding the memory until the transfer ends, or until its I/O timeout
  /// when the client stalls. Transports that hold a region only while
  /// copying one bounded chunk (all but tcp) ignore it. Any thread.
  virtual void interrupt(const std::vector<std::uint64_t>& ids) { (void)ids; }
  /// Stops serving and releases every actor handle it holds.
  virtual void shutdown() = 0;
};

/// The client side of a transport, bound to one volume's endpoint.
/// Thread-safe: transfers may be started from any thread, concurrently.
/// The memory passed to write()/read() must stay valid until the returned
/// future completes; after an error no further byte of it is touched.
class Transport {
 public:
  virtual ~Transport() = default;
  /// The transport's registered name.
  virtual std::string_view name() const noexcept = 0;
  virtual Capabilities capabilities() const noexcept = 0;
  /// Copies `n` bytes from `src` into [offset, offset + n) of region `dst`.
  /// Errc::out_of_range if that range leaves the region, Errc::not_found if
  /// the region is gone, Errc::transport_error / timeout / unavailable when
  /// the bytes cannot move.
  virtual Future<void> write(const wire::RegionRef& dst, std::uint64_t offset, const std::byte* src,
                             std::size_t n) = 0;
  /// Copies [offset, offset + n) of region `src` into `dst`. Same errors.
  virtual Future<void> read(const wire::RegionRef& src, std::uint64_t offset, std::byte* dst,
                            std::size_t n) = 0;
  /// Maps region `src` read-only into this process, without copying: the
  /// memory stays mapped until the returned pointer's last owner lets go
  /// (the caller keeps the region leased meanwhile). Errc::unsupported for
  /// transports that cannot (only shm can today).
  virtual Result<std::shared_ptr<std::byte>> map_read_only(const wire::RegionRef& src) {
    (void)src;
    return Status(Errc::unsupported, std::string(name()) + " cannot map a region");
  }
  /// Its volume is gone (the controller or a monitor said so): ends every
  /// transfer queued or in flight at once with `why`, and fails every later
  /// one with it, instead of letting them wait for a socket's timeout.
  /// Transports whose transfers cannot outlive a dead peer (rpc monitors
  /// it; shm, cma and cuda-ipc copy memory) keep this default, which does
  /// nothing. Thread-safe; does not block.
  virtual void abort(const Status& why) { (void)why; }
  /// Maps region `dst` into this process through the client's shared
  /// mapping (read-write), so the caller fills a staged region in place
  /// (zero-copy publishing) instead of write()-ing a copy, or copies a box
  /// straight out of a leased region (sharded reads).
  /// The memory stays mapped until the returned pointer's last owner lets go.
  /// Errc::unsupported for transports that cannot (only shm can today);
  /// capabilities().maps_memory says which can.
  virtual Result<std::shared_ptr<std::byte>> map_writable(const wire::RegionRef& dst) {
    (void)dst;
    return Status(Errc::unsupported, std::string(name()) + " cannot map a region");
  }
  /// The word that names the object living in region `src`'s memory (0:
  /// none) and the region's bytes beside it, mapped into this process, for
  /// a read without a lease (a direct read): read the word, copy from
  /// `data`, read it again; the same object id both times means the copy
  /// is that object's bytes (the volume clears the word before the memory
  /// serves anything else). Both null where the transport cannot show them
  /// (only shm can today, for the memory its server allocated); `data`
  /// stays mapped while `tag` lives. A copy from `data` into GPU memory
  /// calls `before_device_copy` first where set (shm: the mapping is
  /// page-locked from its second such copy on, as for the transport's own
  /// device copies).
  struct TaggedBytes {
    std::shared_ptr<const std::atomic<std::uint64_t>> tag;
    const std::byte* data = nullptr;
    std::function<void()> before_device_copy;
  };
  virtual TaggedBytes tagged_bytes(const wire::RegionRef& src) {
    (void)src;
    return {};
  }
  /// Opens a channel for small operations to the volume, over a connection
  /// of its own (blocks for its handshake). Errc::unsupported for
  /// transports that carry none (all but tcp; shm's fast path is a ring).
  virtual Result<std::unique_ptr<SmallOps>> open_small_ops() {
    return Status(Errc::unsupported, std::string(name()) + " carries no small operations");
  }
};

}  // namespace meshstore::transports
