// Reading a stored state dict as one snapshot (into the caller's tensors, or
// into new ones), planned against its manifest.

#include "meshstore/state_dicts/read_plan.hpp"

#include <algorithm>
#include <cstring>
#include <functional>

#include "meshstore/client/fast_path.hpp"
#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/protocol/limits.hpp"
#include "meshstore/state_dicts/scratch_pool.hpp"
#include "meshstore/tensor.hpp"
#include "meshstore/transports/copy_engine.hpp"

namespace meshstore::state_dicts {

using internal::cuda::on_device;
using state_dicts::ScratchPool;

namespace {

// What a read does when the structure it planned for changed under it.
Status gave_up(const std::string& op, const std::string& key) {
  return Status(Errc::conflict, op + " '" + key + "': a writer changed its layout during each of " +
                                    std::to_string(kMaxStateDictAttempts) + " attempts");
}

// "a, b, c and 4 more".
std::string name_list(const std::vector<std::string>& names) {
  std::string out;
  const std::size_t shown = std::min<std::size_t>(names.size(), 8);
  for (std::size_t i = 0; i < shown; ++i) out += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > shown) out += " and " + std::to_string(names.size() - shown) + " more";
  return out;
}

const TensorSlice* box_of(const Boxes* boxes, const std::string& name) {
  if (!boxes) return nullptr;
  auto it = boxes->find(name);
  return it == boxes->end() ? nullptr : &it->second;
}

}  // namespace

std::shared_ptr<ManifestCache> make_manifest_cache() { return std::make_shared<ManifestCache>(); }

