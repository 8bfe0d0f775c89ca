// Staged (zero-copy) state dicts: StagedStateDict, its staging and its commit.

#include "meshstore/state_dicts/staged.hpp"

#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "meshstore/client/calls.hpp"
#include "meshstore/client/channel_put.hpp"
#include "meshstore/client/client.hpp"
#include "meshstore/client/fast_path.hpp"
#include "meshstore/protocol/checks.hpp"
#include "meshstore/state_dicts/client_calls.hpp"
#include "meshstore/state_dicts/versions.hpp"

namespace meshstore {

namespace {

using client::bytes_item;
using protocol::check_key;
using state_dicts::blob_key;
using state_dicts::call_client;
using state_dicts::encode_manifest;
using state_dicts::entry_key;
using state_dicts::EntryKind;
using state_dicts::lay_out_value;
using state_dicts::Manifest;
using state_dicts::ManifestEntry;
using state_dicts::point_and_retire;
using state_dicts::publish_conflict;

}  // namespace

struct StagedStateDict::Impl {
  caf::actor_addr client;  // weak: the staged state dict may outlive the store
  std::string op;
  std::string key;
  // stage_publish: where the version goes; the prefix is empty otherwise.
  state_dicts::PublishTarget pub;
  Manifest layout;  // the tensors only, in the caller's order
  StateDict sd;
  bool zero_copy = false;
  // The tensors' objects (the packed buckets first, then one per tensor
  // stored alone), full keys, views into the memory below.
  std::vector<client::PutItem> items;
  client::StagedRegions staged;  // zero_copy: the volume's regions, mapped
  std::vector<Tensor> owned;     // otherwise: private buffers, one per item
  enum class State { open, committed, aborted };
  std::mutex mu;  // guards state
  State state = State::open;

  ~Impl() { abort(); }

