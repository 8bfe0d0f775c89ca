// Reading objects from one volume under a read lease.

#include "meshstore/client/volume_reads.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>
#include <optional>
#include <utility>

#include "meshstore/client/ask.hpp"
#include "meshstore/client/box.hpp"
#include "meshstore/client/connections.hpp"
#include "meshstore/client/device_pieces.hpp"
#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/tensor.hpp"
#include "meshstore/tensor_slice.hpp"
#include "meshstore/transports/copy_engine.hpp"

namespace meshstore::client {

using internal::from_caf_error;

namespace {

// Closes a read lease when the last zero-copy view of it goes, from any
// thread: the close goes through the client actor (leases are keyed by
// their client). Holds only weak references: views may outlive the store.
struct LeaseGuard {
  caf::actor_addr client;
  caf::actor_addr volume;
  std::uint64_t lease_id = 0;
  ~LeaseGuard() {
    auto hdl = caf::actor_cast<caf::actor>(client);
    if (!hdl) return;
    auto self = caf::actor_cast<client_pointer>(hdl);  // runs only inside that actor
    caf::anon_send(hdl, protocol::run_atom::value,
                   internal::Closure{[self, volume = volume, id = lease_id] {
                     auto v = caf::actor_cast<protocol::storage_volume_actor>(volume);
                     if (v) self->send(v, protocol::close_read_atom::value, id);
                   }});
  }
};

// Fills each view target with a read-only tensor over the mapped region, or
// returns false (nothing filled) when the transport cannot map.
Result<bool> map_views(client_pointer self, const std::shared_ptr<VolumeConn>& c,
                       const wire::ReadLease& lease, std::vector<ReadTarget>& targets) {
  std::vector<std::shared_ptr<std::byte>> mapped;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    auto m = c->transport->map_read_only(lease.regions[i]);
    if (!m.ok()) {
      if (m.status().code() == Errc::unsupported) return false;
      return m.status();
    }
    mapped.push_back(std::move(m).value());
  }
  auto guard = std::make_shared<LeaseGuard>();
  guard->client = self->address();
  guard->volume = c->handle.address();
  guard->lease_id = lease.lease_id;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    auto memory = std::move(mapped[i]);
    std::byte* p = memory.get();
    std::shared_ptr<std::byte> storage(p, [memory, guard](std::byte*) mutable {
      memory.reset();
      guard.reset();
    });
    *targets[i].view = Tensor::wrap(std::move(storage), targets[i].dtype, targets[i].shape, true);
  }
  return true;
}

// Copies target `t`'s box out of `src`, its whole shard: one run split
// over the copy engine's threads where the box is whole rows of it, else
// its rows split over them.
Future<void> copy_box_from(std::shared_ptr<const std::byte> src, const ReadTarget& t) {
  const auto b = *t.box;
  std::byte* dst = t.dst;
  auto& engine = transports::CopyEngine::instance();
  auto in_src = b.region.relative_to(b.from);
  auto in_dst = b.region.relative_to(b.to);
  if (in_src.ok() && in_dst.ok() && in_src->is_contiguous_in_global() &&
      in_dst->is_contiguous_in_global()) {
    const auto n = static_cast<std::size_t>(b.region.numel()) * b.elsize;
    const auto from = static_cast<std::size_t>(in_src->global_flat_offset()) * b.elsize;
    const auto to = static_cast<std::size_t>(in_dst->global_flat_offset()) * b.elsize;
    return engine.copy(dst + to, src.get() + from, n, std::size_t{8} << 20).then([src] {});
  }
  // (A 0-dim box is one run, copied above.)
  const std::int64_t rows = b.region.local_shape()[0];
  const std::int64_t pieces = std::max<std::int64_t>(
      1, std::min<std::int64_t>(engine.threads(),
                                static_cast<std::int64_t>(b.region.numel() * b.elsize >> 20)));
  std::vector<Future<void>> parts;
  for (std::int64_t p = 0; p < pieces; ++p) {
    const auto [lo, hi] = chunk_range(rows, pieces, p);
    if (lo == hi) continue;
    Shape off = b.region.offsets(), len = b.region.local_shape();
    off[0] += lo;
    len[0] = hi - lo;
    auto part = TensorSlice::make(b.region.global_shape(), off, len);
    if (!part.ok()) return make_error_future<void>(part.status());
    parts.push_back(engine.run(
        [src, b, dst, part = *part] { copy_box(src.get(), b.from, dst, b.to, part, b.elsize); }));
  }
  return settle_all(std::move(parts));
}

