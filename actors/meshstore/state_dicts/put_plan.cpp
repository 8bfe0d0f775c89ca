// Planning a state dict's put, and sending it.

#include "meshstore/state_dicts/put_plan.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <vector>

#include "meshstore/client/calls.hpp"
#include "meshstore/client/channel_put.hpp"
#include "meshstore/client/fast_path.hpp"
#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/protocol/checks.hpp"
#include "meshstore/protocol/fast_get.hpp"
#include "meshstore/state_dicts/client_calls.hpp"
#include "meshstore/state_dicts/manifest.hpp"
#include "meshstore/tensor.hpp"
#include "meshstore/transports/copy_engine.hpp"

namespace meshstore::state_dicts {

using client::bytes_item;
using internal::cuda::on_device;
using protocol::check_key;

namespace {

// Checks a sharded state dict's layout against the rank's entries.
Status check_layout(const StateDict& sd, const ShardedPart& part, const std::string& op) {
  if (part.rank < 0) {
    return Status(Errc::invalid_argument,
                  op + ": rank must be >= 0, got " + std::to_string(part.rank));
  }
  for (const auto& [name, shard] : *part.layout) {
    const auto* e = sd.find(name);
    if (!e || !e->is_tensor()) {
      return Status(Errc::invalid_argument, op + ": the layout names '" + name + "', " +
                                                (e ? "a value" : "no entry") +
                                                " of the state dict; it must name tensors");
    }
    if (shard.replicas < 1) {
      return Status(Errc::invalid_argument,
                    op + ": entry '" + name + "' has 0 replicas; a box has at least one");
    }
    if (e->view.shape() != shard.slice.local_shape()) {
      return Status(Errc::shape_mismatch, op + ": entry '" + name + "' has shape " +
                                              shape_to_string(e->view.shape()) + ", its slice " +
                                              shard.slice.to_string() + " needs " +
                                              shape_to_string(shard.slice.local_shape()));
    }
  }
  return Status();
}

// The dtype tensor view `v` is stored in under `options`.
DType stored_dtype_of(const TensorView& v, const StateDictPutOptions& options) {
  return options.transfer_dtype && v.dtype() == DType::float32 ? *options.transfer_dtype
                                                               : v.dtype();
}

// Whether `m` is the layout prepare_put gives `sd` (whole, under the options
// its cache key names): the same entries in order, each of the same kind,
// stored dtype and shape (a value: the same encoded size).
bool same_layout(const Manifest& m, const StateDict& sd, const StateDictPutOptions& options) {
  const auto& entries = sd.entries();
  if (m.entries.size() != entries.size()) return false;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    const auto& me = m.entries[i];
    if (me.name != e.name) return false;
    if (e.is_tensor()) {
      if (me.kind == EntryKind::value || me.dtype != stored_dtype_of(e.view, options) ||
          me.shape != e.view.shape()) {
        return false;
      }
    } else if (me.kind != EntryKind::value || me.shape.size() != 1 ||
               static_cast<std::size_t>(me.shape[0]) != e.value->encode().size()) {
      return false;
    }
  }
  return true;
}

// The box entry `name` is of its global tensor (nullptr: whole).
const RankShard* shard_of(const ShardedPart& part, const std::string& name) {
  if (!part.layout) return nullptr;
  auto it = part.layout->find(name);
  return it == part.layout->end() ? nullptr : &it->second;
}

// The layout of `sd` laid out now: its manifest and the manifest's bytes.
std::shared_ptr<const Snapshot> lay_out_now(const StateDict& sd, const StateDictPutOptions& options,
                                            const ShardedPart& part) {
  auto fresh = std::make_shared<Snapshot>();
  Manifest& lm = fresh->manifest;
  lm.entries.reserve(sd.entries().size());
  for (const auto& e : sd.entries()) {
    if (const auto* shard = shard_of(part, e.name)) {
      // Never packed (but an empty tensor holds nothing to store).
      lay_out(lm, e.name, stored_dtype_of(e.view, options), shard->slice.global_shape(), 0,
              options.pack_bucket_bytes);
    } else if (e.is_tensor()) {
      lay_out(lm, e.name, stored_dtype_of(e.view, options), e.view.shape(),
              options.pack_max_tensor_bytes, options.pack_bucket_bytes);
    } else {
      lay_out_value(lm, e.name, *e.value);
    }
  }
  fresh->bytes = encode_manifest(lm);
  return fresh;
}

// A sharded put's group: what every rank must agree on (the manifest's
// checksum), and the keys that commit together.
void set_group(PreparedPut& p, const Manifest& m) {
  const auto& bytes = p.call.stream_manifest;
  auto& group = p.call.group.emplace();
  group.layout = content_checksum(TensorView(const_cast<char*>(bytes.data()), DType::uint8,
                                             {static_cast<std::int64_t>(bytes.size())}));
  group.members.push_back("");
  for (std::size_t b = 0; b < m.buckets(); ++b) group.members.push_back(blob_key("", b));
  for (const auto& me : m.entries) {
    if (me.kind != EntryKind::packed) group.members.push_back("/" + me.name);
  }
}

// Small tensors travel packed into buckets: one object, one transfer and
// one region at the volume per bucket instead of one each. A bucket is
// gathered from the tensors as it is written (straight into the volume's
// memory where it maps: one copy); a tensor that must be converted
// (transfer_dtype) or is strided is packed into a buffer of its own now.
Status add_buckets(PreparedPut& p, const StateDict& sd, const Manifest& m, const std::string& op) {
  std::vector<std::shared_ptr<client::Gather>> buckets(m.buckets());
  for (auto& g : buckets) g = std::make_shared<client::Gather>();
  for (std::size_t i = 0; i < m.entries.size(); ++i) {
    const auto& me = m.entries[i];
    if (me.kind != EntryKind::packed || me.nbytes() == 0) continue;
    const auto& view = sd.entries()[i].view;
    const std::size_t b = m.bucket_of(me.offset);
    auto& g = *buckets[b];
    const std::uint64_t at = me.offset - m.bucket_begin(b);
    if (view.dtype() == me.dtype && view.is_contiguous()) {
      g.pieces.push_back({static_cast<const std::byte*>(view.data()), at, me.nbytes()});
      continue;
    }
    std::shared_ptr<std::byte> copy;
    try {
      copy = std::shared_ptr<std::byte>(new std::byte[me.nbytes()],
                                        std::default_delete<std::byte[]>());
    } catch (const std::bad_alloc&) {
      return Status(Errc::out_of_capacity, op + ": cannot allocate " + std::to_string(me.nbytes()) +
                                               " bytes to pack '" + me.name + "'");
    }
    MESHSTORE_RETURN_IF_ERROR(cast_to(view, me.dtype, copy.get()));
    g.pieces.push_back({copy.get(), at, me.nbytes()});
    g.keep.push_back(std::move(copy));
  }
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    client::PutItem item{
        blob_key("", b),
        TensorView(nullptr, DType::uint8, {static_cast<std::int64_t>(m.bucket_bytes(b))}),
        wire::ObjectKind::tensor, nullptr};
    item.gather = std::move(buckets[b]);
    p.call.items.push_back(std::move(item));
  }
  return Status();
}