namespace {

// Which destination entry each manifest entry goes to (`found`), checked:
// each has a destination of its kind, of its dtype (or one `cast`
// converts) and shape (or box), and the destination names nothing more;
// else every mismatch, named, with the code of the worst.
Status match_destination(const std::string& key, const std::string& op, const Manifest& m,
                         const StateDict& dst, const Boxes* boxes, bool cast,
                         std::vector<const StateDict::Entry*>& found) {
  std::vector<std::string> missing, extra, mismatched;
  bool dtype_off = false, shape_off = false, castable = false;
  // Which of the destination's entries the manifest names (the rest are
  // extra).
  const auto& dst_entries = dst.entries();
  found.assign(m.entries.size(), nullptr);
  std::vector<char> named(dst_entries.size(), 0);
  for (std::size_t k = 0; k < m.entries.size(); ++k) {
    const auto& me = m.entries[k];
    // A destination laid out like the manifest (the usual case) is matched
    // by position; names are unique, so the lookup would find the same.
    const auto* e = k < dst_entries.size() && dst_entries[k].name == me.name ? &dst_entries[k]
                                                                             : dst.find(me.name);
    found[k] = e;
    if (e) named[static_cast<std::size_t>(e - dst_entries.data())] = 1;
    if (!e) {
      missing.push_back(me.name);
    } else if (me.kind == EntryKind::value && e->is_tensor()) {
      mismatched.push_back(me.name + " (stored a value, destination a tensor)");
    } else if (me.kind != EntryKind::value && !e->is_tensor()) {
      mismatched.push_back(me.name + " (stored a tensor, destination a value)");
    } else if (me.kind != EntryKind::value && me.dtype != e->view.dtype() &&
               !(cast && can_cast(me.dtype, e->view.dtype()) && !box_of(boxes, me.name) &&
                 !on_device(e->view))) {
      dtype_off = true;
      if (can_cast(me.dtype, e->view.dtype())) castable = true;
      mismatched.push_back(me.name + " (stored " + std::string(dtype_name(me.dtype)) +
                           ", destination " + std::string(dtype_name(e->view.dtype())) +
                           (cast ? ": a box or a GPU destination is not converted" : "") + ")");
    } else if (const TensorSlice* box = box_of(boxes, me.name);
               box && me.kind != EntryKind::value) {
      if (box->global_shape() != me.shape) {
        shape_off = true;
        mismatched.push_back(me.name + " (stored " + shape_to_string(me.shape) + ", box " +
                             box->to_string() + ")");
      } else if (box->local_shape() != e->view.shape()) {
        shape_off = true;
        mismatched.push_back(me.name + " (box " + box->to_string() + " has shape " +
                             shape_to_string(box->local_shape()) + ", destination " +
                             shape_to_string(e->view.shape()) + ")");
      }
    } else if (me.kind != EntryKind::value && me.shape != e->view.shape()) {
      shape_off = true;
      mismatched.push_back(me.name + " (stored " + shape_to_string(me.shape) + ", destination " +
                           shape_to_string(e->view.shape()) + ")");
    }
  }
  for (std::size_t i = 0; i < dst_entries.size(); ++i) {
    if (!named[i]) extra.push_back(dst_entries[i].name);
  }
  if (boxes) {
    for (const auto& [name, box] : *boxes) {
      const auto* e = dst.find(name);
      if (!e || !e->is_tensor()) {
        mismatched.push_back(name + " (a box for " + (e ? "a value" : "no destination") + ")");
      } else if (!named[static_cast<std::size_t>(e - dst_entries.data())]) {
        extra.push_back(name);
      }
    }
  }
  if (!missing.empty() || !extra.empty() || !mismatched.empty()) {
    std::string msg = op + " '" + key + "': the destination does not match the stored state dict:";
    if (!missing.empty()) msg += " missing " + name_list(missing) + ";";
    if (!extra.empty()) msg += " extra " + name_list(extra) + ";";
    if (!mismatched.empty()) msg += " mismatched " + name_list(mismatched) + ";";
    msg.pop_back();
    if (castable && !cast) {
      msg += " (ReadOptions::cast converts float32, bfloat16 and float16 as they are read)";
    }
    // A destination that does not fit is bad input, whatever else differs.
    const Errc code = dtype_off   ? Errc::dtype_mismatch
                      : shape_off ? Errc::shape_mismatch
                                  : Errc::invalid_argument;
    return Status(code, msg);
  }
  return Status();
}

// Whether the packed entries can be copied straight out of their buckets
// as they are read: whole host tensors of their stored dtype, laid out
// contiguously.
bool scatterable(const Manifest& m, const std::vector<const StateDict::Entry*>& found,
                 const Boxes* boxes) {
  for (std::size_t k = 0; k < m.entries.size(); ++k) {
    const auto& me = m.entries[k];
    if (me.kind != EntryKind::packed || found[k]->view.numel() == 0) continue;
    const auto& v = found[k]->view;
    if (box_of(boxes, me.name) || v.dtype() != me.dtype || on_device(v) || !v.is_contiguous()) {
      return false;
    }
  }
  return true;
}

// The reads of the packed entries' buckets, added to `into`: scattered
// straight into the destinations, or into one scratch blob (plan.blob)
// that finish_into unpacks.
Status plan_buckets(const std::string& key, const std::string& op, const Manifest& m,
                    const std::vector<const StateDict::Entry*>& found, bool scatter, IntoPlan& plan,
                    client::GetCall& into) {
  const std::size_t first_bucket = into.keys.size();
  if (m.packed_bytes > 0 && scatter) {
    std::vector<std::shared_ptr<client::Scatter>> pieces(m.buckets());
    for (auto& p : pieces) p = std::make_shared<client::Scatter>();
    for (std::size_t k = 0; k < m.entries.size(); ++k) {
      const auto& me = m.entries[k];
      if (me.kind != EntryKind::packed || me.nbytes() == 0) continue;
      const std::size_t b = m.bucket_of(me.offset);
      pieces[b]->pieces.push_back(
          client::Scatter::Piece{me.offset - m.bucket_begin(b),
                                 static_cast<std::byte*>(found[k]->view.data()), me.nbytes()});
    }
    into.scatters.resize(first_bucket);
    for (std::size_t b = 0; b < m.buckets(); ++b) {
      into.keys.push_back(blob_key(key, b));
      // No bytes: checked against the bucket's record, then scattered.
      into.dsts.push_back(
          TensorView(nullptr, DType::uint8, {static_cast<std::int64_t>(m.bucket_bytes(b))}));
      into.scatters.push_back(std::move(pieces[b]));
    }
  } else if (m.packed_bytes > 0) {
    // One scratch blob; each bucket is read into its range of it.
    // Reused from call to call (ScratchPool): no page faults per read.
    // Page-locked where entries go on to a GPU: finish_into copies them
    // there in one transfer (copy_pieces).
    bool to_gpu = false;
    for (std::size_t k = 0; k < m.entries.size(); ++k) {
      to_gpu = to_gpu || (m.entries[k].kind == EntryKind::packed && on_device(found[k]->view));
    }
    auto storage = to_gpu ? internal::cuda::pinned(m.packed_bytes)
                          : ScratchPool::instance().take(m.packed_bytes);
    if (!storage) {
      return Status(Errc::out_of_capacity, op + ": cannot allocate " +
                                               std::to_string(m.packed_bytes) + " bytes to unpack");
    }
    plan.blob = Tensor::wrap(std::move(storage), DType::uint8,
                             {static_cast<std::int64_t>(m.packed_bytes)}, false);
    for (std::size_t b = 0; b < m.buckets(); ++b) {
      into.keys.push_back(blob_key(key, b));
      into.dsts.push_back(TensorView(static_cast<std::byte*>(plan.blob.data()) + m.bucket_begin(b),
                                     DType::uint8, {static_cast<std::int64_t>(m.bucket_bytes(b))}));
    }
  }
  return Status();
}

}  // namespace