// Converts elements [first, first + count) of `src` (of `from`) into `dst`
// (of `to`, laid out from element 0).
Status cast_range(const std::byte* src, DType from, std::byte* dst, DType to, std::size_t first,
                  std::size_t count) {
  TensorView v(const_cast<std::byte*>(src) + first * dtype_size(from), from,
               {static_cast<std::int64_t>(count)});
  return cast_to(v, to, dst + first * dtype_size(to));
}

// Whether a cast read's object holds the elements its record says.
Status check_cast(const ReadTarget& t) {
  const auto numel = static_cast<std::size_t>(shape_numel(t.shape));
  if (numel * dtype_size(t.dtype) == t.nbytes) return Status();
  return Status(Errc::protocol_error, "object " + std::to_string(t.object_id) + " holds " +
                                          std::to_string(t.nbytes) + " bytes, not " +
                                          std::to_string(numel) + " elements of " +
                                          std::string(dtype_name(t.dtype)));
}

// Converts target `t`'s object, all of it in `src`, into t.dst, split over
// the copy engine's threads.
Future<void> cast_from(std::shared_ptr<const std::byte> src, const ReadTarget& t) {
  if (auto s = check_cast(t); !s.ok()) return make_error_future<void>(s);
  if (t.nbytes == 0) return make_ready_future();
  const auto numel = static_cast<std::int64_t>(shape_numel(t.shape));
  auto& engine = transports::CopyEngine::instance();
  const auto pieces = std::max<std::int64_t>(
      1, std::min<std::int64_t>(engine.threads(), static_cast<std::int64_t>(t.nbytes >> 20)));
  auto failed = std::make_shared<std::atomic<bool>>(false);
  std::vector<Future<void>> parts;
  for (std::int64_t p = 0; p < pieces; ++p) {
    const auto [lo, hi] = chunk_range(numel, pieces, p);
    if (lo == hi) continue;
    parts.push_back(engine.run([src, t, lo = lo, hi = hi, failed] {
      if (!cast_range(src.get(), t.dtype, t.dst, *t.cast_to, static_cast<std::size_t>(lo),
                      static_cast<std::size_t>(hi - lo))
               .ok()) {
        failed->store(true);
      }
    }));
  }
  return settle_all(std::move(parts)).then([failed, t]() -> Status {
    if (failed->load()) {
      return Status(Errc::internal, "cannot cast " + std::string(dtype_name(t.dtype)) + " to " +
                                        std::string(dtype_name(*t.cast_to)));
    }
    return Status();
  });
}

// Copies target `t`'s object out of `src`, memory holding all of it (a
// mapping of its region, or its bytes in the volume's shared memory on a
// direct read), where the target wants it: its box, converted, scattered
// to pieces, or whole, split over the copy engine's threads. `src` stays
// alive until the copy is done. Host memory only.
Future<void> copy_from(std::shared_ptr<const std::byte> src, const ReadTarget& t) {
  if (t.box) return copy_box_from(std::move(src), t);
  if (t.cast_to) return cast_from(std::move(src), t);
  if (t.scatter) return scatter_from(t.scatter, std::move(src), t.nbytes);
  const std::byte* from = src.get();
  return transports::CopyEngine::instance()
      .copy(t.dst, from, t.nbytes, std::size_t{8} << 20)
      .then([src] {});
}