// The item of an entry stored under a key of its own (`me`, not packed):
// a value's encoding, or the tensor (cast on the way to the stored dtype),
// or its box (`shard`).
Result<client::PutItem> entry_item(const StateDict::Entry& e, const ManifestEntry& me,
                                   const RankShard* shard, const std::string& op) {
  const auto tensor = wire::ObjectKind::tensor;
  client::PutItem item{"/" + e.name, e.view, tensor, nullptr};
  if (me.kind == EntryKind::value) {
    item = bytes_item("/" + e.name, e.value->encode(), tensor);
  } else if (me.dtype != e.view.dtype()) {
    // Cast on the way: the narrower copy is what moves.
    const std::uint64_t nbytes =
        static_cast<std::uint64_t>(shape_numel(e.view.shape())) * dtype_size(me.dtype);
    std::string cast;
    try {
      cast.assign(nbytes, '\0');
    } catch (const std::bad_alloc&) {
      return Status(Errc::out_of_capacity, op + ": cannot allocate " + std::to_string(nbytes) +
                                               " bytes to cast '" + e.name + "'");
    }
    MESHSTORE_RETURN_IF_ERROR(cast_to(e.view, me.dtype, cast.data()));
    auto owned = std::make_shared<const std::string>(std::move(cast));
    item.view = TensorView(const_cast<char*>(owned->data()), me.dtype, e.view.shape());
    item.owned_bytes = std::move(owned);
  }
  if (shard) {
    item.slice = shard->slice;
    item.replicas = shard->replicas;
    if (shard->replicas > 1) item.checksum = content_checksum(item.view);
  }
  return item;
}

