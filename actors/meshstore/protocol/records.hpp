#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshstore/status.hpp"
#include "meshstore/tensor.hpp"
#include "meshstore/tensor_slice.hpp"
#include "meshstore/transports/wire/region_ref.hpp"

/// The store's control-plane vocabulary: plain C++ structs that the store's
/// actors exchange (key records, stage requests, leases, volume and client
/// info). In-process they travel as they are; across processes each is
/// encoded with its Protobuf twin in records.proto (see the codec functions
/// below). RegionRef, which a ReadLease carries, is the transport layer's
/// (meshstore/transports/wire/region_ref.hpp). Value types: not synchronized.
namespace meshstore::wire {

/// What a key holds.
enum class ObjectKind : std::uint8_t { tensor = 0, object = 1 };

/// One stored shard of a key: the box it covers and where its bytes live.
struct ShardRecord {
  TensorSlice slice;
  std::string volume_id;
  std::uint64_t object_id = 0;
  std::uint64_t nbytes = 0;
  /// Sharded puts: how many copies of this box (replicas, one per rank
  /// holding it) make one version; the version commits when each box has
  /// all its copies.
  std::uint32_t replicas = 1;
  /// Sharded puts of a box with replicas: content_checksum() of its bytes,
  /// so replicas that differ are refused (0 = not computed).
  std::uint64_t checksum = 0;
  /// Where the volume placed the object for readers on its host: the shm
  /// transport's description of its region (segment, offset), as the
  /// writer was told at staging; empty when unknown. Only a hint: a
  /// lease-free read trusts it once the object's tag there names it
  /// (docs/internals/data-path.md, "Lease-free reads").
  std::string place{};
};

/// Tensor metadata plus placement. version is assigned by the controller at
/// commit (from 1); a record with version 0 means "no such key".
struct KeyRecord {
  std::string key;
  ObjectKind kind = ObjectKind::tensor;
  DType dtype = DType::uint8;
  Shape shape;
  std::uint64_t version = 0;
  std::vector<ShardRecord> shards;
  /// For a key that is gone because its volume died: that volume's id.
  std::string lost_on;
  /// In a locate reply (version 0) from a controller whose rebuild gave up
  /// a volume that never came back: that volume, which may have held the
  /// key (no surviving volume knows whether it did).
  std::string maybe_lost_on;
  /// The state dict this key belongs to (its manifest key), "" for a key
  /// put on its own. Replacing a state dict removes its group's other keys.
  std::string group;
  /// In a locate reply (version 0): why a key of a sharded state dict being
  /// put is not visible yet (what the state dict still waits for).
  std::string pending;
  /// An object's format (what a Python reader turns its bytes into).
  ObjectFormat object_format = ObjectFormat::bytes;
  /// A commit's precondition (notify_put, notify_put_batch, replace): the
  /// key's current version must be this one (0: the key must not exist),
  /// else nothing in the batch commits (Errc::conflict). Compare-and-set for
  /// version pointers; never stored in the index.
  std::optional<std::uint64_t> expect_version;
  /// A version pointer P (publish_state_dict): the version it names, whose
  /// state dict is P/vN, so that one locate answers the latest version and
  /// where it lies (locate_latest); 0 for every other key.
  std::uint64_t points_to = 0;
  /// A key of a state dict (group): the commit that wrote its group, as
  /// the version of the first key it wrote, and how many keys of the group
  /// it wrote. Stamped by the controller; a rebuilt index restores a state
  /// dict only with every key of that commit (docs/reliability.md).
  std::uint64_t group_commit = 0;
  std::uint32_t group_size = 0;
  /// How many volumes keep this whole key (StoreOptions::replicas), as the
  /// controller decided at its commit (0 or 1: one). Its shards are then
  /// copies of the whole tensor, each on its own volume: fewer than
  /// `copies` while the controller makes again those a dead volume took.
  std::uint32_t copies = 0;

  bool found() const noexcept { return version != 0; }
  /// Whether the shards are copies of the whole tensor on distinct volumes
  /// (more than one shard, each a full box): a read takes any one.
  bool copied() const noexcept;
  /// Stored bytes over all shards, one copy of a copied() key counted.
  std::uint64_t nbytes() const noexcept;
};

/// The records a volume keeps, on their way to a controller
/// (held_records_atom): the sender shares its kept records (no copy of a
/// million of them), the receiver owns what it decoded. Travels as one
/// KeyRecordList.
struct HeldRecords {
  std::vector<std::shared_ptr<const KeyRecord>> kept;  // the sender's
  std::vector<KeyRecord> records;                      // decoded by the receiver

