#pragma once

// Reading a stored state dict as one snapshot: planning the read against its
// manifest (and the cache of manifests read before), then reading the
// manifest again with every entry, planning anew when a writer changed it.

#include <caf/all.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "meshstore/client/client.hpp"
#include "meshstore/future.hpp"
#include "meshstore/state_dict.hpp"
#include "meshstore/state_dicts/client_calls.hpp"
#include "meshstore/state_dicts/manifest.hpp"
#include "meshstore/status.hpp"
#include "meshstore/tensor.hpp"
#include "meshstore/tensor_slice.hpp"

namespace meshstore::client {
class FastPath;
}  // namespace meshstore::client

namespace meshstore::state_dicts {

// How often a read plans again before it gives up on a busy writer.
constexpr int kMaxStateDictAttempts = 8;

// The boxes a read of a state dict wants of some entries, by name.
using Boxes = std::map<std::string, TensorSlice>;

// One planned read of a state dict into a destination: what it checked and
// the scratch memory it reads into besides the caller's tensors.
struct IntoPlan {
  std::shared_ptr<const Snapshot> snap;
  Tensor manifest_copy;  // the manifest read with the entries (one snapshot)
  // The packed tensors, unpacked into the destination after the read; empty
  // when every packed tensor is a whole, contiguous host tensor of its
  // stored dtype: each bucket is then scattered straight into them as it
  // is read (client::Scatter, one copy where the volume's memory maps).
  Tensor blob;
  struct Unpack {
    std::uint64_t offset;            // where the entry starts in the blob
    TensorView dst;                  // the destination
    const ManifestEntry* entry;      // with a box: the whole entry's dtype and shape
    std::optional<TensorSlice> box;  // the part of it wanted (none: all)
  };
  std::vector<Unpack> unpack;
  std::vector<std::pair<std::string, Tensor>> values;  // name -> encoded value
  // Some entry is converted to its destination's dtype as it is read
  // (ReadOptions::cast): a stream cannot read it as the writer fills it.
  bool casts = false;
};

// The manifests a store's reads planned with last, by key (or by prefix for
// versions, whose keys change every time but whose layout rarely does). A
// read of the same layout plans with the cached manifest and skips reading
// it first: its single call reads the manifest anyway and plans again if it
// differs, so a stale entry costs a round trip, never a wrong read.
// Thread-safe.
struct ManifestCache {
  std::mutex mu;  // guards map
  std::unordered_map<std::string, std::shared_ptr<const Snapshot>> map;

  std::shared_ptr<const Snapshot> find(const std::string& k) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = map.find(k);
    if (it == map.end()) return nullptr;
    return it->second;
  }
  void put(const std::string& k, std::shared_ptr<const Snapshot> s) {
    std::lock_guard<std::mutex> lock(mu);
    if (map.size() >= 256 && map.count(k) == 0) map.clear();
    map[k] = std::move(s);
  }
};

// An empty cache, for a store (store/store_impl.hpp declares this too).
std::shared_ptr<ManifestCache> make_manifest_cache();

// Where a read may find and leave its plan's manifest.
struct CacheSlot {
  std::shared_ptr<ManifestCache> cache;  // null: none
  std::string key;
};

// Checks `dst` against `snap`'s manifest (every name, before any byte
// moves: a failure leaves `dst` as it was) and plans the read: the keys to
// fetch with their destinations in `into`, scratch memory in the plan.
// `cast`: an entry stored as float32, bfloat16 or float16 may be read into
// a host destination of another of them, whole (ReadOptions::cast).
// `scatter`: packed tensors may be scattered straight into `dst` as their
// bucket is read (a stream's reads take whole objects only).
Result<std::shared_ptr<IntoPlan>> plan_into(const std::string& key, StateDict* dst,
                                            const std::string& op,
                                            std::shared_ptr<const Snapshot> snap,
                                            client::GetCall& into, const Boxes* boxes,
                                            bool cast = false, bool scatter = true);

// After the read: the packed tensors and the values into `dst`.
Status finish_into(const IntoPlan& plan, StateDict* dst);

// Reads the state dict under `key` into `sd` (get_state_dict_into), the
// entries named in `boxes` as those boxes. With `fast` (the store's fast
// path) a layout planned before is first read straight from same-host
// volumes' shared memory, on this thread, when every object's place is
// known ("Direct state-dict reads"): the caller's own thread, or the
// client actor's where a locate came first (a version read), at most
// limits::kSnapshotHereBytes; a larger snapshot on the client's waiting
// thread (FastPath::defer), at any size.
Future<void> read_state_dict_into(const caf::actor_addr& client, const std::string& key,
                                  StateDict& sd, const std::string& op, const CacheSlot& slot = {},
                                  std::shared_ptr<const Boxes> boxes = nullptr, bool cast = false,
                                  const std::shared_ptr<client::FastPath>& fast = nullptr);

// Reads the state dict under `key` (planned with `snap`) into new tensors:
// packed ones are views into their bucket (get_state_dict).
Future<StateDict> read_state_dict(const caf::actor_addr& client, const std::string& key,
                                  const std::string& op, Snapshot snap, int tries);

}  // namespace meshstore::state_dicts