// Both prepare_puts: `hint` (an earlier put's layout) is used when
// same_layout says it fits a whole state dict; `*laid_out` (when given)
// gets the layout used.
Result<std::shared_ptr<PreparedPut>> prepare_put_with(const StateDict& sd, const std::string& op,
                                                      const StateDictPutOptions& options,
                                                      const ShardedPart& part,
                                                      std::shared_ptr<const Snapshot> hint,
                                                      std::shared_ptr<const Snapshot>* laid_out) {
  auto p = std::make_shared<PreparedPut>();
  p->call.op = op;
  if (options.transfer_dtype && (*options.transfer_dtype == DType::float32 ||
                                 !can_cast(DType::float32, *options.transfer_dtype))) {
    return Status(Errc::invalid_argument, op +
                                              ": transfer_dtype must be bfloat16 or float16, got " +
                                              std::string(dtype_name(*options.transfer_dtype)));
  }
  if (part.layout) MESHSTORE_RETURN_IF_ERROR(check_layout(sd, part, op));
  // Whole entries, values, the manifest and the packed buckets are rank
  // 0's to store; every rank stores its boxes.
  const bool whole_too = part.rank == 0;
  // The layout: the hint's when it fits, else laid out now.
  std::shared_ptr<const Snapshot> layout =
      hint && !part.layout && same_layout(hint->manifest, sd, options)
          ? std::move(hint)
          : lay_out_now(sd, options, part);
  if (laid_out && !part.layout) *laid_out = layout;
  const Manifest& m = layout->manifest;
  p->call.stream_manifest = layout->bytes;
  if (part.layout) set_group(*p, m);
  // The manifest and values are stored as uint8 tensors, so one read
  // (one snapshot of the index) fetches them with the tensors.
  if (whole_too) {
    p->call.items.push_back(bytes_item("", p->call.stream_manifest, wire::ObjectKind::tensor));
    MESHSTORE_RETURN_IF_ERROR(add_buckets(*p, sd, m, op));
  }
  for (std::size_t i = 0; i < m.entries.size(); ++i) {
    const auto& e = sd.entries()[i];
    const auto& me = m.entries[i];
    const RankShard* shard = shard_of(part, e.name);
    if (me.kind == EntryKind::packed) continue;
    if (!shard && !whole_too) continue;
    // An empty box adds nothing to the cover (the other ranks' boxes
    // cover the tensor); the entry's key is not empty, or it would be packed.
    if (shard && shard->slice.empty()) continue;
    auto item = entry_item(e, me, shard, op);
    if (!item.ok()) return item.status();
    p->call.items.push_back(std::move(item).value());
  }
  if (part.layout) p->call.stream_manifest.clear();  // no stream of a sharded put
  return p;
}

}  // namespace

std::string layout_key(const std::string& key, const StateDictPutOptions& options) {
  return key + '\0' + std::to_string(options.pack_max_tensor_bytes) + ',' +
         std::to_string(options.pack_bucket_bytes) + ',' +
         (options.transfer_dtype ? std::string(dtype_name(*options.transfer_dtype)) : "-");
}

Result<std::shared_ptr<PreparedPut>> prepare_put(const StateDict& sd, const std::string& op,
                                                 const StateDictPutOptions& options,
                                                 const ShardedPart& part) {
  return prepare_put_with(sd, op, options, part, nullptr, nullptr);
}

Result<std::shared_ptr<PreparedPut>> prepare_put(const StateDict& sd, const std::string& op,
                                                 const StateDictPutOptions& options,
                                                 std::shared_ptr<const Snapshot> hint,
                                                 std::shared_ptr<const Snapshot>* laid_out) {
  return prepare_put_with(sd, op, options, ShardedPart{}, std::move(hint), laid_out);
}

Status name_put(const std::string& key, PreparedPut& p,
                std::optional<std::uint64_t> manifest_version) {
  const std::string op = p.call.op;
  for (auto& item : p.call.items) {
    item.key = key + item.key;
    MESHSTORE_RETURN_IF_ERROR(check_key(op, item.key));
    if (manifest_version && item.key == key) item.expect_version = *manifest_version;
  }
  if (p.call.loan) {
    for (auto& item : p.call.loan->items) {
      item.key = key + item.key;
      MESHSTORE_RETURN_IF_ERROR(check_key(op, item.key));
    }
  }
  if (p.call.group) {
    auto& members = p.call.group->members;
    for (auto& m : members) {
      m = key + m;
      MESHSTORE_RETURN_IF_ERROR(check_key(op, m));
    }
    std::sort(members.begin(), members.end());
  }
  p.call.under = key;
  return Status();
}

