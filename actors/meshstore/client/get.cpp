// The client's get path: locate, check, read; again when a writer raced it.

#include "meshstore/client/get.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/client/ask.hpp"
#include "meshstore/client/locations.hpp"
#include "meshstore/client/unpack.hpp"
#include "meshstore/client/volume_reads.hpp"
#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/tensor.hpp"

namespace meshstore::client {

using internal::from_caf_error;
using internal::cuda::on_device;

namespace {

struct GetOp {
  GetCall call;
  std::string what;
  int attempt = 0;
  bool use_cache = true;
  GetOutput out;
  // Set when a volume no longer had an object we located: a concurrent
  // overwrite or remove released it, so locating afresh will help.
  bool stale = false;
  // Once a read has lost that race, it locates with a pin (the controller
  // holds the located objects back from release until it unpins), so
  // writers replacing the key continuously cannot starve it.
  bool pin_next = false;
  std::uint64_t pin = 0;           // the pin held, 0 for none
  client_pointer owner = nullptr;  // the client running it, which holds the pin
  // For strided destinations: the contiguous staging tensor and its target.
  std::vector<std::pair<Tensor, TensorView>> unpack;
  // Volumes a read of this call failed at (dead, or unreachable): a key
  // kept as copies is read from another copy the next time, which
  // `other_copies` says the last records had.
  std::set<std::string> avoid;
  std::mutex avoid_mu;
  bool other_copies = false;
  bool failed_at_volume = false;  // this attempt: a volume's read failed

