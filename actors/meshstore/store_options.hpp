#pragma once

// StoreOptions: how a store is built (its four parts: placement,
// transport, limits, security), and the strategy hooks a custom placement
// plugs in. Included by meshstore/store.hpp; docs/config.md lists every
// field.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/status.hpp"
#include "meshstore/tls.hpp"

namespace meshstore {

/// A volume as a placement strategy sees it.
struct VolumeDesc {
  std::string volume_id;  ///< the volume's id, as `select` answers it
  std::string host;       ///< the host identity of the process hosting it
  int local_rank = -1;    ///< the local rank hosting it; -1 for the server's volumes
};

/// A client as a placement strategy sees it.
struct ClientDesc {
  int rank = 0;        ///< the client process's rank (StorePlacement::rank)
  int local_rank = 0;  ///< its rank on its host (StorePlacement::local_rank)
  std::string host;    ///< its host identity (StorePlacement::host, resolved)
};

/// A user-defined strategy: a built-in placement decides which processes
/// host volumes (connecting processes follow it), and `select` decides which
/// of the live volumes each client writes to. `select` runs in the store's
/// strategy actor, one call at a time, on the process that created the
/// store; it must not block.
struct CustomStrategy {
  /// A built-in strategy name whose volume placement to use.
  std::string placement = "controller_colocated";
  /// The volume id for `client` among `volumes` (registration order), or an
  /// error (Errc::unavailable when none fits yet: the client retries until
  /// its request timeout; in a store spawn_store made, every volume has
  /// registered when it returns, and the answer is final).
  std::function<Result<std::string>(const ClientDesc& client,
                                    const std::vector<VolumeDesc>& volumes)>
      select;
};

/// Where a store's volumes go, and who this process is to its strategy
/// (StoreOptions::placement).
struct StorePlacement {
  /// Placement strategy of a store this process creates (embedded, rank 0,
  /// meshstore serve): "singleton", "controller_colocated", "per_host" or
  /// "per_local_rank" (docs/meshes.md). A connecting process follows the
  /// strategy of the store it connects to.
  std::string strategy = "singleton";
  /// A user-defined strategy; when its `select` is set it replaces
  /// `strategy` (examples/strategies/custom_strategy.cpp).
  CustomStrategy custom_strategy;
  /// Volumes the server hosts under "controller_colocated" (1 to 1024);
  /// the other strategies place their volumes themselves.
  int num_volumes = 1;
  /// Volumes that keep each key put whole (1 to 16; docs/reliability.md,
  /// "Copies"): before such a put commits, the controller has that many
  /// minus one other volumes copy its object, on hosts other than the
  /// writer's first; a read takes any copy and falls over to another when
  /// one's volume dies, and the copies a dead volume took are made again
  /// in the background. Fewer volumes than this keep what they can. Sharded
  /// keys keep the replicas their placement gives. Set where the store's
  /// controller runs (Store::embedded, meshstore serve --replicas).
  int replicas = 1;
  /// The share of the time, in (0, 1], that making copies again after a
  /// volume died may take: after each copy the controller pauses so long
  /// that copying takes at most this share of the time.
  double repair_share = 0.25;
  /// This process's rank (what the strategy sees).
  int rank = 0;
  /// This process's rank on its host; -1 when it is not a rank (a
  /// standalone server or a tool), so no per-rank volume is placed here.
  int local_rank = 0;
  /// This process's host identity for placement; empty = MESHSTORE_HOST,
  /// else the hostname.
  std::string host;
  /// Store::connect(): host the volumes the store's strategy places in this
  /// process (per_host, per_local_rank). Tools that only look set false.
  bool host_volumes = true;
  /// spawn_store on a ProcMesh that launch() or attach() made: the member
  /// of the mesh (an index into it) whose process runs the store's
  /// controller and strategy, as the one-member actor mesh
  /// "meshstore.controller" under the store's supervision. -1 (default):
  /// the calling process runs them, as Store::embedded does. With the
  /// restart policy and LaunchSpec::max_relaunches, a controller whose
  /// process dies starts again in the process launched in its place and
  /// rebuilds its index from the volumes that survived, while every
  /// client's calls wait for it (docs/reliability.md, "A controller
  /// restarted by its ProcMesh"). Not with a custom strategy's `select`
  /// (a function cannot cross processes); ignored by every other way of
  /// making a store.
  int controller_process = -1;
};

/// How this process's clients and volumes move bytes
/// (StoreOptions::transport).
struct StoreTransport {
  /// Force a transport by name ("shm", "cma", "rdma", "tcp", "rpc"); empty =
  /// MESHSTORE_TRANSPORT, else the best one for each client-volume pair
  /// (shm, else cma, on one host; rdma, else tcp, across hosts; rpc as the
  /// fallback). A forced transport that cannot serve a pair is an error,
  /// never a fallback; one that cannot run here (rdma without a device) is
  /// Errc::unsupported at the store's start.
  std::string name;
  /// tcp: connections per client-volume pair, in [1, 16].
  int tcp_streams = 2;
  /// tcp: bytes per request on one connection, in [64 KiB, 1 GiB].
  std::size_t tcp_chunk_bytes = std::size_t{16} << 20;
  /// shm: segments a client keeps mapped per volume it talks to (least
  /// recently used go first), in [1, 60000]. Each mapping counts against
  /// vm.max_map_count (65530).
  int shm_max_mappings = 4096;
  /// Volumes of this process keep their bytes in shared memory (/dev/shm),
  /// so same-host clients reach them through the shm transport. false keeps
  /// them in process memory and offers no shm (for hosts or containers whose
  /// /dev/shm is small: Docker's default is 64 MiB); clients then use tcp.
  bool shared_memory_volumes = true;
  /// Largest rpc chunk (one actor message), in [4 KiB, 1 GiB].
  std::size_t rpc_chunk_bytes = std::size_t{64} << 20;
  /// rpc chunks in flight per transfer, in [1, 64].
  int rpc_chunks_in_flight = 4;
  /// How long a channel's waiting end spins before it sleeps
  /// (in [0, 1 s]): on a shm ring (then a futex) the volume's small-op
  /// service between requests and a caller waiting for its answer; on a tcp
  /// small-operations connection (then recv) the volume's end between
  /// requests and the caller's after sending one. Longer spins answer a
  /// request that follows soon without a wake-up (tens of microseconds on
  /// a busy 2-core VM) at the cost of a core busy that long after each
  /// request; 0 never spins. Applies to the channels this process's
  /// clients open and those its volumes serve. Store::from_env takes
  /// MESHSTORE_FAST_PATH_SPIN_US.
  std::chrono::microseconds fast_path_spin{50};
};

/// How much the volumes hold and how long calls wait
/// (StoreOptions::limits).
struct StoreLimits {
  /// Bytes each volume may hold; 0 = unlimited. A put that does not fit
  /// fails with Errc::out_of_capacity and stores nothing (unless eviction).
  std::uint64_t volume_capacity_bytes = 0;
  /// What a full volume does with a put: "none" refuses it
  /// (Errc::out_of_capacity); "lru" first removes the least recently used
  /// keys stored whole on that volume and put on their own (not state
  /// dicts, not shards, not pinned by a reader that lost a race, not held
  /// by a reader's lease such as a live view, ReadOptions::view), then stages again: a
  /// cache-style store (docs/reliability.md, "Eviction").
  /// Recency is what the controller sees: puts and locates, not reads a
  /// client serves from its location cache.
  std::string eviction = "none";
  /// Memory each volume keeps, once released (a replaced or retired
  /// version), for the next objects of the same sizes: a state dict
  /// published every step then reuses the same segments. Up to this many
  /// bytes per volume; 0 keeps none.
  std::uint64_t volume_pool_bytes = std::uint64_t{8} << 30;
  /// Deadline of every control request (and every rpc chunk).
  std::chrono::milliseconds request_timeout{30000};
  /// Store::connect(): keep retrying an unreachable store this long.
  std::chrono::milliseconds connect_timeout{30000};
  /// Store::connect(): when the store's server goes down (its controller),
  /// keep reconnecting to the same address this long; a server restarted
  /// there gets this process's volumes back, and rebuilds its index from
  /// them (docs/reliability.md, "The controller's loss"). Calls wait for
  /// it meanwhile, up to request_timeout, then fail with
  /// Errc::unavailable. 0 = never reconnect: calls fail at once.
  std::chrono::milliseconds reconnect_timeout{60000};
  /// A server whose controller rebuilds its index from the volumes (a
  /// standby taking over, a server restarted with state_dir): how long it
  /// waits for a volume it expects, counted from its start or from the
  /// last records that came. Meanwhile misses, commits and removals wait;
  /// after it, the keys only a missing volume held are lost, and named in
  /// its log (docs/reliability.md, "The controller's loss").
  std::chrono::milliseconds rebuild_timeout{2000};
  /// Actor scheduler threads; 0 = max(2, the CPUs the process may run on)
  /// capped at 8. The process's runtime takes it from the first store or
  /// mesh that starts it; a later one keeps the running one's (with a warning).
  int scheduler_threads = 0;
};

/// Who may connect, and what is encrypted (StoreOptions::security;
/// docs/security.md).
struct StoreSecurity {
  /// Mutual TLS for the store's port and its connections (docs/security.md):
  /// a store that listens with TLS refuses every peer without a certificate
  /// tls.ca_file signed; a connecting process needs the same CA. The data
  /// plane's secrets then travel only over authenticated connections.
  /// Store::from_env takes MESHSTORE_TLS_* when unset.
  TlsOptions tls;
  /// tcp: the volumes this process hosts encrypt and authenticate every
  /// byte of their tcp connections (AES-256-GCM under a key handed to
  /// clients over the control plane) and refuse clients that do not;
  /// clients follow each volume. Costs CPU (docs/security.md, "Encrypted
  /// tcp"); protects only with `tls` set, which keeps the key secret.
  /// Store::from_env and meshstore serve turn it on when
  /// MESHSTORE_ENCRYPT_TCP=1.
  bool encrypt_tcp = false;
};

/// How a store is built, in four parts and five settings of its own. Every
/// field is validated by Store::embedded(), connect() and from_env().
struct StoreOptions {
  StorePlacement placement;  ///< where the volumes go, and who this process is to them
  StoreTransport transport;  ///< how this process's clients and volumes move bytes
  StoreLimits limits;        ///< how much the volumes hold and how long calls wait
  StoreSecurity security;    ///< who may connect, and what is encrypted
  /// Publish this store on "HOST:PORT" (port 0 picks a free one) so other
  /// processes can Store::connect() to it; empty = private to this process.
  /// Binds exactly HOST: keep 127.0.0.1 unless other hosts must reach it.
  std::string listen;
  /// A standby for the store serving at this "HOST:PORT" (with `listen`;
  /// docs/reliability.md, "A standby"): Store::embedded() reaches that
  /// store (within limits.connect_timeout, else Errc::unavailable), waits
  /// until it is gone, and only then starts this store's controller and
  /// listens: connected stores given both addresses
  /// (Store::connect("PRIMARY,STANDBY")) reconnect to it, and their
  /// volumes rebuild its index. Empty: serve at once.
  std::string standby_of;
  /// A directory this server keeps its state in (with `listen`;
  /// docs/reliability.md, "A server restarted in place"): a lock held while
  /// it lives, so no second live server shares it (Errc::unavailable), and
  /// a marker while it serves, removed when it closes. A server that finds
  /// the marker knows the last one died serving: its controller waits, as a
  /// standby's does, for a volume of that store (at most
  /// limits.rebuild_timeout) before it answers that a key does not exist,
  /// so that no process reads the restarted store empty. Empty: none (a
  /// restarted server cannot tell a restart from a fresh start).
  std::string state_dir;
  /// Serve this process's /metrics (Prometheus' text format), /healthz and
  /// /readyz on "HOST:PORT" (port 0 picks a free one:
  /// Store::Admin::metrics_address() says which); empty = none
  /// (docs/operations.md). Every process of a store may serve its own:
  /// each reports its own volumes, the controller's process every volume.
  /// Binds exactly HOST: keep 127.0.0.1 unless a scraper elsewhere must
  /// reach it (another host is warned about). With security.tls the
  /// endpoints are HTTPS with the same certificates, and /metrics answers
  /// only a client whose certificate security.tls.ca_file signed.
  std::string metrics;
  /// Log level (trace, debug, info, warn, error, critical, off); empty
  /// keeps MESHSTORE_LOG_LEVEL or the default "warn".
  std::string log_level;

  /// Checks every field; Errc::invalid_argument names the bad one.
  Status validate() const;
};

/// The port `meshstore serve` listens on and the tools dial by default.
constexpr std::uint16_t kDefaultStorePort = 29517;

}  // namespace meshstore
