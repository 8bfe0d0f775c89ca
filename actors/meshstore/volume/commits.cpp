// The commits a volume is asked for (fast_commit) over a client's channel
// (a ring, tcp's small-op connection, small_op messages): objects the
// client wrote, or whose bytes came in the request. The volume actor
// (storage_volume.cpp) runs them.
#include <algorithm>
#include <cstring>

#include "meshstore/protocol/checks.hpp"
#include "meshstore/protocol/controller_actor.hpp"
#include "meshstore/protocol/fast_get.hpp"
#include "meshstore/protocol/wire_glue.hpp"
#include "meshstore/volume/state.hpp"

namespace meshstore::volume {

namespace {

// False, with what `d` staged dropped, when the reply would outgrow `limit`
// (a channel's reply in parts has a bound).
bool fits_reply(volume_pointer self, protocol::fast_get::CommitDone& d, std::size_t limit) {
  if (protocol::fast_get::encoded_size(d) <= limit) return true;
  for (const auto& r : d.staged) self->state.drop(r.region_id, true);
  self->state.regions->prune();
  d.staged.clear();
  return false;
}

// fast_commit's commit at a controller in this actor system, which answers
// the channel itself (LocalCommit): one actor hop after this one, not two.
// What the request asks staged is staged first, so it cannot land in the
// memory this commit retires: false, with nothing done, when there is no
// room for it beside the version being committed (then the caller commits
// first and stages after, as for a remote controller, in the memory the
// commit retired).
bool local_commit(volume_pointer self, protocol::fast_get::CommitRequest& req,
                  const std::vector<wire::StageRequest>& wanted, const caf::actor& owner,
                  std::size_t limit, const protocol::FastCommitJob::Done& done,
                  const caf::actor& controller,
                  std::vector<protocol::fast_get::CommitDone::Placed> placed) {
  protocol::fast_get::CommitDone d;
  d.placed = std::move(placed);
  if (!wanted.empty() && owner) {
    auto regions = stage(self, wanted, owner);
    if (!regions.ok()) return false;
    d.versions.assign(req.records.size(), 0);  // as the reply will carry them
    d.staged = std::move(regions).value();
    fits_reply(self, d, limit);
  }
  std::vector<std::pair<std::uint64_t, std::string>> committed;  // this volume's
  for (const auto& r : req.records) {
    if (r.shards.front().volume_id == self->state.config.volume_id) {
      committed.emplace_back(r.shards.front().object_id, r.key);
    }
  }
  protocol::LocalCommit commit;
  commit.records = std::move(req.records);
  commit.prefixes = std::move(req.prefixes);
  commit.sharded = req.sharded;
  commit.group = std::move(req.group);
  commit.members = std::move(req.members);
  commit.layout = req.layout;
  commit.volume_id = self->state.config.volume_id;
  commit.retire = [small = self->state.small](const std::vector<std::uint64_t>& retired) {
    return small->retire(retired);
  };
  commit.done = [done, d = std::move(d), committed = std::move(committed),
                 small = self->state.small, volume = caf::actor_cast<caf::actor_addr>(self)](
                    Result<std::vector<std::uint64_t>> r) mutable {
    if (!r.ok()) {
      // Refused: nothing was committed; what was staged for it or ahead
      // goes (the refusal names none).
      std::vector<std::uint64_t> ids;
      for (const auto& s : d.staged) ids.push_back(s.region_id);
      for (const auto& p : d.placed) ids.push_back(p.object_id);
      if (auto v = caf::actor_cast<caf::actor>(volume); v && !ids.empty()) {
        caf::anon_send(v, protocol::release_atom::value, std::move(ids));
      }
      return (*done)(r.status());
    }
    // Gets serve them from now, not only once the volume has the verdict.
    for (const auto& [id, key] : committed) small->commit(id, key);
    d.versions = std::move(r).value();
    (*done)(std::move(d));
  };
  caf::anon_send(controller, protocol::local_commit_atom::value, std::move(commit));
  return true;
}

// Stages the objects of `records` whose bytes came inline (`inlined`, per
// record or empty) for `owner` and fills them: each record's shard then
// names its object and place, which the reply carries (in order).
Result<std::vector<protocol::fast_get::CommitDone::Placed>> place_inline(
    volume_pointer self, std::vector<wire::KeyRecord>& records,
    std::vector<std::optional<std::string>>& inlined, const caf::actor& owner) {
  std::vector<wire::StageRequest> reqs;
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < inlined.size(); ++i) {
    if (!inlined[i]) continue;
    wire::StageRequest r;
    r.key = records[i].key;
    r.nbytes = inlined[i]->size();
    r.has_data = true;
    r.data = std::move(*inlined[i]);
    reqs.push_back(std::move(r));
    at.push_back(i);
  }
  std::vector<protocol::fast_get::CommitDone::Placed> placed;
  if (reqs.empty()) return placed;
  if (!owner) return Status(Errc::unavailable, "fast commit: the client is gone");
  auto staged = stage(self, reqs, owner);
  if (!staged.ok()) return staged.status();
  for (std::size_t j = 0; j < at.size(); ++j) {
    auto& shard = records[at[j]].shards.front();
    const auto& region = (*staged)[j];
    shard.object_id = region.region_id;
    // For readers on this host (lease-free and direct reads).
    auto shm = region.described.find("shm");
    if (shm != region.described.end()) shard.place = shm->second;
    placed.push_back(protocol::fast_get::CommitDone::Placed{shard.object_id, shard.place});
  }
  return placed;
}

}  // namespace