Future<void> put_named(const caf::actor_addr& client, std::shared_ptr<PreparedPut> p,
                       const std::weak_ptr<client::FastPath>& fast,
                       std::chrono::milliseconds timeout) {
  const std::string what = p->call.op + " '" + p->call.under + "'";
  auto live = fast.lock();
  if (!live) return client::closed_future<void>(what);
  client::FastPath* raw = live.get();  // its waiting thread's jobs end before it goes
  return on_waiting_thread<void>(*raw, what, [client, p, raw, timeout, what]() -> Result<void> {
    std::vector<wire::RegionRef> lent;
    if (p->call.loan) {
      auto made = client::lend_items(client, *p->call.loan, timeout);
      if (!made.ok()) return made.status().with_context(what);
      lent = std::move(made).value();
    }
    auto done = put_on_caller_thread(*raw, p->call, timeout, nullptr, &lent);
    const Status s = done ? *done : Status(Errc::internal, what + ": the channel's put left it");
    if (s.ok()) return Result<void>();
    if (p->call.loan) client::give_back_lent(client, *p->call.loan, lent);  // back to the publisher
    return s;
  });
}

Future<void> put_prepared_expecting(const caf::actor_addr& client, const std::string& key,
                                    std::shared_ptr<PreparedPut> p,
                                    std::optional<std::uint64_t> manifest_version,
                                    const std::weak_ptr<client::FastPath>& fast,
                                    std::chrono::milliseconds timeout) {
  if (auto s = name_put(key, *p, manifest_version); !s.ok()) return make_error_future<void>(s);
  return put_named(client, std::move(p), fast, timeout);
}

namespace {

// put_over_channel's outcome as put_on_caller_thread answers it.
std::optional<Status> put_committed(client::FastPath& fast, const client::ChannelPut& c,
                                    std::chrono::milliseconds timeout, bool* defer) {
  auto done = client::put_over_channel(fast, c, timeout, defer);
  if (!done) return std::nullopt;
  return done->ok() ? Status() : done->status();
}

}  // namespace

bool takes_caller_thread(const client::StateDictPut& call) { return !call.loan && !call.in_place; }

std::optional<Status> put_on_caller_thread(client::FastPath& fast, const client::StateDictPut& call,
                                           std::chrono::milliseconds timeout, bool* defer,
                                           const std::vector<wire::RegionRef>* lent) {
  if (call.under.empty() || call.in_place) return std::nullopt;
  const std::string& under = call.under;
  if (call.loan && (!lent || lent->size() != call.loan->items.size())) {
    return Status(Errc::internal, call.op + " '" + under + "': lent items that were not lent");
  }
  client::ChannelPut c;
  c.items = call.items;
  if (call.loan) {
    c.lent_items = call.loan->items;
    c.lent_regions = *lent;
    c.lent_on = call.loan->volume;
    c.staged_group = under;
  }
  c.groups.assign(c.items.size(), under);
  c.slot = under;
  c.what = call.op + " '" + under + "'";
  c.stream_key = under;  // a stream when worth one
  c.stream_manifest = call.stream_manifest;
  // A refusal, or no channel, is the put's answer.
  c.refusals_final = true;
  if (call.group) {
    // One rank's part of a sharded state dict: its keys commit together
    // once every rank's shards cover them (the controller's put_shards).
    c.sharded = true;
    c.group = under;
    c.members = call.group->members;
    c.layout = call.group->layout;
    c.slot.push_back('\0');  // apart from a whole put of the same key
    return put_committed(fast, c, timeout, defer);
  }
  c.prefixes = {under};
  // The commit holds only while the state dict is at the version this
  // client last saw (none: absent): one that arrives late, after its call
  // failed and another put of this client committed, is refused rather
  // than roll the key back; another writer's put in between has this one
  // refused, then put again unfenced (ChannelPut::cache_fenced), which
  // writes it all the same.
  const std::uint64_t seen = fast.cache().version(under).value_or(0);
  // (A fenced put, a publish's version, keeps its own, and its refusal.)
  for (std::size_t i = 0; i < c.items.size(); ++i) {
    auto& item = c.items[i];
    if (item.key == under && !item.expect_version) {
      item.expect_version = seen;
      c.cache_fenced.push_back(i);
    }
  }
  return put_committed(fast, c, timeout, defer);
}

}  // namespace meshstore::state_dicts