  void abort() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (state != State::open) return;
      state = State::aborted;
    }
    if (!zero_copy) return;
    // Given back over the channel (a ring: only a volume of this host
    // maps its memory here), so the memory is the volume's again when this
    // returns. A closed store's volume reclaimed the regions (or is gone)
    // already.
    if (auto fast = pub.fast.lock()) {
      fast->give_back(client::FastPath::Staging{staged.volume_id, {}, staged.regions}, pub.timeout);
    }
  }

  // A commit refused before anything moved: the memory goes back.
  void give_back() {
    {
      std::lock_guard<std::mutex> lock(mu);
      state = State::open;
    }
    abort();
  }

  // Commits `call`: objects written in place (or, where the volume's
  // memory is not this process's to map, the staged copies), with the
  // manifest and the values, in one commit request over the client's
  // channel, from its waiting thread (refused, a publish's fence say: the
  // objects go back and the refusal is the answer).
  static Future<std::vector<std::uint64_t>> put_staged(const std::shared_ptr<Impl>& self,
                                                       client::StateDictPut call) {
    const std::string what = self->op + " '" + self->key + "'";
    auto live = self->pub.fast.lock();
    if (!live) return client::closed_future<std::vector<std::uint64_t>>(what);
    client::FastPath* raw = live.get();
    auto shared = std::make_shared<client::StateDictPut>(std::move(call));
    return state_dicts::on_waiting_thread<std::vector<std::uint64_t>>(
        *raw, what, [self, raw, shared, what]() -> Result<std::vector<std::uint64_t>> {
          client::ChannelPut c;
          c.items = shared->items;
          c.groups.assign(c.items.size(), self->key);
          c.prefixes = {shared->under};
          if (shared->in_place) {
            c.staged_items = shared->in_place->items;
            c.staged_regions = shared->in_place->staged.regions;
            c.staged_on = shared->in_place->staged.volume_id;
          }
          c.staged_group = self->key;
          c.slot = std::string(3, '\0') + self->key;  // keeps nothing staged
          c.what = what;
          if (c.staged_items.empty()) {  // copies, which readers may stream
            c.stream_key = self->key;
            c.stream_manifest = shared->stream_manifest;
          }
          c.refusals_final = true;
          return state_dicts::final_outcome(client::put_over_channel(*raw, c, self->pub.timeout),
                                            what);
        });
  }

  Future<std::uint64_t> commit(const std::shared_ptr<Impl>& self) {
    const std::string what = op + " '" + key + "': commit";
    {
      std::lock_guard<std::mutex> lock(mu);
      if (state != State::open) {
        return make_error_future<std::uint64_t>(Status(
            Errc::invalid_argument,
            what + ": the state dict was " +
                (state == State::committed ? "committed already" : "aborted") + "; stage anew"));
      }
      state = State::committed;
    }
    // The manifest in the state dict's current order: the staged tensors
    // where they lie, the values inserted since.
    std::unordered_map<std::string, const ManifestEntry*> staged_entry;
    for (const auto& e : layout.entries) staged_entry.emplace(e.name, &e);
    Manifest m;
    m.packed_bytes = layout.packed_bytes;
    m.bucket_starts = layout.bucket_starts;
    client::StateDictPut call;
    call.op = op;
    for (const auto& e : sd.entries()) {
      if (!e.is_tensor()) {
        lay_out_value(m, e.name, *e.value);
        call.items.push_back(
            bytes_item(entry_key(key, e.name), e.value->encode(), wire::ObjectKind::tensor));
        continue;
      }
      auto it = staged_entry.find(e.name);
      if (it == staged_entry.end()) {
        give_back();
        return make_error_future<std::uint64_t>(
            Status(Errc::invalid_argument, what + ": tensor '" + e.name +
                                               "' was not staged (stage every tensor; insert "
                                               "only values after staging)"));
      }
      m.entries.push_back(*it->second);
    }
    for (auto& item : call.items) {
      if (auto s = check_key(op, item.key); !s.ok()) {
        give_back();
        return make_error_future<std::uint64_t>(s);
      }
    }
    const std::string manifest = encode_manifest(m);
    call.items.insert(call.items.begin(), bytes_item(key, manifest, wire::ObjectKind::tensor));
    // A publish is fenced: the version commits only if no other writer
    // stored it first.
    if (!pub.prefix.empty()) call.items.front().expect_version = 0;
    if (zero_copy) {
      call.in_place = client::InPlace{items, staged};
    } else {
      call.items.insert(call.items.end(), items.begin(), items.end());
      call.stream_manifest = manifest;  // readers may stream the copy-in
    }
    call.under = key;
    auto put = put_staged(self, std::move(call));
    // `self` keeps private buffers alive until the put has read them.
    auto done = std::make_shared<Promise<std::uint64_t>>(Status(Errc::shutdown, op + ": dropped"));
    put.on_complete([self, done](const Result<std::vector<std::uint64_t>>& r) {
      const auto& pub = self->pub;
      if (!r.ok()) {
        return (void)done->set_error(
            pub.prefix.empty() ? r.status()
                               : publish_conflict(self->op, pub.prefix, pub.version, r.status()));
      }
      if (pub.prefix.empty()) return (void)done->set_value(0);
      point_and_retire(self->client, pub.prefix, pub.version, pub.keep, self->op, pub.from,
                       pub.fast, pub.timeout)
          .on_complete([done](const Result<std::uint64_t>& v) { done->set(v); });
    });
    return done->future();
  }
};

StagedStateDict::StagedStateDict() = default;
StagedStateDict::~StagedStateDict() = default;
StagedStateDict::StagedStateDict(const StagedStateDict&) = default;
StagedStateDict& StagedStateDict::operator=(const StagedStateDict&) = default;
StagedStateDict::StagedStateDict(StagedStateDict&&) noexcept = default;
StagedStateDict& StagedStateDict::operator=(StagedStateDict&&) noexcept = default;

StateDict& StagedStateDict::state_dict() {
  static thread_local StateDict empty;
  if (!impl_) {
    empty = StateDict();
    return empty;
  }
  return impl_->sd;
}