namespace {

// Whether record `r` names an object its client lent to its own process's
// lending volume (direct publishing), not one of this volume's.
bool lent_record(const wire::KeyRecord& r, const std::string& volume_id) {
  return r.shards.size() == 1 && r.shards[0].volume_id != volume_id &&
         protocol::is_lending_volume(r.shards[0].volume_id);
}

}  // namespace

// Checks commit request `req` for volume `volume_id` as input from another
// process (a channel's, or an actor message's): keys, one object of this
// volume per record (named, or its bytes inline) or one lent to a lending
// volume (named), inline bytes that match the record's dtype and shape.
// The volume actor checks the rest (each object of this volume given back
// or committed is one its client staged there). A lent object is the
// client's word, as in a commit a client actor sends the controller.
Status check_commit(const protocol::fast_get::CommitRequest& req, const std::string& volume_id) {
  for (const auto& p : req.prefixes) {
    if (auto s = protocol::check_key("fast commit", p); !s.ok()) {
      return Status(Errc::protocol_error, s.message());
    }
  }
  for (std::size_t i = 0; i < req.records.size(); ++i) {
    const auto& r = req.records[i];
    if (auto s = protocol::check_key("fast commit", r.key); !s.ok()) {
      return Status(Errc::protocol_error, s.message());
    }
    // An object sent inline is named by the volume once it is staged.
    const auto* data = i < req.inlined.size() && req.inlined[i] ? &*req.inlined[i] : nullptr;
    const bool lent = lent_record(r, volume_id) && !data;
    if (r.shards.size() != 1 || (r.shards[0].volume_id != volume_id && !lent) ||
        (r.shards[0].object_id == 0) != (data != nullptr) || !r.pending.empty() || r.version != 0) {
      return Status(Errc::protocol_error,
                    "fast commit of '" + r.key + "': not one object of volume '" + volume_id + "'");
    }
    if (!data) continue;
    if (std::any_of(r.shape.begin(), r.shape.end(), [](std::int64_t d) { return d < 0; })) {
      return Status(Errc::protocol_error, "fast commit of '" + r.key + "': a negative dimension");
    }
    // The object is the record's box (the whole tensor unless sharded);
    // the controller checks the box against the shape.
    const auto& box = r.shards[0].slice;
    const auto numel = box.numel();
    if (data->size() != r.shards[0].nbytes || numel < 0 ||
        static_cast<std::uint64_t>(numel) * dtype_size(r.dtype) != data->size()) {
      return Status(Errc::protocol_error,
                    "fast commit of '" + r.key + "': " + std::to_string(data->size()) +
                        " bytes inline for shape " + shape_to_string(r.shape) + ", box " +
                        box.to_string());
    }
  }
  if (!req.group.empty()) {
    if (auto s = protocol::check_key("fast commit", req.group); !s.ok()) {
      return Status(Errc::protocol_error, s.message());
    }
  }
  for (const auto& m : req.members) {
    if (auto s = protocol::check_key("fast commit", m); !s.ok()) {
      return Status(Errc::protocol_error, s.message());
    }
  }
  for (const auto& s : req.stage) {
    if (auto k = protocol::check_key("fast stage", s.key); !k.ok()) {
      return Status(Errc::protocol_error, k.message());
    }
  }
  return Status();
}