// Copies a target's box out of its (leased) region, through a range read
// of the bytes from the box's first element to its last.
Future<void> read_box(const std::shared_ptr<VolumeConn>& c, const wire::RegionRef& region,
                      const ReadTarget& t) {
  const auto b = *t.box;
  std::byte* dst = t.dst;
  Shape last = b.region.offsets();
  for (std::size_t k = 0; k < last.size(); ++k) last[k] += b.region.local_shape()[k] - 1;
  const std::int64_t lo = offset_in(b.from, b.region.offsets());
  const std::int64_t hi = offset_in(b.from, last) + 1;
  const auto n = static_cast<std::size_t>(hi - lo) * b.elsize;
  auto tmp = std::make_shared<std::vector<std::byte>>();
  try {
    tmp->resize(n);
  } catch (const std::bad_alloc&) {
    return make_error_future<void>(Status(
        Errc::out_of_capacity, "cannot allocate " + std::to_string(n) + " bytes to read a box"));
  }
  return c->transport->read(region, static_cast<std::uint64_t>(lo) * b.elsize, tmp->data(), n)
      .then(
          [tmp, b, dst, lo] { copy_box(tmp->data(), b.from, dst, b.to, b.region, b.elsize, lo); });
}

// The rest of a cast read through `scratch`, from byte `done` of the
// object: one range read at a time, each converted while it is in cache.
Future<void> read_cast_chunks(std::shared_ptr<VolumeConn> c, wire::RegionRef region, ReadTarget t,
                              std::shared_ptr<std::vector<std::byte>> scratch, std::size_t done) {
  if (done >= t.nbytes) return make_ready_future();
  const std::size_t n = std::min(scratch->size(), t.nbytes - done);
  return c->transport->read(region, done, scratch->data(), n).then([=]() -> Future<void> {
    const std::size_t elsize = dtype_size(t.dtype);
    auto s = cast_range(scratch->data(), t.dtype, t.dst + done / elsize * dtype_size(*t.cast_to),
                        *t.cast_to, 0, n / elsize);
    if (!s.ok()) return make_error_future<void>(s);
    return read_cast_chunks(c, region, t, scratch, done + n);
  });
}

// A cast read (ReadOptions::cast) through a bounded scratch buffer: the
// target's object, of t.dtype, lands in t.dst converted to *t.cast_to.
Future<void> read_cast(const std::shared_ptr<VolumeConn>& c, const wire::RegionRef& region,
                       const ReadTarget& t) {
  if (auto s = check_cast(t); !s.ok()) return make_error_future<void>(s);
  const std::size_t elsize = dtype_size(t.dtype);
  constexpr std::size_t kScratchBytes = std::size_t{4} << 20;
  auto scratch = std::make_shared<std::vector<std::byte>>();
  try {
    scratch->resize(std::min(t.nbytes, kScratchBytes / elsize * elsize));
  } catch (const std::bad_alloc&) {
    return make_error_future<void>(
        Status(Errc::out_of_capacity, "cannot allocate a cast read's scratch buffer"));
  }
  return read_cast_chunks(c, region, t, std::move(scratch), 0);
}

// A scattered read through a scratch copy of the whole object.
Future<void> read_scattered(const std::shared_ptr<VolumeConn>& c, const wire::RegionRef& region,
                            const ReadTarget& t) {
  auto tmp = std::make_shared<std::vector<std::byte>>();
  try {
    tmp->resize(t.nbytes);
  } catch (const std::bad_alloc&) {
    return make_error_future<void>(
        Status(Errc::out_of_capacity,
               "cannot allocate " + std::to_string(t.nbytes) + " bytes to read an object into"));
  }
  auto scatter = t.scatter;
  return c->transport->read(region, 0, tmp->data(), t.nbytes).then([tmp, scatter]() -> Status {
    return scatter_now(*scatter, tmp->data(), tmp->size());
  });
}