const std::string& StagedStateDict::key() const {
  static const std::string none;
  return impl_ ? impl_->key : none;
}

bool StagedStateDict::zero_copy() const noexcept { return impl_ && impl_->zero_copy; }

Future<std::uint64_t> StagedStateDict::commit() {
  if (!impl_) {
    return make_error_future<std::uint64_t>(
        Status(Errc::invalid_argument, "commit: an empty StagedStateDict (not from a stage call)"));
  }
  return impl_->commit(impl_);
}

void StagedStateDict::abort() {
  if (impl_) impl_->abort();
}

// Builds staged state dicts; a friend of StagedStateDict.
struct internal::StagedAccess {
  using Impl = StagedStateDict::Impl;

  static Future<StagedStateDict> stage_at(const caf::actor_addr& client, std::string op,
                                          std::string key, Manifest layout,
                                          state_dicts::PublishTarget pub) {
    auto impl = std::make_shared<Impl>();
    impl->client = client;
    impl->op = std::move(op);
    impl->key = std::move(key);
    impl->pub = std::move(pub);
    impl->layout = std::move(layout);
    // The objects, in the order of Impl::items: the buckets, then the
    // tensors stored alone.
    auto keys = std::make_shared<std::vector<std::string>>();
    auto sizes = std::make_shared<std::vector<std::uint64_t>>();
    for (std::size_t b = 0; b < impl->layout.buckets(); ++b) {
      keys->push_back(blob_key(impl->key, b));
      sizes->push_back(impl->layout.bucket_bytes(b));
    }
    for (const auto& e : impl->layout.entries) {
      if (e.kind != EntryKind::tensor) continue;
      keys->push_back(entry_key(impl->key, e.name));
      sizes->push_back(e.nbytes());
    }
    const std::string what = impl->op + " '" + impl->key + "'";
    auto out = std::make_shared<Promise<StagedStateDict>>(
        Status(Errc::shutdown, what + ": the store was closed before the staging completed"));
    auto fut = out->future();
    auto fast = impl->pub.fast.lock();
    if (!fast) {
      out->set_error(Status(Errc::shutdown, what + ": the store is closed"));
      return fut;
    }
    // Staged over the client's channel from its waiting thread, which may
    // connect the client to its volume first.
    client::FastPath* raw = fast.get();  // its waiting thread's jobs end before it goes
    raw->defer([raw, impl, keys, sizes, out, what]() mutable {
      auto r = client::stage_over_channel(*raw, *keys, *sizes, impl->pub.timeout);
      std::vector<std::byte*> memory;
      if (r.ok()) {
        impl->zero_copy = true;
        impl->staged = std::move(r).value();
        for (const auto& m : impl->staged.memory) memory.push_back(m.get());
      } else if (r.status().code() == Errc::unsupported) {
        // The volume's memory is out of reach (another host, shm off, no
        // channel): private buffers, put at commit().
        for (auto n : *sizes) {
          auto t = Tensor::empty(DType::uint8, {static_cast<std::int64_t>(n)});
          if (!t.ok()) {
            return (void)out->set_error(Status(
                Errc::out_of_capacity, what + ": cannot allocate " + std::to_string(n) +
                                           " bytes of private buffers: " + t.status().message()));
          }
          memory.push_back(static_cast<std::byte*>(t->data()));
          impl->owned.push_back(std::move(t).value());
        }
      } else {
        return (void)out->set_error(r.status().with_context(what));
      }
      auto s = fill(*impl, *keys, *sizes, memory);
      if (!s.ok()) {
        impl->abort();
        return (void)out->set_error(s);
      }
      // The caller's copies hold the staging from here: not this job too,
      // or dropping the last of them would give it back on this thread,
      // after the caller went on (the memory back when the last copy goes).
      StagedStateDict staged;
      staged.impl_ = std::move(impl);
      out->set_value(std::move(staged));
    });
    return fut;
  }