Result<std::shared_ptr<IntoPlan>> plan_into(const std::string& key, StateDict* dst,
                                            const std::string& op,
                                            std::shared_ptr<const Snapshot> snap,
                                            client::GetCall& into, const Boxes* boxes, bool cast,
                                            bool scatter) {
  auto plan = std::make_shared<IntoPlan>();
  plan->snap = std::move(snap);
  const Manifest& m = plan->snap->manifest;
  into.op = op;
  into.mode = client::GetMode::into;
  into.cast = cast;
  std::vector<const StateDict::Entry*> found;
  MESHSTORE_RETURN_IF_ERROR(match_destination(key, op, m, *dst, boxes, cast, found));
  auto scratch = [&](std::int64_t n) { return Tensor::empty(DType::uint8, {n}); };
  auto manifest_copy = scratch(static_cast<std::int64_t>(plan->snap->bytes.size()));
  if (!manifest_copy.ok()) return manifest_copy.status();
  plan->manifest_copy = std::move(manifest_copy).value();
  into.keys.push_back(key);
  into.dsts.push_back(plan->manifest_copy.view());
  scatter = scatter && scatterable(m, found, boxes);
  MESHSTORE_RETURN_IF_ERROR(plan_buckets(key, op, m, found, scatter, *plan, into));
  for (std::size_t k = 0; k < m.entries.size(); ++k) {
    const auto& me = m.entries[k];
    const auto* e = found[k];
    const TensorSlice* box = box_of(boxes, me.name);
    if (me.kind != EntryKind::value && e->view.dtype() != me.dtype) plan->casts = true;
    if (me.kind == EntryKind::packed) {
      if (e->view.numel() == 0 || scatter) continue;
      plan->unpack.push_back(IntoPlan::Unpack{me.offset, e->view, &me, std::nullopt});
      if (box) plan->unpack.back().box = *box;
    } else if (me.kind == EntryKind::value) {
      auto v = scratch(me.shape.empty() ? 0 : me.shape.front());
      if (!v.ok()) return v.status();
      plan->values.emplace_back(me.name, std::move(v).value());
      into.keys.push_back(entry_key(key, me.name));
      into.dsts.push_back(plan->values.back().second.view());
    } else {
      if (box) {
        into.slices.resize(into.keys.size());
        into.slices.push_back(*box);
      }
      into.keys.push_back(entry_key(key, me.name));
      into.dsts.push_back(e->view);
    }
  }
  return plan;
}

