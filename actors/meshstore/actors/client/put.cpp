// The client's put path: stage, write, commit.

#include "meshstore/actors/client/put.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/actors/client/ask.hpp"
#include "meshstore/actors/client/connections.hpp"
#include "meshstore/actors/client/device_pieces.hpp"
#include "meshstore/actors/client/locations.hpp"
#include "meshstore/actors/internal/limits.hpp"
#include "meshstore/internal/cuda_copy.hpp"

namespace meshstore::actors {

wire::KeyRecord put_record(const PutItem& item, const wire::RegionRef* region,
                           const std::string& volume_id, const std::string& group) {
  wire::KeyRecord r;
  r.key = item.key;
  r.kind = item.kind;
  r.object_format = item.object_format;
  r.expect_version = item.expect_version;
  r.points_to = item.points_to;
  r.dtype = item.view.dtype();
  r.shape = item.slice ? item.slice->global_shape() : item.view.shape();
  r.group = group;
  std::string place;  // for readers on the volume's host (lease-free reads)
  if (region) {
    auto shm = region->described.find("shm");
    if (shm != region->described.end()) place = shm->second;
  }
  r.shards.push_back(wire::ShardRecord{item.slice ? *item.slice : TensorSlice::full(r.shape),
                                       volume_id, region ? region->region_id : 0,
                                       region ? region->nbytes : item.view.nbytes(), item.replicas,
                                       item.checksum, std::move(place)});
  return r;
}

bool worth_streaming(const std::vector<PutItem>& items) {
  std::uint64_t total = 0, largest = 0;
  for (const auto& item : items) {
    total += item.view.nbytes();
    largest = std::max(largest, item.view.nbytes());
  }
  return total - largest >= actors::limits::kStreamMinOverlapBytes;
}

}  // namespace meshstore::actors

namespace meshstore::actors::client_detail {

using internal::from_caf_error;
using internal::cuda::on_device;

namespace {

struct PutOp {
  PutCall call;
  std::string what;
  std::shared_ptr<VolumeConn> conn;
  std::vector<wire::RegionRef> regions;
  // The objects the lending volume made of PutCall::lent_items, in order.
  std::vector<wire::RegionRef> lent;
  std::vector<Tensor> packed;  // contiguous copies of strided sources
  // Shards of sharded keys (PutItem::slice): committed with put_shards.
  bool sharded = false;
  // A put announced as a stream: which records' fills were reported.
  bool streaming = false;
  std::vector<bool> reported;
  // Eviction (ClientConfig::evict_lru): called on out_of_capacity, once;
  // true when it took over (it evicts, then stages again).
  std::function<bool(const Status&)> on_full;
  // Gives lent buffers back (give_back_lent) when the put fails for good:
  // every failure path after the lend goes through fail().
  std::function<void()> lent_back;