  // Points the items and the state dict's tensors into `memory` (one
  // pointer per staged object, in Impl::items order).
  static Status fill(Impl& impl, const std::vector<std::string>& keys,
                     const std::vector<std::uint64_t>& sizes,
                     const std::vector<std::byte*>& memory) {
    const Manifest& m = impl.layout;
    std::size_t next = 0;
    std::vector<std::byte*> buckets;
    for (std::size_t b = 0; b < m.buckets(); ++b, ++next) {
      buckets.push_back(memory[next]);
      impl.items.push_back(client::PutItem{
          keys[next],
          TensorView(memory[next], DType::uint8, {static_cast<std::int64_t>(sizes[next])}),
          wire::ObjectKind::tensor, nullptr});
    }
    for (const auto& e : impl.layout.entries) {
      std::byte* at = nullptr;
      if (e.kind == EntryKind::tensor) {
        // Stored alone: the object carries the tensor's own dtype and shape.
        at = memory[next];
        impl.items.push_back(client::PutItem{keys[next], TensorView(at, e.dtype, e.shape),
                                             wire::ObjectKind::tensor, nullptr});
        ++next;
      } else if (e.nbytes() > 0) {
        const std::size_t b = m.bucket_of(e.offset);
        at = buckets[b] + (e.offset - m.bucket_begin(b));
      } else {
        at = reinterpret_cast<std::byte*>(&impl);  // no elements: any address will do
      }
      MESHSTORE_RETURN_IF_ERROR(impl.sd.insert(e.name, TensorView(at, e.dtype, e.shape)));
    }
    return Status();
  }
};

namespace state_dicts {

Result<Manifest> plan_staging(const std::string& op, const std::string& key,
                              const std::vector<TensorSpec>& tensors,
                              const StateDictPutOptions& options) {
  const std::string where = op + " '" + key + "'";
  if (options.transfer_dtype) {
    return Status(Errc::invalid_argument,
                  where +
                      ": transfer_dtype does not apply to staged tensors (they are "
                      "written in their stored dtype)");
  }
  Manifest m;
  std::unordered_set<std::string> names;
  for (const auto& t : tensors) {
    if (t.name.empty()) return Status(Errc::invalid_argument, where + ": a tensor with no name");
    if (!names.insert(t.name).second) {
      return Status(Errc::invalid_argument, where + ": name '" + t.name + "' appears twice");
    }
    if (!is_valid_dtype(static_cast<std::uint8_t>(t.dtype))) {
      return Status(Errc::invalid_argument, where + ": tensor '" + t.name + "' has no valid dtype");
    }
    if (t.shape.size() > 64) {
      return Status(Errc::invalid_argument, where + ": tensor '" + t.name + "' has " +
                                                std::to_string(t.shape.size()) +
                                                " dims, more than 64");
    }
    std::uint64_t bytes = dtype_size(t.dtype);
    for (auto d : t.shape) {
      if (d < 0 || __builtin_mul_overflow(bytes, static_cast<std::uint64_t>(d), &bytes) ||
          bytes > (std::uint64_t{1} << 62)) {
        return Status(Errc::invalid_argument, where + ": tensor '" + t.name + "' has shape " +
                                                  shape_to_string(t.shape) +
                                                  " (a negative dim, or too many bytes)");
      }
    }
    MESHSTORE_RETURN_IF_ERROR(check_key(op, entry_key(key, t.name)));
    lay_out(m, t.name, t.dtype, t.shape, options.pack_max_tensor_bytes, options.pack_bucket_bytes);
  }
  for (std::size_t b = 0; b < m.buckets(); ++b) {
    MESHSTORE_RETURN_IF_ERROR(check_key(op, blob_key(key, b)));
  }
  return m;
}

Future<StagedStateDict> stage_at(const caf::actor_addr& client, std::string op, std::string key,
                                 Manifest layout, PublishTarget pub) {
  return internal::StagedAccess::stage_at(client, std::move(op), std::move(key), std::move(layout),
                                          std::move(pub));
}

}  // namespace state_dicts

}  // namespace meshstore
