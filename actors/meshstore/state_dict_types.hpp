#pragma once

// What Store::StateDicts takes and answers: the options of a state dict's
// put, read and publish, a state dict staged in place (StagedStateDict) and
// a published version (Publication). Included by meshstore/store.hpp;
// docs/state_dicts.md.

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

#include "meshstore/future.hpp"
#include "meshstore/state_dict.hpp"
#include "meshstore/status.hpp"
#include "meshstore/tensor.hpp"
#include "meshstore/tensor_slice.hpp"

namespace meshstore {

namespace internal {
struct StagedAccess;
struct PublicationAccess;
}  // namespace internal

/// How Store::StateDicts::put, put_sharded, publish and stage store a
/// state dict.
struct StateDictPutOptions {
  /// Tensors of at most this many bytes are packed into one blob (one
  /// object, one transfer) with a table of where each lies; larger ones are
  /// stored one object each. Many small tensors then cost one transfer, not
  /// one each. 0 packs none; UINT64_MAX packs the whole state dict.
  std::uint64_t pack_max_tensor_bytes = std::uint64_t{64} << 10;
  /// Packed tensors go into buckets of at most this many bytes (a tensor
  /// larger than that gets a bucket of its own), each one object: buckets
  /// move in parallel, and a streaming reader starts on each as soon as it
  /// is written. 0 = one bucket for the whole state dict.
  std::uint64_t pack_bucket_bytes = 0;
  /// When set (bfloat16 or float16), float32 tensors are stored in this
  /// dtype, rounded to nearest even (fp32 master weights published as bf16:
  /// half the bytes to move). Readers see the stored dtype. Other dtypes are
  /// stored as they are.
  std::optional<DType> transfer_dtype;
};

/// How Store::StateDicts reads a state dict into the caller's tensors
/// (get_into, get_latest_into, get_next_into).
struct StateDictReadOptions {
  /// An entry stored as float32, bfloat16 or float16 may be read into a
  /// host tensor of another of them (a bf16 version into fp32 buffers),
  /// converted as it is copied (rounded to nearest even), in the same pass
  /// (ReadOptions::cast). A version that needs a conversion is read once
  /// committed rather than streamed. Not with `boxes`.
  bool cast = false;
  /// get_into only: for an entry named here, the destination receives that
  /// box of the stored global tensor (Placement::slice_for gives a rank's),
  /// read from only the shards that overlap it; the others receive the
  /// whole entry. Works for any stored state dict, sharded or not, so a
  /// mesh reads what another mesh put under a different sharding.
  /// Errc::shape_mismatch when a box is not in its entry's global shape or
  /// the destination's shape is not the box's.
  std::map<std::string, TensorSlice> boxes;

  /// Shorthands: get_into(key, sd, StateDictReadOptions::converting()),
  /// get_into(key, sd, StateDictReadOptions::of_boxes(boxes)).
  static StateDictReadOptions converting() {
    StateDictReadOptions o;
    o.cast = true;
    return o;
  }
  /// Options reading the entries named in `boxes` as those boxes.
  static StateDictReadOptions of_boxes(std::map<std::string, TensorSlice> boxes) {
    StateDictReadOptions o;
    o.boxes = std::move(boxes);
    return o;
  }
};

/// A tensor a writer fills in place: what StateDicts::stage allocates.
struct TensorSpec {
  std::string name;              ///< the entry's name in the state dict
  DType dtype = DType::float32;  ///< its element type
  Shape shape;                   ///< its shape
};

/// A state dict whose tensors were allocated by the store, to be filled in
/// place and committed (zero-copy publishing; docs/state_dicts.md). On a
/// volume this process reaches through shared memory, the tensors *are* the
/// volume's memory: commit() moves no tensor byte. Elsewhere they are
/// private buffers and commit() puts them as StateDicts::put does.
///
/// A handle: copies share one staged state dict. When the last copy goes
/// before commit(), the memory is given back (abort()); the future
/// StateDicts::stage answered holds a copy too, which the store's thread
/// that completed it lets go a moment later, so the memory of a staging
/// dropped at once comes back on that thread (call abort() to have it
/// back before it returns). Thread-compatible:
/// fill disjoint tensors from any threads, but call commit() and abort()
/// from one.
class StagedStateDict {
 public:
  /// An empty handle (every call fails or is empty).
  StagedStateDict();
  ~StagedStateDict();
  /// Another handle to the same staged state dict.
  StagedStateDict(const StagedStateDict&);
  /// Makes this a handle to the other's staged state dict, letting go of its own.
  StagedStateDict& operator=(const StagedStateDict&);
  /// Moves the handle; the moved-from one is empty.
  StagedStateDict(StagedStateDict&&) noexcept;
  /// Takes over the other's handle, letting go of its own; the moved-from one is empty.
  StagedStateDict& operator=(StagedStateDict&&) noexcept;

