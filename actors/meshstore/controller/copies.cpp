// Copies of whole keys (StoreOptions::placement.replicas): before a put of a
// whole key commits, the controller has other volumes copy its object
// from the volume the writer chose (copy_from_atom: the volume pulls it
// through the transport a client would use), then commits one record
// naming every copy. When a volume dies, the keys it held a copy of stay
// (their other copies serve reads), and the controller makes the missing
// copies again from a survivor, one key at a time, pausing between copies
// so that repairs take at most Copies::repair_share of the time.
#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "meshstore/controller/controller_state.hpp"
#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/protocol/limits.hpp"

namespace meshstore::controller {

namespace {

using Clock = std::chrono::steady_clock;

// Whether `r` is a whole key stored as one object or as copies of one.
bool whole(const wire::KeyRecord& r) {
  if (!r.pending.empty() || r.shards.empty()) return false;
  return r.shards.size() == 1 ? r.shards.front().slice.is_full() : r.copied();
}

// Up to `n` registered volumes that hold no copy of `r`: on hosts none of
// its copies is on first, taken in turn (Copies::next_target) so that
// copies spread over the volumes.
std::vector<std::string> pick_targets(ControllerState& st, const wire::KeyRecord& r,
                                      std::size_t n) {
  std::set<std::string> holders, hosts;
  for (const auto& s : r.shards) {
    holders.insert(s.volume_id);
    if (const auto* info = st.info_of(s.volume_id)) hosts.insert(info->host);
  }
  std::vector<std::string> out;
  const std::size_t count = st.volume_infos.size();
  for (int pass = 0; pass < 2 && out.size() < n; ++pass) {
    for (std::size_t i = 0; i < count && out.size() < n; ++i) {
      const auto& v = st.volume_infos[(st.copies.next_target + i) % count];
      if (holders.count(v.volume_id) != 0 || st.volumes.count(v.volume_id) == 0) continue;
      if (pass == 0 && hosts.count(v.host) != 0) continue;  // another host first
      out.push_back(v.volume_id);
      holders.insert(v.volume_id);
      hosts.insert(v.host);
    }
  }
  if (count != 0) st.copies.next_target = (st.copies.next_target + 1) % count;
  return out;
}

// How long one copy request may take: the control deadline plus a second
// per 64 MiB (tcp across hosts moves well over that).
std::chrono::milliseconds copy_deadline(std::uint64_t bytes) {
  return std::chrono::milliseconds(30000 + static_cast<std::int64_t>(bytes >> 26) * 1000);
}

// The copies one volume makes of another's objects in one request.
struct Batch {
  std::string target, source;
  std::vector<std::uint64_t> ids, sizes;
  std::vector<std::string> keys;
  std::vector<std::size_t> records;  // the record each copy is of
  std::uint64_t bytes = 0;
};

// What make_copies waits for.
struct CopyJob {
  std::vector<wire::KeyRecord> records;
  std::size_t outstanding = 0;
  Status failure;
  std::map<std::string, std::vector<std::uint64_t>> made;  // to discard on failure
  std::function<void(Result<std::vector<wire::KeyRecord>>)> done;
};

// One batch's copies were made (`ids`, in its order) or failed. A copy
// that failed at its target leaves the key a copy short (made again
// later); one whose source went fails the write: its object is gone.
void batch_done(controller_pointer self, const std::shared_ptr<CopyJob>& job, const Batch& batch,
                Result<std::vector<std::uint64_t>> ids) {
  auto& st = self->state;
  if (ids.ok() && ids->size() != batch.ids.size()) {
    std::map<std::string, std::vector<std::uint64_t>> odd{{batch.target, *ids}};
    send_to_volumes(self, odd, Verdict::discard);
    ids = Status(Errc::protocol_error, "it answered " + std::to_string(ids->size()) +
                                           " copies for " + std::to_string(batch.ids.size()));
  }
  if (!ids.ok()) {
    const auto why = ids.status().with_context("a copy of '" + batch.keys.front() + "' (and " +
                                               std::to_string(batch.keys.size() - 1) +
                                               " more) on volume '" + batch.target + "'");
    if (st.volumes.count(batch.source) == 0) {
      if (job->failure.ok()) {
        job->failure = Status(Errc::unavailable, "volume '" + batch.source +
                                                     "' went down before the commit; put it again")
                           .with_context(why.message());
      }
    } else {
      st.log->warn("{}; committed a copy short, made again later", why.message());
    }
  } else {
    auto& made = job->made[batch.target];
    for (std::size_t j = 0; j < ids->size(); ++j) {
      auto& r = job->records[batch.records[j]];
      wire::ShardRecord copy = r.shards.front();
      copy.volume_id = batch.target;
      copy.object_id = (*ids)[j];
      copy.place.clear();
      r.shards.push_back(std::move(copy));
      made.push_back((*ids)[j]);
    }
  }
  if (--job->outstanding != 0) return;
  if (job->failure.ok()) return job->done(std::move(job->records));
  // Nothing half-made stays: the copies made go, the write fails.
  send_to_volumes(self, job->made, Verdict::discard);
  st.log->warn("{}", job->failure.message());
  job->done(job->failure);
}

// Sends `batch` of `job` to its target; the answer, or the death of its
// source or target (copies_lost_volume), ends it, whichever comes first.
void send_batch(controller_pointer self, const std::shared_ptr<CopyJob>& job, Batch batch) {
  auto& st = self->state;
  const auto token = st.copies.next_batch++;
  auto finish = [self, job, batch, token](Result<std::vector<std::uint64_t>> ids) {
    if (self->state.copies.in_flight.erase(token) == 0) return;  // ended already
    batch_done(self, job, batch, std::move(ids));
  };
  st.copies.in_flight[token] = [finish, batch](const std::string& dead) mutable {
    if (dead == batch.source || dead == batch.target) {
      finish(Status(Errc::unavailable, "volume '" + dead + "' went down"));
    }
  };
  auto t = st.volumes.find(batch.target);
  auto s = st.volumes.find(batch.source);
  if (t == st.volumes.end() || s == st.volumes.end()) {
    return finish(
        Status(Errc::unavailable,
               "volume '" + (s == st.volumes.end() ? batch.source : batch.target) + "' went down"));
  }
  const auto* source = st.info_of(batch.source);
  self->request(t->second, copy_deadline(batch.bytes), protocol::copy_from_atom::value,
                caf::actor_cast<caf::actor>(s->second), source ? source->control : std::string(),
                batch.ids, batch.sizes, batch.keys)
      .then([finish](std::vector<std::uint64_t>& ids) mutable { finish(std::move(ids)); },
            [finish](caf::error& e) mutable { finish(internal::from_caf_error(e, "copy_from")); });
}

}  // namespace

std::uint32_t copies_wanted(const ControllerState& st, const wire::KeyRecord& r) {
  return std::min(r.copies != 0 ? r.copies : st.copies.wanted, protocol::limits::kMaxCopies);
}

bool wants_copies(const ControllerState& st, const std::vector<wire::KeyRecord>& records) {
  if (st.rebuild.active || st.volumes.size() < 2) return false;
  return std::any_of(records.begin(), records.end(), [&](const wire::KeyRecord& r) {
    return r.shards.size() == 1 && whole(r) && copies_wanted(st, r) > 1;
  });
}

void make_copies(controller_pointer self, std::vector<wire::KeyRecord> records,
                 std::function<void(Result<std::vector<wire::KeyRecord>>)> done) {
  auto& st = self->state;
  auto job = std::make_shared<CopyJob>();
  std::map<std::pair<std::string, std::string>, Batch> batches;  // (target, source)
  for (std::size_t i = 0; i < records.size(); ++i) {
    auto& r = records[i];
    if (!whole(r)) continue;
    r.copies = copies_wanted(st, r);
    const auto have = r.shards.size();
    if (r.copies <= have) continue;
    for (const auto& target : pick_targets(st, r, r.copies - have)) {
      auto& b = batches[{target, r.shards.front().volume_id}];
      b.ids.push_back(r.shards.front().object_id);
      b.sizes.push_back(r.shards.front().nbytes);
      b.keys.push_back(r.key);
      b.records.push_back(i);
      b.bytes += r.shards.front().nbytes;
    }
  }
  job->records = std::move(records);
  job->done = std::move(done);
  if (batches.empty()) return job->done(std::move(job->records));
  job->outstanding = batches.size();
  for (auto& [where, batch] : batches) {
    batch.target = where.first;
    batch.source = where.second;
    send_batch(self, job, std::move(batch));
  }
}

void discard_copies(controller_pointer self, const std::vector<wire::KeyRecord>& records) {
  std::map<std::string, std::vector<std::uint64_t>> made;
  for (const auto& r : records) {
    if (!r.copied()) continue;
    for (std::size_t i = 1; i < r.shards.size(); ++i) {
      made[r.shards[i].volume_id].push_back(r.shards[i].object_id);
    }
  }
  send_to_volumes(self, made, Verdict::discard);
}

void copies_lost_volume(controller_pointer self, const std::string& id) {
  std::vector<std::function<void(const std::string&)>> all;
  for (const auto& [token, end] : self->state.copies.in_flight) all.push_back(end);
  for (auto& end : all) end(id);
}

bool keep_copies(ControllerState& st, IndexEntry& entry, const std::string& dead) {
  if (!entry.copied()) return false;
  auto& shards = entry.shards;
  shards.erase(std::remove_if(shards.begin(), shards.end(),
                              [&](const wire::ShardRecord& s) { return s.volume_id == dead; }),
               shards.end());
  if (shards.empty()) return false;
  if (st.copies.queued.insert(entry.key).second) st.copies.repairs.push_back(entry.key);
  return true;
}

void note_thin(controller_pointer self, const std::vector<IndexEntry*>& committed) {
  auto& st = self->state;
  bool any = false;
  for (const auto* r : committed) {
    const auto want = copies_wanted(st, *r);
    if (want < 2) continue;  // the common case: no copies
    if (r->copies > 1) st.copies.per_key = true;
    if (want > r->shards.size() && whole(*r) && st.copies.queued.insert(r->key).second) {
      st.copies.repairs.push_back(r->key);
      any = true;
    }
  }
  if (any) repair_next(self);
}

void queue_thin_keys(controller_pointer self) {
  auto& st = self->state;
  if (st.copies.wanted < 2 && !st.copies.per_key && st.copies.repairs.empty()) return;
  for (const auto& [key, r] : st.index) {
    if (whole(r) && copies_wanted(st, r) > r.shards.size() && st.copies.queued.insert(key).second) {
      st.copies.repairs.push_back(key);
    }
  }
  repair_next(self);
}

void repair_next(controller_pointer self) {
  auto& st = self->state;
  auto& c = st.copies;
  if (c.repairing || st.rebuild.active) return;
  while (!c.repairs.empty()) {
    const std::string key = c.repairs.front();
    c.repairs.pop_front();
    c.queued.erase(key);
    auto it = st.index.find(key);
    if (it == st.index.end() || !whole(it->second) ||
        copies_wanted(st, it->second) <= it->second.shards.size()) {
      continue;
    }
    wire::KeyRecord r = it->second;
    r.copies = copies_wanted(st, r);
    c.repairing = true;
    const auto began = Clock::now();
    make_copies(self, {r}, [self, r, began](Result<std::vector<wire::KeyRecord>> done) {
      auto& st = self->state;
      auto it = st.index.find(r.key);
      // Still the version copied, its copies unchanged since: the new
      // copies join it; else (replaced, removed, another copy lost) they go.
      const bool same = it != st.index.end() && it->second.version == r.version &&
                        it->second.shards.size() == r.shards.size();
      if (done.ok() && same && done->front().shards.size() > r.shards.size()) {
        it->second.shards = done->front().shards;
        it->second.copies = r.copies;
        ++st.copies.repaired;
        st.log->info("key '{}' has {} of {} copies again", r.key, it->second.shards.size(),
                     r.copies);
        send_commits(self, {&it->second});
        st.begin_write();
      } else if (done.ok()) {
        std::map<std::string, std::vector<std::uint64_t>> extra;
        for (std::size_t i = r.shards.size(); i < done->front().shards.size(); ++i) {
          extra[done->front().shards[i].volume_id].push_back(done->front().shards[i].object_id);
        }
        send_to_volumes(self, extra, Verdict::discard);
        st.begin_write();
      }
      // A pause that keeps repairs to their share of the time.
      const auto took = Clock::now() - began;
      const double share = std::clamp(st.copies.repair_share, 0.01, 1.0);
      const auto pause =
          std::chrono::duration_cast<std::chrono::milliseconds>(took * ((1.0 - share) / share));
      self->delayed_send(self, std::max(pause, std::chrono::milliseconds(1)),
                         protocol::repair_atom::value);
    });
    return;
  }
}

void repair_due(controller_pointer self) {
  self->state.copies.repairing = false;
  repair_next(self);
}

}  // namespace meshstore::controller