// Answers a fast commit with `versions` after staging what it asked. After a
// commit, a refusal (no room, say) or a reply too large for the channel
// stages nothing and still answers the commit; alone, it is the answer.
void answer_commit(volume_pointer self,
                   const std::function<void(Result<protocol::fast_get::CommitDone>)>& done,
                   const std::vector<wire::StageRequest>& wanted, const caf::actor& owner,
                   std::size_t limit, std::vector<std::uint64_t> versions,
                   std::vector<protocol::fast_get::CommitDone::Placed> placed) {
  protocol::fast_get::CommitDone d;
  d.versions = std::move(versions);
  d.placed = std::move(placed);
  const bool alone = d.versions.empty();
  if (!wanted.empty()) {
    auto regions =
        owner
            ? stage(self, wanted, owner)
            : Result<std::vector<wire::RegionRef>>(Status(Errc::unavailable, "the client is gone"));
    if (regions.ok()) {
      d.staged = std::move(regions).value();
      if (!fits_reply(self, d, limit)) {
        regions = Status(Errc::unsupported, "volume '" + self->state.config.volume_id +
                                                "': " + std::to_string(wanted.size()) +
                                                " staged objects do not fit a reply");
      }
    }
    if (!regions.ok() && alone) return done(regions.status());
  }
  done(std::move(d));
}

// Whether every object `job` commits (not inline, not lent) or gives back
// is one its client staged here and has not committed, of the record's
// size: a fast commit comes from another process and is checked as input.
Status check_fast_commit(const VolumeState& st, const protocol::FastCommitJob& job) {
  const auto& req = job.request;
  auto staged_by_owner = [&](std::uint64_t id, std::uint64_t nbytes, bool any_size) {
    auto it = st.objects.find(id);
    return it != st.objects.end() && !it->second.committed && it->second.owner == job.owner &&
           it->second.region && (any_size || it->second.region->size() == nbytes);
  };
  for (std::size_t i = 0; i < req.records.size(); ++i) {
    const auto& r = req.records[i];
    const auto& shard = r.shards.front();
    const bool inlined = i < job.inlined.size() && job.inlined[i];
    if (!inlined && !lent_record(r, st.config.volume_id) &&
        !staged_by_owner(shard.object_id, shard.nbytes, false)) {
      return Status(Errc::protocol_error, "fast commit of '" + r.key + "': object " +
                                              std::to_string(shard.object_id) +
                                              " is no object of that size its client staged here");
    }
  }
  for (auto id : req.release) {
    if (!staged_by_owner(id, 0, true)) {
      return Status(Errc::protocol_error, "fast commit: object " + std::to_string(id) +
                                              " to give back is no object its client staged here");
    }
  }
  return Status();
}

namespace {

// What commit request `req` asks staged after its commit.
std::vector<wire::StageRequest> stage_requests(const protocol::fast_get::CommitRequest& req) {
  std::vector<wire::StageRequest> wanted;
  for (const auto& s : req.stage) {
    wire::StageRequest r;
    r.key = s.key;
    r.nbytes = s.nbytes;
    r.device = s.device;
    wanted.push_back(std::move(r));
  }
  return wanted;
}

}  // namespace

std::optional<std::vector<std::uint64_t>> committed_already(const VolumeState& st,
                                                            const protocol::FastCommitJob& job) {
  std::vector<std::uint64_t> versions;
  for (std::size_t i = 0; i < job.request.records.size(); ++i) {
    const auto& r = job.request.records[i];
    const bool inlined = i < job.inlined.size() && job.inlined[i];
    // A lent object is another volume's, and inline bytes are not staged
    // yet: such a commit cannot have happened (or cannot be told).
    if (inlined || lent_record(r, st.config.volume_id)) return std::nullopt;
    auto it = st.objects.find(r.shards.front().object_id);
    if (it == st.objects.end() || !it->second.committed || it->second.owner != job.owner ||
        !it->second.record || it->second.record->key != r.key) {
      return std::nullopt;
    }
    versions.push_back(it->second.record->version);
  }
  if (versions.empty()) return std::nullopt;
  return versions;
}