// Starts copying each target's object out of its leased region
// (`regions[i]` holds targets[i]'s object). A box, a cast or pieces come
// straight from the region's mapping where the transport maps memory (its
// cached mapping, already populated: one of its own would fault in every
// page again; host regions only: one in GPU memory, over cuda-ipc, has
// none), else through reads of the bytes.
std::vector<Future<void>> copy_out(const std::shared_ptr<VolumeConn>& c,
                                   const std::vector<wire::RegionRef>& regions,
                                   const std::vector<ReadTarget>& targets) {
  std::vector<Future<void>> reads;
  for (std::size_t i = 0; i < targets.size() && i < regions.size(); ++i) {
    const auto& t = targets[i];
    if (regions[i].nbytes != t.nbytes) {
      reads.push_back(make_error_future<void>(
          Status(Errc::protocol_error, "object " + std::to_string(t.object_id) + " holds " +
                                           std::to_string(regions[i].nbytes) +
                                           " bytes, the index says " + std::to_string(t.nbytes))));
      continue;
    }
    if ((t.box || t.cast_to || t.scatter) && c->transport->capabilities().maps_memory &&
        regions[i].device < 0) {
      auto mem = c->transport->map_writable(regions[i]);
      reads.push_back(mem.ok() ? copy_from(std::move(mem).value(), t)
                               : make_error_future<void>(mem.status()));
      continue;
    }
    if (t.box) {
      reads.push_back(read_box(c, regions[i], t));
      continue;
    }
    if (t.cast_to) {
      reads.push_back(read_cast(c, regions[i], t));
      continue;
    }
    if (t.scatter) {
      reads.push_back(read_scattered(c, regions[i], t));
      continue;
    }
    if (t.device && !c->transport->capabilities().device_copies) {
      reads.push_back(read_into_device(c, regions[i], t.dst, t.nbytes));
      continue;
    }
    reads.push_back(c->transport->read(regions[i], 0, t.dst, t.nbytes));
  }
  return reads;
}

// The objects of `targets` where a direct read takes them: each in a
// same-host volume's shared memory at a place this client knows (its
// record's, or a lease's before), with its tag (first_changed checks it);
// nullopt where one is not (a view or a GPU destination, a transport that
// maps nothing, the controller's process gone, no place known, a place
// that is not the volume's region).
std::optional<std::vector<TaggedObject>> direct_read_of(client_pointer self, const VolumeConn& c,
                                                        const std::vector<ReadTarget>& targets) {
  const auto& controller = self->state.controller_process;
  if (targets.empty() || !c.transport->capabilities().maps_memory ||
      (controller && !controller->alive())) {
    return std::nullopt;
  }
  std::vector<TaggedObject> objects;
  for (const auto& t : targets) {
    if (t.view || t.device) return std::nullopt;
    wire::RegionRef region;
    auto it = c.known_regions.find(t.object_id);
    if (it != c.known_regions.end()) {
      region = it->second;
    } else if (!t.place.empty()) {
      region.region_id = t.object_id;
      region.nbytes = t.nbytes;
      region.described["shm"] = t.place;
    } else {
      return std::nullopt;
    }
    if (region.nbytes != t.nbytes) return std::nullopt;
    TaggedObject object{t.object_id, c.transport->tagged_bytes(region)};
    if (!object.at.tag) return std::nullopt;
    objects.push_back(std::move(object));
  }
  return objects;
}

}  // namespace