  std::size_t size() const { return kept.size() + records.size(); }
  /// Every record, in the order they are encoded, moved out: copies of
  /// those kept (a receiver in the sender's actor system, where nothing
  /// was serialized), then the decoded ones.
  std::vector<KeyRecord> take() &&;
};

/// A request to stage (allocate, not yet visible) an object at a volume.
struct StageRequest {
  std::string key;
  std::uint64_t nbytes = 0;
  /// When set, `data` (nbytes long) is the object's content: the volume
  /// fills the object at once and no transport write follows.
  bool has_data = false;
  std::string data;
  /// cuda-ipc: the object's memory is to be device memory on this GPU of
  /// the volume (-1: host memory).
  int device = -1;
};

/// Objects pinned for reading until close_read(lease_id); or, for a small
/// read, their bytes inline (`data`, one per region) and lease_id 0.
struct ReadLease {
  std::uint64_t lease_id = 0;
  std::vector<RegionRef> regions;
  std::vector<std::string> data;
  /// Some region is a publisher's loan it may revoke (direct publishing
  /// with PublishOptions::revoke_on_timeout): the reader's copy counts only
  /// if the checked close (close_read with a reply) says the lease was
  /// still whole when it ended.
  bool revocable = false;
};

/// remove_batch's answer.
struct RemoveReply {
  std::uint64_t removed = 0;
  std::vector<std::string> missing;
};

/// A volume as it registers with the controller and strategy.
struct VolumeInfo {
  std::string volume_id;
  std::string host;
  std::uint64_t capacity_bytes = 0;  // 0 = unlimited
  std::vector<std::string> transports;
  /// The local rank of the process hosting it; -1 for a server's volumes.
  std::int32_t local_rank = -1;
  /// "HOST:PORT" where a client connects to the hosting process directly
  /// (ActorRuntime::door); empty for a server's volumes, which every
  /// client reaches directly already.
  std::string control;
};

/// A volume's usage.
struct VolumeStat {
  std::string volume_id;
  std::uint64_t bytes_held = 0;
  std::uint64_t capacity_bytes = 0;
  std::uint64_t objects = 0;
  std::uint64_t staged = 0;
  std::uint64_t leases = 0;
  std::uint64_t evictions = 0;
  std::uint64_t evicted_bytes = 0;
};

/// Who a client is, for the strategy.
struct ClientInfo {
  std::int32_t rank = 0;
  std::int32_t local_rank = 0;
  std::string host;
};

// Codec: each struct to and from its Protobuf encoding. decode() validates
// (known dtype, well-formed slices) and fails with Errc::protocol_error.
/// "; it may have been on volume 'X', which did not come back after the
/// controller's failover" for a record naming such a volume
/// (KeyRecord::maybe_lost_on), else "": what a "no such key" adds.
std::string maybe_lost_note(const KeyRecord& r);

std::string encode(const KeyRecord& x);
/// A list of records as one KeyRecordList.
std::string encode(const std::vector<KeyRecord>& x);
/// Kept and decoded records alike, as one KeyRecordList.
std::string encode(const HeldRecords& x);
std::string encode(const StageRequest& x);
std::string encode(const ReadLease& x);
std::string encode(const RemoveReply& x);
std::string encode(const VolumeInfo& x);
std::string encode(const VolumeStat& x);
std::string encode(const ClientInfo& x);

Status decode(const std::string& bytes, KeyRecord& x);
Status decode(const std::string& bytes, std::vector<KeyRecord>& x);
/// Into `x.records`.
Status decode(const std::string& bytes, HeldRecords& x);
Status decode(const std::string& bytes, StageRequest& x);
Status decode(const std::string& bytes, ReadLease& x);
Status decode(const std::string& bytes, RemoveReply& x);
Status decode(const std::string& bytes, VolumeInfo& x);
Status decode(const std::string& bytes, VolumeStat& x);
Status decode(const std::string& bytes, ClientInfo& x);

}  // namespace meshstore::wire