// A fast-path channel's request (FastCommitJob): what its client gives back
// goes, its records commit at the controller, then what it asks is staged
// for it (after the commit, so the next put's objects may land in the
// memory the commit retired). Checked as input from another process: every
// object given back or committed must be one that client staged here, not
// committed, of the record's size; else nothing is done. One held through
// a failover (commit_waits.cpp) that the dead controller committed is
// answered as committed.
void fast_commit(volume_pointer self, protocol::FastCommitJob job,
                 std::vector<protocol::fast_get::CommitDone::Placed> placed_before) {
  auto done = job.done;
  auto& st = self->state;
  auto& req = job.request;
  auto inlined = [&](std::size_t i) { return i < job.inlined.size() && job.inlined[i]; };
  const auto owner = caf::actor_cast<caf::actor>(job.owner);
  const auto wanted = stage_requests(req);
  const std::size_t limit = job.reply_limit;
  auto stage_and_answer = [self, done, wanted, owner, limit](
                              std::vector<std::uint64_t> versions,
                              std::vector<protocol::fast_get::CommitDone::Placed> placed) {
    answer_commit(self, *done, wanted, owner, limit, std::move(versions), std::move(placed));
  };
  if (auto versions = committed_already(st, job)) {
    return stage_and_answer(std::move(*versions), std::move(placed_before));
  }
  if (auto s = check_fast_commit(st, job); !s.ok()) return (*done)(s);
  // Committed under the records' keys (objects staged ahead were staged
  // under the keys of the put before: a version's keys change).
  for (std::size_t i = 0; i < req.records.size(); ++i) {
    const auto& r = req.records[i];
    if (!inlined(i) && !lent_record(r, st.config.volume_id)) {
      st.objects[r.shards.front().object_id].key = r.key;
    }
  }
  if (!req.release.empty()) st.drop_all(req.release, true);
  if (req.records.empty()) return stage_and_answer({}, std::move(placed_before));
  // A controller this actor saw go down (its down_msg came first) would
  // never answer: a request to a dead remote actor only times out. The
  // commit waits for a new one, or fails.
  auto controller = caf::actor_cast<caf::actor>(job.controller);
  if (!controller || st.controllers.count(job.controller) == 0) {
    if (hold_commit(self, job, std::move(placed_before))) return;
    return (*done)(Status(Errc::unavailable, "fast commit: the controller went down"));
  }
  auto placed = place_inline(self, req.records, job.inlined, owner);
  if (!placed.ok()) return (*done)(placed.status());
  std::vector<std::uint64_t> placed_ids;
  for (const auto& p : *placed) placed_ids.push_back(p.object_id);
  placed->insert(placed->begin(), placed_before.begin(), placed_before.end());
  // In this actor system: CAF 0.17 gives each system of a process a node
  // id of its own, so another system's controller is remote.
  if (!job.answer_here && controller.node() == self->node() &&
      local_commit(self, req, wanted, owner, limit, done, controller, *placed)) {
    return;
  }
  // Kept until answered: if the controller dies first, the commit is held
  // for the next one.
  job.inlined.clear();
  const auto token = track_sent(self, job, *placed, job.controller);
  // The controller answers this volume without a flush: its release of
  // what the commit superseded reaches this actor before the answer.
  const auto timeout = st.config.transport_config.request_timeout;
  auto sent = req.sharded ? self->request(controller, timeout, protocol::put_shards_atom::value,
                                          std::move(req.records), std::move(req.group),
                                          std::move(req.members), req.layout)
                          : self->request(controller, timeout, protocol::replace_atom::value,
                                          std::move(req.records), std::move(req.prefixes), true);
  sent.then(
      [self, token, stage_and_answer,
       placed = std::move(placed).value()](std::vector<std::uint64_t>& versions) mutable {
        if (sent_answered(self, token)) stage_and_answer(std::move(versions), std::move(placed));
      },
      [self, done, token, placed_ids](caf::error& e) {
        if (!sent_answered(self, token)) return;  // held for a new controller
        // Refused: nothing was committed, so what was staged for the
        // bytes sent inline goes. After a timeout the controller may
        // still have committed them; they stay, and go with their client.
        if (internal::refused(e)) {
          self->state.drop_all(placed_ids, true);
        }
        (*done)(internal::from_caf_error(e, "commit at the controller"));
      });
}

}  // namespace meshstore::volume