namespace {

// Closes a revocable lease (a publisher's loan) after its copy ended with
// `copied`, asking the volume whether the lease was still whole: if the
// publisher revoked the loan meanwhile, the copy may mix in bytes it wrote
// since (or have failed as it freed them), so it does not count: the read
// is stale, and the get locates the key again (the retained copy, or the
// version gone).
void close_checked(client_pointer self, const std::shared_ptr<VolumeConn>& c,
                   std::uint64_t lease_id, const Result<void>& copied, std::shared_ptr<bool> stale,
                   std::shared_ptr<Promise<void>> promise) {
  const std::string volume_id = c->info.volume_id;
  ask(self, c->handle, protocol::close_read_atom::value, lease_id, true)
      .then(
          [=](bool whole) {
            if (whole) return (void)promise->set(copied);
            *stale = true;
            promise->set_error(
                Status(Errc::not_found, "volume '" + volume_id +
                                            "': the publisher revoked its loan while this read "
                                            "copied out of it"));
          },
          [=](caf::error& e) {
            promise->set_error(from_caf_error(e, "closing a read lease at volume '" + volume_id +
                                                     "' (a loan its publisher may revoke)"));
          });
}

// One inline object's bytes into target `t`: cast, scattered, a box of
// it, or copied (to GPU memory with CUDA).
Status copy_inline(const std::string& bytes, const ReadTarget& t, const std::string& volume_id) {
  const auto* from = reinterpret_cast<const std::byte*>(bytes.data());
  if (t.cast_to) {
    const auto numel = static_cast<std::size_t>(shape_numel(t.shape));
    if (numel * dtype_size(t.dtype) != bytes.size()) {
      return Status(Errc::protocol_error, "volume '" + volume_id +
                                              "' answered an inline object of the wrong size for "
                                              "a cast read");
    }
    return cast_range(from, t.dtype, t.dst, *t.cast_to, 0, numel);
  }
  if (t.scatter) return scatter_now(*t.scatter, from, bytes.size());
  if (const auto& b = t.box) {
    copy_box(from, b->from, t.dst, b->to, b->region, b->elsize);
    return Status();
  }
  if (t.device) return internal::cuda::copy_bytes(t.dst, bytes.data(), t.nbytes);
  std::memcpy(t.dst, bytes.data(), t.nbytes);
  return Status();
}

// A small read's answer: every object's bytes inline in `lease`, none
// pinned. Each into its target (a tensor made for a view target).
Status take_inline(const wire::ReadLease& lease, std::vector<ReadTarget>& targets,
                   const std::string& volume_id) {
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (i >= lease.data.size() || lease.data[i].size() != targets[i].nbytes) {
      return Status(Errc::protocol_error, "volume '" + volume_id + "' answered " +
                                              std::to_string(lease.data.size()) +
                                              " inline objects of the wrong size");
    }
    if (targets[i].view) {
      auto t = Tensor::empty(targets[i].dtype, targets[i].shape);
      if (!t.ok()) return t.status();
      *targets[i].view = std::move(t).value();
      targets[i].dst = static_cast<std::byte*>(targets[i].view->data());
    }
    MESHSTORE_RETURN_IF_ERROR(copy_inline(lease.data[i], targets[i], volume_id));
  }
  return Status();
}

// Targets that want views: zero-copy where the transport maps the lease's
// regions (true: done, the lease stays open until the last view goes);
// else (false) a tensor of their own each, to copy into, like get(). A
// revocable loan is copied: a view could not be checked.
Result<bool> view_or_allocate(client_pointer self, const std::shared_ptr<VolumeConn>& c,
                              const wire::ReadLease& lease, std::vector<ReadTarget>& targets) {
  auto views = lease.revocable ? Result<bool>(false) : map_views(self, c, lease, targets);
  if (!views.ok() || *views) return views;
  for (auto& t : targets) {
    auto copy = Tensor::empty(t.dtype, t.shape);
    if (!copy.ok()) return copy.status();
    *t.view = std::move(copy).value();
    t.dst = static_cast<std::byte*>(t.view->data());
  }
  return false;
}