  void fail(const Status& s) {
    if (s.code() == Errc::out_of_capacity && on_full) {
      auto retry = std::move(on_full);
      on_full = nullptr;  // one eviction per put
      if (retry(s)) return;
    }
    if (lent_back) lent_back();
    call.promise->set_error(s.with_context(what));
  }
};

// Gives staged (uncommitted) objects back to their volume for reuse.
void give_back(client_pointer self, const storage_volume_actor& volume,
               const std::vector<wire::RegionRef>& regions,
               const std::vector<wire::RegionRef>& more) {
  std::vector<std::uint64_t> ids;
  for (const auto& r : regions) ids.push_back(r.region_id);
  for (const auto& r : more) ids.push_back(r.region_id);
  if (!ids.empty()) self->send(volume, release_atom::value, ids);
}

// Gives the lent buffers' objects back to the lending volume (their memory
// returns to the publisher once no reader holds it). Idempotent.
void give_back_lent(client_pointer self, const std::shared_ptr<PutOp>& op) {
  if (!op->lent.empty()) {
    std::vector<std::uint64_t> ids;
    for (const auto& r : op->lent) ids.push_back(r.region_id);
    self->send(op->call.lend_to, discard_atom::value, std::move(ids));
    op->lent.clear();
  }
}

// Gives a put's staged regions back to the volume: its own and the ones
// written in place (PutCall::staged_items), which share its volume; and
// the lent ones to theirs.
void release_staged(client_pointer self, const std::shared_ptr<PutOp>& op) {
  if (op->conn) give_back(self, op->conn->handle, op->regions, op->call.staged.regions);
  give_back_lent(self, op);
}

// The records a put commits: the items written in place first, then the
// others, whose objects are op->regions.
std::vector<wire::KeyRecord> put_records(const std::shared_ptr<PutOp>& op) {
  std::vector<wire::KeyRecord> records;
  records.reserve(op->call.staged_items.size() + op->call.lent_items.size() +
                  op->call.items.size());
  const std::string group =
      op->call.replace_under.empty() ? std::string() : op->call.replace_under.front();
  auto add = [&](const PutItem& item, const wire::RegionRef* region, const std::string& volume_id) {
    records.push_back(put_record(item, region, volume_id, group));
  };
  const std::string& home = op->conn->info.volume_id;
  for (std::size_t i = 0; i < op->call.staged_items.size(); ++i) {
    add(op->call.staged_items[i], &op->call.staged.regions[i], home);
  }
  for (std::size_t i = 0; i < op->call.lent_items.size(); ++i) {
    add(op->call.lent_items[i], i < op->lent.size() ? &op->lent[i] : nullptr, op->call.lend_volume);
  }
  for (std::size_t i = 0; i < op->call.items.size(); ++i) {
    add(op->call.items[i], i < op->regions.size() ? &op->regions[i] : nullptr, home);
  }
  return records;
}

// The stream of a put that will not commit ends; its readers are told why.
void abort_stream(client_pointer self, const std::shared_ptr<PutOp>& op, const Status& why) {
  if (!op->streaming) return;
  op->streaming = false;
  self->send(self->state.controller, stream_abort_atom::value, op->call.replace_under.front(),
             why.to_string());
}

// Tells the controller (and so the stream's readers) that record `i` of a
// streamed put is filled; each record once.
void report_filled(client_pointer self, const std::shared_ptr<PutOp>& op,
                   std::vector<std::uint64_t> records) {
  if (!op->streaming) return;
  std::vector<std::uint64_t> fresh;
  for (auto i : records) {
    if (i < op->reported.size() && !op->reported[i]) {
      op->reported[i] = true;
      fresh.push_back(i);
    }
  }
  if (!fresh.empty()) {
    self->send(self->state.controller, stream_progress_atom::value, op->call.replace_under.front(),
               fresh);
  }
}

// A put committed: where its objects lie on its volume is remembered, so
// this client reads them back without a lease (lease-free reads).
void remember_committed(const std::shared_ptr<PutOp>& op) {
  if (!op->conn) return;
  op->conn->remember(op->call.staged.regions);
  op->conn->remember(op->regions);
}

void commit_put(client_pointer self, const std::shared_ptr<PutOp>& op) {
  if (!may_commit(op->call.guard)) {
    // Cancelled: nothing of it becomes visible.
    const Status why(Errc::cancelled, op->what + ": cancelled");
    release_staged(self, op);
    abort_stream(self, op, why);
    op->call.promise->set_error(why);
    return;
  }
  auto records = put_records(op);
  auto& st = self->state;
  auto on_error = [=](caf::error& e) {
    // Release the staged objects only when the controller answered
    // and refused. After a timeout it may still have committed them,
    // and releasing would leave the key pointing at freed objects;
    // they stay staged instead, and the volume drops them once this
    // client is gone (VolumeConfig::orphan_grace).
    auto s = from_caf_error(e, "commit at controller");
    // Only the controller's own refusal (a meshstore error other than our
    // peer-down/timeout verdicts) proves nothing was committed.
    const bool refused = e.category() == internal::kErrorCategory && s.code() != Errc::timeout &&
                         s.code() != Errc::unavailable;
    if (refused) release_staged(self, op);
    abort_stream(self, op, s);
    op->fail(s);
  };
  if (op->sharded) {
    // Shards commit at the controller once they cover their keys.
    for (const auto& r : records) st.locations->erase(r.key);
    const bool group = !op->call.group_members.empty();
    if (group) forget_locations_under(st, op->call.replace_under);
    ask(self, st.controller, put_shards_atom::value, records,
        group ? op->call.replace_under.front() : std::string(), op->call.group_members,
        op->call.group_layout)
        .then(
            [=](const std::vector<std::uint64_t>& versions) {
              op->call.promise->set_value(versions);
            },
            on_error);
    return;
  }
  if (!op->call.replace_under.empty()) {
    forget_locations_under(st, op->call.replace_under);
    ask(self, st.controller, replace_atom::value, records, op->call.replace_under, true)
        .then(
            [=](const std::vector<std::uint64_t>& versions) mutable {
              remember_committed(op);
              cache_committed(self, std::move(records), versions);
              op->call.promise->set_value(versions);
            },
            on_error);
    return;
  }
  auto committed = [=](const std::vector<std::uint64_t>& versions) mutable {
    remember_committed(op);
    cache_committed(self, std::move(records), versions);
    op->call.promise->set_value(versions);
  };
  if (!op->call.retire.empty()) {
    forget_locations_under(st, op->call.retire);
    ask(self, st.controller, replace_atom::value, records, op->call.retire, true)
        .then(committed, on_error);
    return;
  }
  ask(self, st.controller, notify_put_batch_atom::value, records).then(committed, on_error);
}

// Stages, writes and commits `op` on this client's volume (again after an
// eviction), lending its lent items first.
void start_put(client_pointer self, const std::shared_ptr<PutOp>& op);
void stage_and_write(client_pointer self, const std::shared_ptr<PutOp>& op);

}  // namespace

void handle_put(client_pointer self, PutCall call) {
  auto op = std::make_shared<PutOp>();
  std::vector<std::string> keys;
  for (const auto& i : call.items) keys.push_back(i.key);
  op->what = describe(call.op, keys);
  op->call = std::move(call);
  op->sharded = !op->call.group_members.empty() ||
                std::any_of(op->call.items.begin(), op->call.items.end(),
                            [](const PutItem& i) { return i.slice.has_value(); });
  if (!op->call.lent_items.empty()) {
    std::weak_ptr<PutOp> weak = op;
    op->lent_back = [self, weak] {
      if (auto o = weak.lock()) give_back_lent(self, o);
    };
  }
  if (self->state.cfg.evict_lru && op->call.staged_items.empty()) {
    // A full volume: evict least recently used keys there, then stage
    // again (a refused stage leaves nothing staged).
    std::weak_ptr<PutOp> weak = op;
    op->on_full = [self, weak](const Status& why) {
      auto op = weak.lock();
      if (!op || !op->conn) return false;
      std::uint64_t need = 0;
      for (const auto& item : op->call.items) need += item.view.nbytes();
      const std::string volume = op->conn->info.volume_id;
      self->request(self->state.controller, self->state.cfg.request_timeout, evict_atom::value,
                    volume, need)
          .then(
              [self, op, why](const std::vector<std::string>& evicted) {
                if (evicted.empty()) return op->fail(why);
                op->regions.clear();
                start_put(self, op);
              },
              [op, why](caf::error&) { op->fail(why); });
      return true;
    };
  }
  start_put(self, op);
}

namespace {

// Lends PutCall::lent_items' buffers to the lending volume (once), then
// goes on with `k`; a refusal fails the put with nothing lent.
void lend_first(client_pointer self, const std::shared_ptr<PutOp>& op, std::function<void()> k) {
  if (op->call.lent_items.empty() || !op->lent.empty()) return k();
  if (!op->call.lend_to) {
    return op->fail(Status(Errc::internal, "lent items but no lending volume"));
  }
  LendRequest req;
  const auto& segments = op->call.lent_segments;
  const auto& offsets = op->call.lent_offsets;
  if (!segments.empty() &&
      (segments.size() != op->call.lent_items.size() || offsets.size() != segments.size())) {
    return op->fail(Status(Errc::internal, "lent items and their places differ in number"));
  }
  for (std::size_t i = 0; i < op->call.lent_items.size(); ++i) {
    const auto& item = op->call.lent_items[i];
    if (!item.view.is_contiguous() || item.view.nbytes() == 0) {
      return op->fail(Status(Errc::internal, "'" + item.key +
                                                 "': only whole, contiguous, "
                                                 "non-empty tensors are lent"));
    }
    const int device = on_device(item.view) ? item.view.device().index : -1;
    req.buffers.push_back(LentBuffer{item.key, reinterpret_cast<std::uint64_t>(item.view.data()),
                                     item.view.nbytes(), segments.empty() ? "" : segments[i],
                                     segments.empty() ? 0 : offsets[i], device});
  }
  req.token = std::move(op->call.loan);  // only the regions keep it from now on
  req.revocable = op->call.revocable_loan;
  ask(self, op->call.lend_to, lend_atom::value, std::move(req))
      .then(
          [=](const std::vector<wire::RegionRef>& lent) {
            op->lent = lent;
            if (lent.size() != op->call.lent_items.size()) {
              return op->fail(Status(Errc::protocol_error,
                                     "the lending volume made " + std::to_string(lent.size()) +
                                         " objects of " +
                                         std::to_string(op->call.lent_items.size()) + " buffers"));
            }
            k();
          },
          [=](caf::error& e) {
            op->fail(from_caf_error(e, "lend to volume '" + op->call.lend_volume + "'"));
          });
}

// Writes a gathered object (PutItem::gather) into `region`: its pieces
// straight into the volume's memory where the transport maps it (one
// copy), else packed into a scratch buffer that is then written.
Future<void> write_gathered(const std::shared_ptr<VolumeConn>& c, const wire::RegionRef& region,
                            const std::shared_ptr<const Gather>& g, std::uint64_t n) {
  if (c->transport->capabilities().maps_memory && region.device < 0) {
    auto mem = c->transport->map_writable(region);
    if (!mem.ok()) return make_error_future<void>(mem.status());
    auto dst = std::move(mem).value();
    return fill_gathered(g, dst.get(), n).then([dst] {});
  }
  auto tmp = Tensor::empty(DType::uint8, {static_cast<std::int64_t>(n)});
  if (!tmp.ok()) return make_error_future<void>(tmp.status());
  auto buf = std::make_shared<Tensor>(std::move(tmp).value());
  auto* at = static_cast<std::byte*>(buf->data());
  return fill_gathered(g, at, n).then(
      [c, region, buf, at, n] { return c->transport->write(region, 0, at, n).then([buf] {}); });
}

void start_put(client_pointer self, const std::shared_ptr<PutOp>& op) {
  lend_first(self, op, [self, op] { stage_and_write(self, op); });
}

void stage_and_write(client_pointer self, const std::shared_ptr<PutOp>& op) {
  with_home_volume(self, [=](const ConnResult& conn) {
    if (!conn.ok()) return op->fail(conn.status());
    op->conn = *conn;
    if (op->call.staged_items.size() != op->call.staged.regions.size()) {
      return op->fail(Status(Errc::internal, "staged items and regions differ in number"));
    }
    if (!op->call.staged_items.empty() && op->conn->info.volume_id != op->call.staged.volume_id) {
      // This client's volume changed (the old one went down) since the
      // staging; its regions cannot be committed elsewhere.
      return op->fail(Status(Errc::unavailable, "the staged memory lies on volume '" +
                                                    op->call.staged.volume_id +
                                                    "', no longer this client's volume"));
    }
    const auto& guard = op->call.guard;
    if (!touch_begin(guard)) {  // cancelled before anything was staged
      give_back_lent(self, op);
      return (void)op->call.promise->set_error(Status(Errc::cancelled, op->what + ": cancelled"));
    }
    std::vector<wire::StageRequest> reqs;
    std::uint64_t total = 0;
    bool device = false;  // GPU tensors never travel inline
    for (const auto& item : op->call.items) {
      total += item.view.nbytes();
      if (on_device(item.view)) device = true;
    }
    const auto caps = op->conn->transport->capabilities();
    // Small calls carry their bytes in the stage request: no transfer.
    const bool inline_data = total <= actors::limits::kInlineBytes && !device;
    for (const auto& item : op->call.items) {
      wire::StageRequest r;
      r.key = item.key;
      r.nbytes = item.view.nbytes();
      // cuda-ipc: a device tensor's object goes to the same GPU of the volume.
      if (caps.device_memory && on_device(item.view)) r.device = item.view.device().index;
      if (inline_data) {
        r.has_data = true;
        r.data.resize(r.nbytes);
        if (item.gather) {
          auto s = fill_gathered_now(*item.gather, reinterpret_cast<std::byte*>(r.data.data()),
                                     r.nbytes);
          if (!s.ok()) {
            touch_end(guard);
            return op->fail(s);
          }
        } else if (r.nbytes > 0) {
          pack_to(item.view, r.data.data());
        }
      }
      reqs.push_back(std::move(r));
    }
    touch_end(guard);  // small items' bytes are in the requests now
    auto staged = [=](const std::vector<wire::RegionRef>& regions) {
      op->regions = regions;
      if (regions.size() != op->call.items.size()) {
        release_staged(self, op);
        return op->fail(Status(Errc::protocol_error,
                               "volume staged " + std::to_string(regions.size()) + " objects for " +
                                   std::to_string(op->call.items.size()) + " keys"));
      }
      if (inline_data) return commit_put(self, op);  // the bytes came with the stage
      if (!touch_begin(guard)) {                     // cancelled
        release_staged(self, op);
        return (void)op->call.promise->set_error(Status(Errc::cancelled, op->what + ": cancelled"));
      }
      // The records index the items after the ones written in place.
      const std::uint64_t first = op->call.staged_items.size() + op->call.lent_items.size();
      if (!op->call.stream_manifest.empty() && !op->call.replace_under.empty() &&
          worth_streaming(op->call.items)) {
        // Readers may copy each object as soon as it is filled.
        op->streaming = true;
        op->reported.assign(first + regions.size(), false);
        std::vector<std::uint64_t> filled;
        for (std::uint64_t i = 0; i < first; ++i) filled.push_back(i);
        for (std::size_t i = 0; i < regions.size(); ++i) {
          if (op->call.items[i].view.nbytes() == 0) filled.push_back(first + i);
        }
        for (auto i : filled) op->reported[i] = true;
        // A request (the controller answers it; a plain send's answer would
        // come back as an unexpected message): its commit follows from
        // this actor, so in order, without waiting for the answer.
        self->request(self->state.controller, self->state.cfg.request_timeout,
                      stream_open_atom::value, op->call.replace_under.front(),
                      op->call.stream_manifest, put_records(op), filled)
            .then([](caf::ok_atom) {}, [](caf::error&) {});
      }
      std::vector<Future<void>> writes;
      writes.reserve(regions.size());
      for (std::size_t i = 0; i < regions.size(); ++i) {
        const auto& view = op->call.items[i].view;
        const void* src = view.data();
        if (on_device(view) && !view.is_contiguous()) {
          // The store packs these on their device before the call.
          writes.push_back(make_error_future<void>(
              Status(Errc::internal, "a non-contiguous GPU view reached the client")));
          continue;
        }
        if (const auto& g = op->call.items[i].gather) {
          writes.push_back(write_gathered(op->conn, regions[i], g, view.nbytes()));
        } else if (on_device(view) && !caps.device_copies) {
          writes.push_back(write_from_device(op->conn->transport, regions[i],
                                             static_cast<const std::byte*>(src), view.nbytes()));
        } else {
          if (!view.is_contiguous()) {
            auto tmp = Tensor::empty(view.dtype(), view.shape());
            if (!tmp.ok()) {
              writes.push_back(make_error_future<void>(tmp.status()));
              continue;
            }
            pack_to(view, tmp->data());
            src = tmp->data();
            op->packed.push_back(std::move(tmp).value());
          }
          writes.push_back(op->conn->transport->write(
              regions[i], 0, static_cast<const std::byte*>(src), view.nbytes()));
        }
        if (op->streaming) {
          // Registered before settle_all's own callback, so this
          // report reaches the actor before the commit does.
          await(self, writes.back(), [=](const Result<void>& r) {
            if (r.ok()) report_filled(self, op, {first + i});
          });
        }
      }
      await(self, settle_all(std::move(writes)), [=](const Result<void>& r) {
        touch_end(guard);  // every write is over
        op->packed.clear();
        if (!r.ok()) {
          release_staged(self, op);
          abort_stream(self, op, r.status().with_context(op->what));
          return op->fail(r.status());
        }
        std::vector<std::uint64_t> all;
        for (std::uint64_t i = 0; i < op->reported.size(); ++i) all.push_back(i);
        report_filled(self, op, std::move(all));
        commit_put(self, op);
      });
    };
    auto stage = [=] {
      ask(self, op->conn->handle, stage_atom::value, reqs).then(staged, [=](caf::error& e) {
        op->fail(from_caf_error(e, "stage at volume '" + op->conn->info.volume_id + "'"));
      });
    };
    stage();
  });
}

}  // namespace

}  // namespace meshstore::actors::client_detail