  // Ends the pin, if any (the controller would end it at its deadline).
  void unpin() {
    if (pin == 0) return;
    owner->send(owner->state.controller, protocol::unpin_atom::value, pin);
    pin = 0;
  }
  void fail(const Status& s) {
    unpin();
    call.promise->set_error(s.with_context(what));
  }
  // For errors whose message already names the key.
  void fail_named(const Status& s) {
    unpin();
    call.promise->set_error(s.with_context(call.op));
  }
};

// Why key `key`'s record `r` names no committed value: lost with its
// volume, partially committed (a state dict's group, or a sharded put
// whose shards do not cover it yet: what they miss is named), or absent.
Status not_found_why(const std::string& key, const wire::KeyRecord& r) {
  if (!r.lost_on.empty()) {
    return Status(Errc::unavailable, "'" + key + "' was stored on volume '" + r.lost_on +
                                         "', which went down; put it again");
  }
  if (!r.pending.empty()) {
    return Status(Errc::partially_committed, "'" + key + "' is partially committed: " + r.pending);
  }
  if (r.shards.empty()) {
    return Status(Errc::not_found, "no key '" + key + "'" + wire::maybe_lost_note(r));
  }
  std::vector<TensorSlice> missing{TensorSlice::full(r.shape)};
  for (const auto& shard : r.shards) {
    std::vector<TensorSlice> rest;
    for (const auto& m : missing) {
      for (auto& part : m.minus(shard.slice)) rest.push_back(std::move(part));
    }
    missing = std::move(rest);
  }
  std::int64_t absent = 0;
  std::string regions;
  for (std::size_t m = 0; m < missing.size(); ++m) {
    absent += missing[m].numel();
    if (m < 4) {
      auto text = missing[m].to_string();
      regions += (m ? ", " : "") + text.substr(0, text.find(" of "));
    }
  }
  if (missing.size() > 4) regions += " and " + std::to_string(missing.size() - 4) + " more";
  return Status(Errc::partially_committed,
                "'" + key + "' is partially committed: its shards cover " +
                    std::to_string(shape_numel(r.shape) - absent) + " of " +
                    std::to_string(shape_numel(r.shape)) + " elements of " +
                    shape_to_string(r.shape) + "; missing " + regions);
}

Status check_record(const GetOp& op, std::size_t i, const wire::KeyRecord& r) {
  const auto& key = op.call.keys[i];
  if (!r.found()) return not_found_why(key, r);
  const bool want_object = op.call.mode == GetMode::object;
  if (want_object && r.kind != wire::ObjectKind::object) {
    return Status(Errc::wrong_kind, "'" + key + "' holds a tensor, not an object (use get)");
  }
  if (!want_object && r.kind != wire::ObjectKind::tensor) {
    return Status(Errc::wrong_kind, "'" + key + "' holds an object, not a tensor (use get_object)");
  }
  const auto* box = i < op.call.slices.size() && op.call.slices[i] ? &*op.call.slices[i] : nullptr;
  if (box && box->global_shape() != r.shape) {
    return Status(Errc::out_of_range, "slice " + box->to_string() + " of '" + key +
                                          "' is not in its global shape " +
                                          shape_to_string(r.shape));
  }
  if (op.call.mode == GetMode::into) {
    const auto& dst = op.call.dsts[i];
    const Shape& want = box ? box->local_shape() : r.shape;
    if (dst.dtype() != r.dtype) {
      const bool castable = can_cast(r.dtype, dst.dtype());
      if (!op.call.cast || !castable) {
        return Status(Errc::dtype_mismatch,
                      "dtype mismatch for '" + key + "': stored " +
                          std::string(dtype_name(r.dtype)) + ", destination " +
                          std::string(dtype_name(dst.dtype())) +
                          (castable ? " (ReadOptions::cast converts them as they are read)" : ""));
      }
      if (box || r.shards.size() != 1 || !r.shards.front().slice.is_full()) {
        return Status(Errc::unsupported, "get_into '" + key +
                                             "': a cast read takes a whole key stored whole; "
                                             "this one is read " +
                                             (box ? "as a box" : "from shards"));
      }
    }
    if (dst.shape() != want) {
      return Status(Errc::shape_mismatch,
                    "shape mismatch for '" + key + "': " + (box ? "slice " : "stored ") +
                        shape_to_string(want) + ", destination " + shape_to_string(dst.shape()));
    }
  }
  if (r.shards.empty()) {
    return Status(Errc::protocol_error, "'" + key + "' has a record without shards");
  }
  return Status();
}

// True when key i must be read shard by shard and assembled: a box was
// asked for, or the key is stored in shards.
bool assembled(const GetOp& op, std::size_t i, const wire::KeyRecord& r) {
  const bool boxed =
      i < op.call.slices.size() && op.call.slices[i] && !op.call.slices[i]->is_full();
  return boxed || (r.shards.size() != 1 && !r.copied()) || !r.shards.front().slice.is_full();
}

void start_get(client_pointer self, const std::shared_ptr<GetOp>& op);

void finish_get(client_pointer self, const std::shared_ptr<GetOp>& op, const Result<void>& r) {
  auto& st = self->state;
  op->unpin();
  if (!r.ok()) {
    // A volume no longer had what we located: a concurrent overwrite or
    // remove released it. Locate afresh, pinned this time, and read again.
    if (op->stale && op->attempt < st.cfg.max_read_attempts) {
      for (const auto& k : op->call.keys) st.locations->erase(k);
      op->use_cache = false;
      op->pin_next = true;
      return start_get(self, op);
    }
    // A volume failed: read another copy, or (a location from the cache)
    // ask the controller where the key is now, once.
    if (!op->stale && op->failed_at_volume && (op->other_copies || op->use_cache) &&
        op->attempt < st.cfg.max_read_attempts) {
      for (const auto& k : op->call.keys) st.locations->erase(k);
      op->use_cache = false;
      return start_get(self, op);
    }
    if (op->stale) {
      return op->fail(
          Status(Errc::conflict,
                 "gave up after " + std::to_string(op->attempt) +
                     " attempts: every located version was replaced before it could be read"));
    }
    // Whatever failed, the cached locations of these keys are suspect.
    for (const auto& k : op->call.keys) st.locations->erase(k);
    return op->fail(r.status());
  }
  if (auto s = finish_unpack(op->unpack); !s.ok()) return op->fail(s);
  op->call.promise->set_value(std::move(op->out));
}

// Asks the controller for the records of `keys`, pinning the objects
// found until `op` unpins (or the request timeout passes).
void locate_pinned(client_pointer self, const std::shared_ptr<GetOp>& op,
                   std::function<void(Result<std::vector<wire::KeyRecord>>)> k) {
  const auto ttl = static_cast<std::uint64_t>(self->state.cfg.request_timeout.count());
  ask(self, self->state.controller, protocol::locate_pinned_atom::value, op->call.keys, ttl)
      .then(
          [=](std::uint64_t pin, std::vector<wire::KeyRecord>& records) {
            op->pin = pin;
            k(std::move(records));  // not cached: the next read needs no pin
          },
          [=](caf::error& e) { k(from_caf_error(e, "locate at controller")); });
}

void start_get(client_pointer self, const std::shared_ptr<GetOp>& op);

// The shards of `rec` in the order a read prefers them: those on volumes
// no read of this call failed at first. Notes whether a key kept as
// copies has another copy to fall over to.
std::vector<const wire::ShardRecord*> by_preference(GetOp& op, const wire::KeyRecord& rec) {
  std::vector<const wire::ShardRecord*> out;
  for (const auto& s : rec.shards) {
    if (op.avoid.count(s.volume_id) == 0) out.push_back(&s);
  }
  if (rec.copied() && out.size() > 1) op.other_copies = true;
  for (const auto& s : rec.shards) {
    if (op.avoid.count(s.volume_id) != 0) out.push_back(&s);
  }
  return out;
}

// The reads of record `i`, stored in shards: each distinct box once
// (replicas are not read twice), and only those that overlap the box
// asked for, into the caller's tensor or a new one.
Status shard_targets(GetOp& op, std::size_t i, const wire::KeyRecord& rec,
                     std::map<std::string, std::vector<ReadTarget>>& by_volume) {
  const TensorSlice want = i < op.call.slices.size() && op.call.slices[i]
                               ? *op.call.slices[i]
                               : TensorSlice::full(rec.shape);
  std::byte* dst = nullptr;
  if (op.call.mode == GetMode::into) {
    // Boxes are cut out of their shards by host copies: a GPU
    // destination is assembled in host memory, then copied over.
    auto at = contiguous_target(op.call.dsts[i], op.unpack, true);
    if (!at.ok()) return at.status();
    dst = *at;
  } else {
    auto t = Tensor::empty(rec.dtype, want.local_shape());
    if (!t.ok()) return t.status();
    dst = static_cast<std::byte*>(t->data());
    op.out.tensors.push_back(std::move(t).value());
  }
  std::vector<TensorSlice> seen;
  for (const auto* at : by_preference(op, rec)) {
    const auto& shard = *at;
    if (std::find(seen.begin(), seen.end(), shard.slice) != seen.end()) continue;
    seen.push_back(shard.slice);
    auto both = shard.slice.intersect(want);
    if (!both || both->empty()) continue;
    ReadTarget target;
    target.object_id = shard.object_id;
    target.dst = dst;
    target.nbytes = shard.nbytes;
    target.box = ReadTarget::Box{shard.slice, want, *both, dtype_size(rec.dtype)};
    target.place = shard.place;
    by_volume[shard.volume_id].push_back(std::move(target));
  }
  return Status();
}

// The read of record `i`, stored whole: into the caller's tensor (or its
// bucket's scatter), a new tensor, the object's bytes, or a view.
Status object_target(GetOp& op, std::size_t i, const wire::KeyRecord& rec, const Scatter* scatter,
                     std::map<std::string, std::vector<ReadTarget>>& by_volume) {
  const auto& shard = *by_preference(op, rec).front();
  std::byte* dst = nullptr;
  if (op.call.mode == GetMode::object) {
    try {
      op.out.object.assign(shard.nbytes, '\0');
    } catch (const std::bad_alloc&) {
      return Status(Errc::out_of_capacity,
                    "cannot allocate " + std::to_string(shard.nbytes) + " bytes for the object");
    }
    dst = reinterpret_cast<std::byte*>(op.out.object.data());
    op.out.object_format = rec.object_format;
    op.out.version = rec.version;
  } else if (op.call.mode == GetMode::view) {
    op.out.tensors.emplace_back();  // filled by the read
  } else if (op.call.mode == GetMode::tensor) {
    auto t = Tensor::empty(rec.dtype, rec.shape);
    if (!t.ok()) return t.status();
    dst = static_cast<std::byte*>(t->data());
    op.out.tensors.push_back(std::move(t).value());
  } else if (!scatter) {
    auto at = contiguous_target(op.call.dsts[i], op.unpack);
    if (!at.ok()) return at.status();
    dst = *at;
  }
  ReadTarget target;
  if (scatter) target.scatter = op.call.scatters[i];
  target.object_id = shard.object_id;
  target.dst = dst;
  target.nbytes = shard.nbytes;
  target.place = shard.place;
  if (op.call.mode == GetMode::into && op.call.dsts[i].dtype() != rec.dtype) {
    // A cast read (checked by check_record): the object's elements, of
    // the stored dtype, land converted in the destination's.
    target.cast_to = op.call.dsts[i].dtype();
    target.dtype = rec.dtype;
    target.shape = rec.shape;
  }
  // Straight into GPU memory (a strided GPU view was given a host
  // temporary instead).
  target.device = op.call.mode == GetMode::into && !scatter && on_device(op.call.dsts[i]) &&
                  dst == static_cast<std::byte*>(op.call.dsts[i].data());
  if (op.call.mode == GetMode::view) {
    target.view = &op.out.tensors.back();
    target.dtype = rec.dtype;
    target.shape = rec.shape;
  }
  by_volume[shard.volume_id].push_back(std::move(target));
  return Status();
}

// `read` of volume `vid`, which adds `vid` to op->avoid when it fails
// (written on a transport's thread, read once every read ended).
Future<void> noting_failure(const std::shared_ptr<GetOp>& op, const std::string& vid,
                            Future<void> read) {
  auto done = std::make_shared<Promise<void>>();
  auto out = done->future();
  read.on_complete([op, vid, done](const Result<void>& r) {
    if (r.ok()) return (void)done->set_value();
    {
      std::lock_guard<std::mutex> hold(op->avoid_mu);
      op->avoid.insert(vid);
      op->failed_at_volume = true;
    }
    done->set_error(r.status());
  });
  return out;
}

// Every read `records` ask for, by volume.
Status read_targets(GetOp& op, const std::vector<wire::KeyRecord>& records,
                    std::map<std::string, std::vector<ReadTarget>>& by_volume) {
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& rec = records[i];
    const Scatter* scatter = op.call.mode == GetMode::into && i < op.call.scatters.size()
                                 ? op.call.scatters[i].get()
                                 : nullptr;
    const bool in_shards = assembled(op, i, rec);
    if (scatter && in_shards) {
      // A packed bucket is one whole object; shards mean another writer
      // stored something else under its key.
      return Status(Errc::wrong_kind,
                    "'" + op.call.keys[i] + "' is stored in shards, not as one object");
    }
    MESHSTORE_RETURN_IF_ERROR(in_shards ? shard_targets(op, i, rec, by_volume)
                                        : object_target(op, i, rec, scatter, by_volume));
  }
  return Status();
}

// The records the controller (or the cache) gave for `op`'s keys: checked
// before any byte moves (a failed check leaves the caller's destinations
// untouched), then read from their volumes.
void read_records(client_pointer self, const std::shared_ptr<GetOp>& op,
                  Result<std::vector<wire::KeyRecord>> records) {
  if (!records.ok()) {
    // The controller died with this locate in flight: a read is asked
    // again of the controller the store fails over to.
    const bool again = wait_for_store(
        self,
        [self, op] {
          op->pin = 0;  // the dead controller's
          op->use_cache = false;
          --op->attempt;
          start_get(self, op);
        },
        [op](const Status& s) { op->fail(s); });
    if (!again) op->fail(records.status());
    return;
  }
  if (records->size() != op->call.keys.size()) {
    return op->fail(Status(Errc::protocol_error,
                           "controller answered " + std::to_string(records->size()) +
                               " records for " + std::to_string(op->call.keys.size()) + " keys"));
  }
  // Check everything before any byte moves: a failed check leaves the
  // caller's destinations untouched.
  for (std::size_t i = 0; i < records->size(); ++i) {
    if (auto s = check_record(*op, i, (*records)[i]); !s.ok()) {
      // A cached record may be stale (another process changed the key's
      // shape, dtype or kind, or removed it): ask the controller once
      // before reporting.
      if (op->use_cache) {
        for (const auto& k : op->call.keys) self->state.locations->erase(k);
        op->use_cache = false;
        --op->attempt;
        return start_get(self, op);
      }
      return op->fail_named(s);
    }
  }
  if (!touch_begin(op->call.guard)) {  // cancelled: read nothing
    op->unpin();
    return (void)op->call.promise->set_error(Status(Errc::cancelled, op->what + ": cancelled"));
  }
  op->out = GetOutput{};
  op->out.tensors.reserve(records->size());  // view targets point into it
  op->unpack.clear();
  op->stale = false;
  op->other_copies = false;
  op->failed_at_volume = false;
  std::map<std::string, std::vector<ReadTarget>> by_volume;
  if (auto s = read_targets(*op, *records, by_volume); !s.ok()) {
    // A failure before the reads start ends the touch it began.
    touch_end(op->call.guard);
    return op->fail(s);
  }
  auto stale = std::make_shared<bool>(false);
  std::vector<Future<void>> groups;
  for (auto& [vid, targets] : by_volume) {
    auto read = read_from_volume(self, vid, std::move(targets), op->pin != 0, stale);
    groups.push_back(noting_failure(op, vid, std::move(read)));
  }
  await(self, settle_all(std::move(groups)), [=](const Result<void>& r) {
    op->stale = *stale;
    finish_get(self, op, r);  // unpacks into the destinations, or reads again
    touch_end(op->call.guard);
  });
}

void start_get(client_pointer self, const std::shared_ptr<GetOp>& op) {
  ++op->attempt;
  op->owner = self;
  auto on_records = [=](Result<std::vector<wire::KeyRecord>> records) {
    read_records(self, op, std::move(records));
  };
  if (op->pin_next) return locate_pinned(self, op, std::move(on_records));
  locate(self, op->call.keys, op->use_cache, std::move(on_records));
}

}  // namespace

void handle_get(client_pointer self, GetCall call) {
  auto op = std::make_shared<GetOp>();
  op->what = describe(call.op, call.keys);
  op->use_cache = !call.fresh;
  op->call = std::move(call);
  start_get(self, op);
}

}  // namespace meshstore::client