Status finish_into(const IntoPlan& plan, StateDict* dst) {
  const auto* base = static_cast<const std::byte*>(plan.blob.data());
  // Whole entries for contiguous GPU memory go there together, after the
  // loop: one copy of the blob and one kernel per GPU, not a copy each.
  std::vector<internal::cuda::DevicePiece> to_gpu;
  for (const auto& u : plan.unpack) {
    if (!u.box && u.dst.dtype() != u.entry->dtype) {
      // Converted as it is unpacked (ReadOptions::cast; host destinations).
      const TensorView src(const_cast<std::byte*>(base + u.offset), u.entry->dtype, u.entry->shape);
      if (u.dst.is_contiguous()) {
        MESHSTORE_RETURN_IF_ERROR(cast_to(src, u.dst.dtype(), u.dst.data()));
      } else {
        auto tmp = Tensor::empty(u.dst.dtype(), u.dst.shape());
        if (!tmp.ok()) return tmp.status();
        MESHSTORE_RETURN_IF_ERROR(cast_to(src, u.dst.dtype(), tmp->data()));
        unpack_from(tmp->data(), u.dst);
      }
      continue;
    }
    if (!u.box) {
      if (on_device(u.dst) && u.dst.is_contiguous()) {
        to_gpu.push_back(internal::cuda::DevicePiece{u.dst.data(), u.offset, u.dst.nbytes(),
                                                     u.dst.device().index});
      } else if (on_device(u.dst)) {
        MESHSTORE_RETURN_IF_ERROR(internal::cuda::to_device(u.dst, base + u.offset));
      } else {
        unpack_from(base + u.offset, u.dst);
      }
      continue;
    }
    // The box of the whole (contiguous) entry, as a strided view.
    const Strides whole = contiguous_strides(u.entry->shape);
    std::int64_t first = 0;
    for (std::size_t d = 0; d < whole.size(); ++d) first += u.box->offsets()[d] * whole[d];
    const TensorView src(const_cast<std::byte*>(base + u.offset) +
                             first * static_cast<std::int64_t>(dtype_size(u.entry->dtype)),
                         u.entry->dtype, u.box->local_shape(), whole);
    // A GPU destination: cut on the host, then one copy to the device.
    MESHSTORE_RETURN_IF_ERROR(internal::cuda::copy_view(src, u.dst));
  }
  if (!to_gpu.empty()) {
    MESHSTORE_RETURN_IF_ERROR(
        internal::cuda::copy_pieces(const_cast<std::byte*>(base), to_gpu, false)
            .with_context(std::to_string(to_gpu.size()) + " packed entries to their GPU"));
  }
  for (const auto& [name, bytes] : plan.values) {
    auto v = Value::decode(std::string(static_cast<const char*>(bytes.data()), bytes.nbytes()));
    if (!v.ok()) return v.status().with_context("value '" + name + "'");
    MESHSTORE_RETURN_IF_ERROR(dst->set_value(name, *v));
  }
  return Status();
}

namespace {

// Plans the read against `snap`'s manifest, then reads the manifest again
// together with every entry in one call (one snapshot of the index). If that
// manifest differs from `snap`'s, a writer changed the layout in between:
// plan again with the new one.
// Reads every key of `into` straight from same-host volumes' shared memory
// on this thread, as one snapshot (FastPath::read_together): host
// destinations of each key's dtype and shape or a bucket's scatter, no
// boxes. hit: read; miss: not possible here, or (`*too_large` set) more
// than `max_bytes` in all, nothing copied; stale: an object changed. The
// actors read on anything but a hit, writing every destination again.
client::FastPath::Outcome read_directly(client::FastPath& fast, const client::GetCall& into,
                                        std::uint64_t max_bytes, bool* too_large) {
  using Entry = client::FastPath::Entry;
  for (const auto& box : into.slices) {
    if (box) return client::FastPath::Outcome::miss;
  }
  if (into.fresh || into.mode != client::GetMode::into) return client::FastPath::Outcome::miss;
  std::uint64_t total = 0;
  auto accept = [&](std::size_t i, const Entry& e) {
    const auto& dst = into.dsts[i];
    total += e.nbytes;
    if (total > max_bytes) {
      *too_large = true;
      return false;
    }
    return e.kind == wire::ObjectKind::tensor && e.dtype == dst.dtype() && e.shape == dst.shape() &&
           dst.is_contiguous() && !on_device(dst) && e.nbytes == dst.nbytes();
  };
  // Every key's bytes in one batch: a model's tensors of a few MiB each
  // keep every copy thread busy at once.
  auto consume = [&](const std::vector<Entry>& entries, const std::vector<const std::byte*>& data) {
    std::vector<transports::CopyEngine::Copy> copies;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const auto n = static_cast<std::size_t>(entries[i].nbytes);
      const auto* scatter = i < into.scatters.size() ? into.scatters[i].get() : nullptr;
      if (!scatter) {
        copies.push_back({static_cast<std::byte*>(into.dsts[i].data()), data[i], n});
      } else if (!client::scatter_copies(*scatter, data[i], n, &copies).ok()) {
        return false;
      }
    }
    transports::CopyEngine::instance().copy_all_here(copies);
    return true;
  };
  return fast.read_together(into.keys, accept, consume);
}

// A read_state_dict_into call: what every attempt of it reads, into what.
struct IntoCall {
  caf::actor_addr client;
  std::string key;
  StateDict* dst;
  std::string op;
  CacheSlot slot;
  std::shared_ptr<const Boxes> boxes;
  bool cast;
};