// Reads `targets` from `c` under a read lease: open_read pins them (or
// answers small ones' bytes inline), the bytes are copied, the lease closes.
// `pinned`: they were located under a pin (superseded ones still serve).
void leased_read(client_pointer self, const std::shared_ptr<VolumeConn>& c,
                 std::vector<ReadTarget> targets, bool pinned, std::shared_ptr<bool> stale,
                 std::shared_ptr<Promise<void>> promise) {
  const std::string volume_id = c->info.volume_id;
  std::vector<std::uint64_t> ids;
  for (const auto& t : targets) ids.push_back(t.object_id);
  const std::uint64_t lease_id = self->state.next_lease_id++;
  ask(self, c->handle, protocol::open_read_atom::value, ids, lease_id, pinned)
      .then(
          [=](const wire::ReadLease& lease) mutable {
            c->remember(lease.regions);
            if (lease.regions.size() != targets.size()) {
              if (lease.lease_id != 0)
                self->send(c->handle, protocol::close_read_atom::value, lease.lease_id);
              return (void)promise->set_error(Status(
                  Errc::protocol_error, "volume '" + volume_id + "' answered " +
                                            std::to_string(lease.regions.size()) + " regions for " +
                                            std::to_string(targets.size()) + " objects"));
            }
            if (!lease.data.empty()) {
              // A small read: the bytes came inline and nothing is pinned.
              return (void)promise->set(take_inline(lease, targets, volume_id));
            }
            if (!targets.empty() && targets.front().view) {
              auto views = view_or_allocate(self, c, lease, targets);
              if (!views.ok() || *views) {
                if (!views.ok())
                  self->send(c->handle, protocol::close_read_atom::value, lease.lease_id);
                return (void)promise->set(views.ok() ? Result<void>() : views.status());
              }
            }
            auto reads = copy_out(c, lease.regions, targets);
            await(self, settle_all(std::move(reads)), [=](const Result<void>& r) {
              if (!lease.revocable) {
                self->send(c->handle, protocol::close_read_atom::value, lease.lease_id);
                return (void)promise->set(r);
              }
              close_checked(self, c, lease.lease_id, r, stale, promise);
            });
          },
          [=](caf::error& e) {
            auto s = from_caf_error(e, "open_read at volume '" + volume_id + "'");
            if (s.code() == Errc::not_found) *stale = true;
            // The volume may still grant the lease after our timeout: close
            // it (messages between two actors stay in order).
            if (s.code() == Errc::timeout)
              self->send(c->handle, protocol::close_read_atom::value, lease_id);
            promise->set_error(std::move(s));
          });
}

}  // namespace

Future<void> read_from_volume(client_pointer self, const std::string& volume_id,
                              std::vector<ReadTarget> targets, bool pinned,
                              std::shared_ptr<bool> stale) {
  auto promise =
      std::make_shared<Promise<void>>(Status(Errc::shutdown, "client stopped during a read"));
  auto fut = promise->future();
  with_volume(self, volume_id, [=](const ConnResult& conn) mutable {
    if (!conn.ok()) return (void)promise->set_error(conn.status());
    auto c = *conn;
    auto direct = direct_read_of(self, *c, targets);
    if (!direct) return leased_read(self, c, std::move(targets), pinned, stale, promise);
    // The direct read's check before the copies (replaced already: read
    // under a lease, which locates afresh), the copies on the copy engine,
    // and the check again once they are done.
    auto objects = std::make_shared<std::vector<TaggedObject>>(std::move(*direct));
    if (first_changed(objects->data(), objects->size()) != objects->size()) {
      self->state.cfg.fast_path->count_lease_free(false);
      return leased_read(self, c, std::move(targets), pinned, stale, promise);
    }
    std::vector<Future<void>> copies;
    for (std::size_t i = 0; i < targets.size(); ++i) {
      // The bytes stay mapped while their tag lives.
      const auto& at = (*objects)[i].at;
      copies.push_back(copy_from(std::shared_ptr<const std::byte>(at.tag, at.data), targets[i]));
    }
    await(self, settle_all(std::move(copies)), [=](const Result<void>& r) mutable {
      std::atomic_thread_fence(std::memory_order_acquire);
      const bool same =
          r.ok() && first_changed(objects->data(), objects->size()) == objects->size();
      self->state.cfg.fast_path->count_lease_free(same);
      if (same) return (void)promise->set_value();
      // Changed under the copy, or a copy failed: read again under a
      // lease, which reports what failed.
      leased_read(self, c, std::move(targets), pinned, stale, promise);
    });
  });
  return fut;
}

}  // namespace meshstore::client