  /// The entries: one tensor per TensorSpec, in order, writable, with
  /// uninitialised contents (the memory of a retired version, perhaps).
  /// Values (step counters, ...) may be inserted before commit(); tensors
  /// may not. After commit() the tensors are the stored version: readers see
  /// every byte, so they must not be written again.
  StateDict& state_dict();
  /// The key the state dict commits under ("PREFIX/vN" for stage_publish).
  const std::string& key() const;
  /// True when the tensors are the volume's shared memory.
  bool zero_copy() const noexcept;
  /// Makes the state dict visible as a whole, exactly as StateDicts::put
  /// would (names the previous version had and this one lacks go). Answers
  /// the version number for stage_publish, 0 for stage. Once
  /// only: a second call is Errc::invalid_argument. If the commit fails, the
  /// memory is given back and nothing changed.
  Future<std::uint64_t> commit();
  /// Gives the memory back uncommitted; the tensors must not be touched
  /// afterwards. Idempotent; nothing after commit().
  void abort();

 private:
  friend struct internal::StagedAccess;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

/// How publish() moves a state dict's bytes (docs/publishing.md, "Direct
/// publishing"). The third way, in place, is stage_publish: the tensors are
/// the volume's memory from the start.
enum class PublishMode : std::uint8_t {
  /// The store picks: direct where this process can lend its tensors
  /// (host memory, no transfer_dtype cast, no forced transport that cannot
  /// serve lent memory, at least one tensor large enough to be stored on its
  /// own), by copy otherwise.
  automatic = 0,
  /// Copied into volume memory: the tensors are
  /// the caller's again once the future completes.
  copy = 1,
  /// Lent: the large, contiguous tensors become the version's objects as
  /// they are, served from this process (cma on this host, tcp or rdma
  /// across hosts) until the Publication is reclaimed or the version
  /// retired; readers copy straight out of them, the one copy end to end.
  /// Small tensors (packed) and strided ones are copied as by `copy`.
  direct = 2,
};

/// "automatic", "copy" or "direct".
const char* publish_mode_name(PublishMode mode) noexcept;

/// How publish() stores a version.
struct PublishOptions {
  /// How the bytes move: by copy, lent (direct), or the store's pick.
  PublishMode mode = PublishMode::automatic;
  /// Versions kept readable (>= 1); publishing retires the one that falls
  /// out, and a retired direct version gives its buffers back.
  int keep = 1;
  /// Packing, buckets, transfer_dtype (which forces a copy: direct mode
  /// refuses it with Errc::invalid_argument).
  StateDictPutOptions put;
  /// Publication::reclaim() copies the version into volume memory before it
  /// gives the buffers back, so readers arriving later still find it;
  /// without it the version is withdrawn and later readers wait for the
  /// next one (StateDicts::get_next_into).
  bool retain = false;
  /// How long reclaim() waits for reads still copying out of the buffers
  /// (> 0); after it, reclaim() fails with Errc::timeout and the buffers
  /// stay lent, unless revoke_on_timeout.
  std::chrono::milliseconds reclaim_timeout{30000};
  /// reclaim() revokes the loan once reclaim_timeout has passed: readers
  /// still copying out of the buffers lose their leases, their copies do
  /// not count (such a read locates the key again: it finds the retained
  /// copy, or the version gone), and the buffers are the caller's once the
  /// transfers the lending volume serves itself (tcp sends in flight, which
  /// the revoke interrupts) end, within reclaim_timeout again but at least
  /// 1 s (else Errc::timeout). Readers never see a
  /// torn value either way.
  bool revoke_on_timeout = false;

  /// A version by copy keeping the newest `keep`, packed as `put` says:
  /// publish(prefix, sd, PublishOptions::by_copy()).
  static PublishOptions by_copy(int keep = 1, StateDictPutOptions put = {}) {
    PublishOptions o;
    o.mode = PublishMode::copy;
    o.keep = keep;
    o.put = std::move(put);
    return o;
  }
};

/// A published version (Store::StateDicts::publish). A handle: copies share it. For a
/// direct version, it says when the caller's tensors are its own again:
/// until returned() completes, readers may be copying out of them, so the
/// caller must neither write nor free them. The trainer's loop is
/// `pub = store.publish(...).get(); ...; pub.reclaim().get(); optimizer.step();`.
class Publication {
 public:
  /// An empty handle (version 0; reclaim() fails).
  Publication();
  /// The version number N ("PREFIX/vN").
  std::uint64_t version() const noexcept;
  /// How it was published: copy or direct (never automatic).
  PublishMode mode() const noexcept;
  /// Bytes lent (0 for a copy).
  std::uint64_t lent_bytes() const noexcept;
  /// Completes when the store no longer reads the caller's tensors: at
  /// once for a copy; for a direct version once it was reclaimed or retired
  /// (a later publish) and the last read in flight finished, or the store
  /// closed.
  Future<void> returned() const;
  /// Ends the loan now: with PublishOptions::retain, copies the version into
  /// volume memory first (if it is still published), else withdraws it;
  /// then waits up to reclaim_timeout for reads in flight (returned()).
  /// Errc::timeout when readers still hold the buffers after that (they
  /// stay lent; call reclaim() again, or wait on returned()), unless
  /// PublishOptions::revoke_on_timeout, which then revokes the loan. Calls
  /// after one that is running or succeeded share its future.
  Future<void> reclaim();

 private:
  friend struct internal::PublicationAccess;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace meshstore