// Reads `into` for `call`, its answer to `settle`: `fast` (null: none)
// tries read_directly first, up to limits::kSnapshotHereBytes on this
// thread (the caller's, or the client actor's after a locate, which a
// longer copy would hold up for the whole process); a larger snapshot on
// the client's waiting thread. Else (a miss) the actors.
void send_read(const IntoCall& call, client::GetCall into,
               const std::shared_ptr<client::FastPath>& fast,
               std::function<void(const Result<client::GetOutput>&)> settle) {
  const std::string what = call.op + " '" + call.key + "'";
  if (fast) {
    bool too_large = false;
    const auto here = read_directly(*fast, into, protocol::limits::kSnapshotHereBytes, &too_large);
    if (here == client::FastPath::Outcome::hit) return settle(client::GetOutput{});
    if (too_large) {
      client::FastPath* raw = fast.get();  // its waiting thread's jobs end before it
      raw->defer([raw, client = call.client, into = std::move(into), settle, what]() mutable {
        bool unused = false;
        const auto there = read_directly(*raw, into, ~std::uint64_t{0}, &unused);
        if (there == client::FastPath::Outcome::hit) return settle(client::GetOutput{});
        call_client(client, protocol::store_get_atom::value, std::move(into), what)
            .on_complete(settle);
      });
      return;
    }
  }
  call_client(call.client, protocol::store_get_atom::value, std::move(into), what)
      .on_complete(settle);
}

// One attempt of `call` planned from `snap` (`guess`: a cached layout,
// checked against the stored one when it does not fit). `fast` as
// send_read; the attempts after a first one run on the actors' threads and
// take the actors.
Future<void> read_into_attempt(std::shared_ptr<const IntoCall> call,
                               std::shared_ptr<const Snapshot> snap, int tries, bool guess,
                               const std::shared_ptr<client::FastPath>& fast = nullptr) {
  const auto& op = call->op;
  if (tries >= kMaxStateDictAttempts) return make_error_future<void>(gave_up(op, call->key));
  client::GetCall into;
  auto planned =
      plan_into(call->key, call->dst, op, std::move(snap), into, call->boxes.get(), call->cast);
  if (!planned.ok()) {
    // A cached layout may be stale: check against the stored one first.
    if (guess) {
      return manifest_of(call->client, call->key, op).then([=](const Snapshot& fresh) {
        return read_into_attempt(call, std::make_shared<const Snapshot>(fresh), tries, false);
      });
    }
    return make_error_future<void>(planned.status());
  }
  auto plan = std::move(planned).value();
  auto done = std::make_shared<Promise<void>>(Status(Errc::shutdown, op + ": dropped"));
  auto settle = [=](const Result<client::GetOutput>& r) {
    auto again = [=](const Snapshot& fresh) {
      read_into_attempt(call, std::make_shared<const Snapshot>(fresh), tries + 1, false)
          .on_complete([done](const Result<void>& x) { done->set(x); });
    };
    if (!r.ok()) {
      // A layout change between our two reads shows as a mismatch or a
      // missing key: if the manifest moved on, plan again; else report.
      const auto code = r.status().code();
      if (code != Errc::shape_mismatch && code != Errc::dtype_mismatch && code != Errc::not_found &&
          code != Errc::wrong_kind) {
        return (void)done->set_error(r.status());
      }
      manifest_of(call->client, call->key, op).on_complete([=](const Result<Snapshot>& fresh) {
        if (fresh.ok() && fresh->bytes != plan->snap->bytes) return again(*fresh);
        // A guess read keys that may never have existed: the stored
        // manifest's own error names the problem better.
        done->set_error(guess && !fresh.ok() ? fresh.status() : r.status());
      });
      return;
    }
    // The manifest read with the entries: the one planned with (the
    // usual case, compared without decoding it) or a writer's newer one.
    const auto& planned_bytes = plan->snap->bytes;
    if (plan->manifest_copy.nbytes() != planned_bytes.size() ||
        std::memcmp(plan->manifest_copy.data(), planned_bytes.data(), planned_bytes.size()) != 0) {
      auto now = decode_snapshot(plan->manifest_copy, call->key, op);
      if (!now.ok()) return (void)done->set_error(now.status());
      return again(*now);
    }
    if (call->slot.cache) call->slot.cache->put(call->slot.key, plan->snap);
    done->set(finish_into(*plan, call->dst));
  };
  send_read(*call, std::move(into), fast, settle);
  return done->future();
}

}  // namespace

Future<void> read_state_dict_into(const caf::actor_addr& client, const std::string& key,
                                  StateDict& sd, const std::string& op, const CacheSlot& slot,
                                  std::shared_ptr<const Boxes> boxes, bool cast,
                                  const std::shared_ptr<client::FastPath>& fast) {
  auto call = std::make_shared<const IntoCall>(
      IntoCall{client, key, &sd, op, slot, std::move(boxes), cast});
  if (slot.cache) {
    if (auto snap = slot.cache->find(slot.key)) {
      return read_into_attempt(call, std::move(snap), 0, true, fast);
    }
  }
  return manifest_of(client, key, op).then([=](const Snapshot& snap) {
    return read_into_attempt(call, std::make_shared<const Snapshot>(snap), 0, false);
  });
}

Future<StateDict> read_state_dict(const caf::actor_addr& client, const std::string& key,
                                  const std::string& op, Snapshot snap, int tries) {
  if (tries >= kMaxStateDictAttempts) return make_error_future<StateDict>(gave_up(op, key));
  const Manifest m = snap.manifest;
  client::GetCall call;
  call.op = op;
  call.mode = client::GetMode::tensor;
  call.keys.push_back(key);  // the manifest again, read in the same snapshot as the entries
  const std::size_t buckets = m.buckets();
  for (std::size_t b = 0; b < buckets; ++b) call.keys.push_back(blob_key(key, b));
  for (const auto& me : m.entries) {
    if (me.kind != EntryKind::packed) call.keys.push_back(entry_key(key, me.name));
  }
  // Builds the state dict from one snapshot's read.
  auto build = [=](const client::GetOutput& out) -> Future<StateDict> {
    auto now = decode_snapshot(out.tensors.front(), key, op);
    if (!now.ok()) return make_error_future<StateDict>(now.status());
    // A writer changed the layout between our reads: plan again.
    if (now->bytes != snap.bytes) return read_state_dict(client, key, op, *now, tries + 1);
    StateDict sd;
    std::size_t t = 1 + buckets;
    // Packed tensors are views into their bucket's allocation.
    std::vector<std::shared_ptr<Tensor>> blobs;
    for (std::size_t b = 0; b < buckets; ++b) {
      if (out.tensors.size() <= 1 + b || out.tensors[1 + b].nbytes() < m.bucket_bytes(b)) {
        return make_error_future<StateDict>(
            Status(Errc::protocol_error,
                   op + " '" + key + "': the packed blob is shorter than its table"));
      }
      blobs.push_back(std::make_shared<Tensor>(out.tensors[1 + b]));
    }
    for (const auto& me : m.entries) {
      Status st;
      if (me.kind == EntryKind::value) {
        const Tensor& bytes = out.tensors.at(t++);
        auto v = Value::decode(std::string(static_cast<const char*>(bytes.data()), bytes.nbytes()));
        st = v.ok() ? sd.insert(me.name, *v) : v.status().with_context("value '" + me.name + "'");
      } else if (me.kind == EntryKind::packed && (blobs.empty() || me.nbytes() == 0)) {
        auto empty = Tensor::empty(me.dtype, me.shape);  // 0 bytes: nothing stored
        st = empty.ok() ? sd.insert(me.name, std::move(empty).value()) : empty.status();
      } else if (me.kind == EntryKind::packed) {
        const std::size_t b = m.bucket_of(me.offset);
        const auto& blob = blobs[b];
        std::shared_ptr<std::byte> alias(
            blob, static_cast<std::byte*>(blob->data()) + (me.offset - m.bucket_begin(b)));
        st = sd.insert(me.name, Tensor::wrap(std::move(alias), me.dtype, me.shape, false));
      } else {
        st = sd.insert(me.name, out.tensors.at(t++));
      }
      if (!st.ok()) return make_error_future<StateDict>(st);
    }
    return make_ready_future(std::move(sd));
  };
  // An entry that vanished between our reads (a writer dropped it, or
  // replaced the key's kind) shows as an error: if the manifest moved on,
  // plan again with it; else the error stands.
  auto result = std::make_shared<Promise<StateDict>>(Status(Errc::shutdown, op + ": dropped"));
  auto finish = [result](const Result<StateDict>& x) { result->set(x); };
  call_client(client, protocol::store_get_atom::value, std::move(call), op + " '" + key + "'")
      .on_complete([=](const Result<client::GetOutput>& r) {
        if (r.ok()) return build(*r).on_complete(finish);
        const auto code = r.status().code();
        if (code != Errc::not_found && code != Errc::wrong_kind) {
          return (void)result->set_error(r.status());
        }
        manifest_of(client, key, op).on_complete([=](const Result<Snapshot>& fresh) {
          if (fresh.ok() && fresh->bytes != snap.bytes) {
            return read_state_dict(client, key, op, *fresh, tries + 1).on_complete(finish);
          }
          result->set_error(r.status());
        });
      });
  return result->future();
}

}  // namespace meshstore::state_dicts
