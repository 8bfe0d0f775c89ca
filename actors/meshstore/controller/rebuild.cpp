// Rebuilding the index from its volumes. Each volume keeps, beside every
// committed object, the record the controller committed for it
// (volume/records_kept.cpp); a controller that starts against live volumes
// takes each one's records as it registers:
//
// - the newest version of each key wins; the objects of older ones go;
// - a key comes back once every volume its shards name has reported it;
// - a state dict (a group) comes back whole: its manifest with every key
//   the same commit wrote (KeyRecord::group_commit, group_size), or none;
// - a version pointer comes back once the version it names is back.
//
// Until nothing waits for a volume (or the rebuild's deadline), commits,
// removes and reads of a key not back yet wait: their handlers skip the
// message (caf::skip), which CAF runs again after the next one this actor
// takes, and finish_rebuild sends one. At the deadline, what still waits
// is dropped and its keys are lost, naming the volume that never came.
#include <algorithm>
#include <unordered_set>

#include "meshstore/controller/controller_state.hpp"
#include "meshstore/protocol/controller_actor.hpp"
#include "meshstore/protocol/wire_glue.hpp"

namespace meshstore::controller {

namespace {

using Objects = std::map<std::string, std::vector<std::uint64_t>>;

// The objects of `r` on volume `vid`, into `out`.
void collect_on(const wire::KeyRecord& r, const std::string& vid, Objects& out) {
  for (const auto& s : r.shards) {
    if (s.volume_id == vid) out[vid].push_back(s.object_id);
  }
}

// The objects of candidate `c` on the volumes that reported it, into `out`.
void collect_reported(const Rebuild::Candidate& c, Objects& out) {
  for (const auto& vid : c.reported_by) collect_on(c.record, vid, out);
}

// Whether every volume `c`'s shards name reported it and is registered.
bool complete(const ControllerState& st, const Rebuild::Candidate& c) {
  return std::all_of(c.record.shards.begin(), c.record.shards.end(), [&](const auto& s) {
    return c.reported_by.count(s.volume_id) != 0 && st.volumes.count(s.volume_id) != 0;
  });
}

// A volume `c` waits for: one its shards name that has not reported it.
std::string awaited(const Rebuild::Candidate& c) {
  for (const auto& s : c.record.shards) {
    if (c.reported_by.count(s.volume_id) == 0) return s.volume_id;
  }
  return c.record.shards.empty() ? std::string() : c.record.shards.front().volume_id;
}

// What a standby's controller waits for before any volume of the store it
// took over reported (Rebuild::awaits_old_volume).
const std::string kAnOldVolume = "(any volume of the store taken over)";

// A volume the reporting ones knew of that has not reported, or one whose
// records still come in parts, other than `except`; "" if none.
std::string missing_volume(const Rebuild& rb, const std::string& except = {}) {
  if (rb.awaits_old_volume) return kAnOldVolume;
  for (const auto& id : rb.expected) {
    if (rb.reported.count(id) == 0 && id != except) return id;
  }
  for (const auto& id : rb.reporting) {
    if (id != except) return id;
  }
  return {};
}

// What the rebuild waits for first: a volume it expects, or one a
// candidate's shards name.
std::string waiting_for(const Rebuild& rb) {
  auto id = missing_volume(rb);
  if (id.empty() && !rb.candidates.empty()) id = awaited(rb.candidates.begin()->second);
  return id;
}

// How the records of one registering volume meet the index: during a
// rebuild (or a registration against an empty index) the newest version
// of a key wins, wherever it came from; once the index is written to
// again, what was committed since wins over a volume that comes late, and
// only an entry that volume's own records put there (a newer version of
// it among them may come after) gives way.
struct Taking {
  const std::string& vid;
  bool newest_wins;
  std::unordered_set<std::string>* own;  // !newest_wins: keys its records restored

  bool may_replace(const std::string& key) const {
    return newest_wins || (own != nullptr && own->count(key) != 0);
  }
};

// Merges record `r` that volume `t.vid` keeps; what it supersedes (or what
// supersedes it) goes into `stale`.
void take_one(ControllerState& st, const Taking& t, wire::KeyRecord r, Objects& stale) {
  auto& rb = st.rebuild;
  const auto& vid = t.vid;
  st.last_version = std::max(st.last_version, r.version);
  if (r.copies > 1) st.copies.per_key = true;
  auto in_index = st.index.find(r.key);
  if (in_index != st.index.end() &&
      (!t.may_replace(r.key) || in_index->second.version >= r.version)) {
    collect_on(r, vid, stale);
    return;
  }
  auto it = rb.candidates.find(r.key);
  if (it == rb.candidates.end()) {
    auto key = r.key;
    rb.candidates.emplace(std::move(key), Rebuild::Candidate{std::move(r), {vid}});
    return;
  }
  auto& c = it->second;
  if (c.record.version > r.version) {
    collect_on(r, vid, stale);
  } else if (c.record.version == r.version) {
    c.reported_by.insert(vid);
    // A copy made again after a volume died: the volumes that kept the
    // record from before it may not name it.
    for (auto& s : r.shards) {
      const bool known = std::any_of(c.record.shards.begin(), c.record.shards.end(),
                                     [&](const auto& k) { return k.volume_id == s.volume_id; });
      if (!known && r.copied()) c.record.shards.push_back(std::move(s));
    }
  } else {
    collect_reported(c, stale);
    c = Rebuild::Candidate{std::move(r), {vid}};
  }
}

// Whether record `r`, which volume `vid` keeps, can go straight into the
// index (once no volume is expected: restore_alone): it is that volume's
// alone, of no state dict, no version pointer, and no other volume
// reported a version of its key.
bool stands_alone(const ControllerState& st, const std::string& vid, const wire::KeyRecord& r) {
  if (!r.group.empty() || r.points_to != 0) return false;
  for (const auto& s : r.shards) {
    if (s.volume_id != vid) return false;
  }
  return st.rebuild.candidates.count(r.key) == 0;
}

// Restores `r` (stands_alone) without the candidates' bookkeeping, the
// way a rebuild from one volume spends most of its time: the newer of it
// and the index's version stays (as Taking says), the other's objects go
// into `stale`.
void restore_alone(ControllerState& st, const Taking& t, wire::KeyRecord r, Objects& stale) {
  st.last_version = std::max(st.last_version, r.version);
  auto [it, fresh] = st.index.try_emplace(r.key);
  if (!fresh) {
    if (!t.may_replace(r.key) || it->second.version >= r.version) {
      return collect_on(r, t.vid, stale);
    }
    collect(it->second, stale);
  }
  if (t.own != nullptr) t.own->insert(r.key);
  it->second = std::move(r);
  st.touch(it->second);
  if (!st.lost.empty()) st.lost.erase(it->first);
  ++st.rebuild.restored;
}

// Candidate `key` goes into the index (a newer version than the entry it
// replaces, whose objects go into `stale`).
void restore(ControllerState& st, const std::string& key, Objects& stale) {
  auto it = st.rebuild.candidates.find(key);
  auto& slot = st.index[key];
  if (slot.found()) collect(slot, stale);
  slot = std::move(it->second.record);
  st.touch(slot);
  st.lost.erase(key);
  st.rebuild.candidates.erase(it);
  ++st.rebuild.restored;
}

// Restores state dict `group` when its manifest and every key its commit
// wrote are complete; drops its keys of older commits.
void restore_group(ControllerState& st, const std::string& group,
                   const std::vector<std::string>& keys, Objects& stale) {
  auto& cands = st.rebuild.candidates;
  auto manifest = cands.find(group);
  std::uint64_t commit = 0;
  std::uint32_t size = 0;
  if (manifest != cands.end() && manifest->second.record.group == group) {
    commit = manifest->second.record.group_commit;
    size = manifest->second.record.group_size;
  } else if (auto in = st.index.find(group); in != st.index.end()) {
    commit = in->second.group_commit;  // restored already: these are older
  } else {
    return;  // the manifest has not been reported yet
  }
  std::vector<std::string> ready;
  for (const auto& k : keys) {
    const auto& c = cands.at(k);
    if (c.record.group_commit < commit) {
      collect_reported(c, stale);
      cands.erase(k);
    } else if (c.record.group_commit == commit && complete(st, c)) {
      ready.push_back(k);
    }
  }
  if (manifest == cands.end() || ready.size() != size) return;
  for (const auto& k : ready) restore(st, k, stale);
}

// Restores every candidate that is complete, state dicts whole, then the
// version pointers whose versions are back.
void restore_ready(ControllerState& st, Objects& stale) {
  std::map<std::string, std::vector<std::string>> groups;
  std::vector<std::string> whole;
  for (const auto& [k, c] : st.rebuild.candidates) {
    if (!c.record.group.empty()) {
      groups[c.record.group].push_back(k);
    } else if (c.record.points_to == 0 && complete(st, c)) {
      whole.push_back(k);
    }
  }
  for (const auto& k : whole) restore(st, k, stale);
  for (const auto& [g, keys] : groups) restore_group(st, g, keys, stale);
  std::vector<std::string> pointers;
  for (const auto& [k, c] : st.rebuild.candidates) {
    if (c.record.group.empty() && c.record.points_to != 0 && complete(st, c) &&
        st.index.count(k + "/v" + std::to_string(c.record.points_to)) != 0) {
      pointers.push_back(k);
    }
  }
  for (const auto& k : pointers) restore(st, k, stale);
}

// Starts the rebuild's deadline, rebuild_grace from now; one started
// before is stale. Again at each part of a volume's records: a deadline
// counts from the last sign of progress, not from the first part of a
// million records.
void arm_deadline(controller_pointer self) {
  auto& st = self->state;
  const auto epoch = ++st.rebuild.epoch;
  self->delayed_send(self, st.rebuild_grace, protocol::rebuild_end_atom::value, epoch);
}

// Turns the rebuild on (commits and misses wait), with its deadline,
// unless it is on already.
void begin_rebuild(controller_pointer self) {
  auto& st = self->state;
  auto& rb = st.rebuild;
  if (rb.active) return;
  rb.active = true;
  rb.began = std::chrono::steady_clock::now();
  st.log->info("rebuilding the index: {} key(s) wait, and for volume '{}' (at most {} ms)",
               rb.candidates.size(), waiting_for(rb), st.rebuild_grace.count());
  arm_deadline(self);
}

// The rebuild is over: what waited for it runs. A message skipped is run
// again once the actor takes another from the same queue: this one, which
// rebuild_end ignores (no rebuild has epoch 0).
void finish_rebuild(controller_pointer self) {
  auto& rb = self->state.rebuild;
  rb.active = false;
  rb.expected.clear();
  self->send(self, protocol::rebuild_end_atom::value, std::uint64_t{0});
  queue_thin_keys(self);  // copies a volume that never came back took
}

}  // namespace

void take_records(controller_pointer self, const std::string& volume_id,
                  std::vector<wire::KeyRecord> records, const std::vector<std::string>& peers,
                  bool last) {
  auto& st = self->state;
  auto& rb = st.rebuild;
  const bool first = rb.reporting.count(volume_id) == 0;
  const bool newest_wins = rb.active || st.index.empty();
  // A volume of the store a standby took over: it keeps records, or knew
  // volumes this controller has not seen (a fresh one knows only those
  // registered here, which told it so as it registered).
  if (rb.awaits_old_volume &&
      (!records.empty() || std::any_of(peers.begin(), peers.end(), [&](const std::string& id) {
        return st.volumes.count(id) == 0;
      }))) {
    rb.awaits_old_volume = false;
  }
  // The volumes it knew of may hold newer versions: wait for them, unless
  // the index is already being written to again.
  if (rb.active || st.index.empty()) rb.expected.insert(peers.begin(), peers.end());
  // A restarted rebuild counts afresh.
  if (!rb.active && first) rb.restored = 0;
  if (!last) {
    rb.reporting.insert(volume_id);
    // An empty index waits for the rest; a rebuild under way waits longer.
    if (rb.active) {
      arm_deadline(self);
    } else if (st.index.empty()) {
      begin_rebuild(self);
    }
  } else {
    rb.reporting.erase(volume_id);
    rb.reported.insert(volume_id);
    rb.given_up.erase(volume_id);
  }
  Objects stale;
  // With no other volume to wait for, what stands alone needs no candidate
  // (this volume's earlier parts are its own: a newer version in a later
  // part replaces an older one restored from an earlier).
  const bool alone_ok = missing_volume(rb, volume_id).empty();
  const Taking taking{volume_id, newest_wins, newest_wins ? nullptr : &rb.late_keys[volume_id]};
  for (auto& r : records) {
    if (!r.found()) continue;
    if (alone_ok && stands_alone(st, volume_id, r)) {
      restore_alone(st, taking, std::move(r), stale);
    } else {
      take_one(st, taking, std::move(r), stale);
    }
  }
  if (last) rb.late_keys.erase(volume_id);
  // Nothing comes back while a volume that may hold a newer version of it
  // is still expected, this one's later parts included: no reader sees a
  // version go back.
  if (last && missing_volume(rb).empty()) restore_ready(st, stale);
  send_to_volumes(self, stale, Verdict::discard);
  st.begin_write();   // a registration answers without waiting for these
  if (!last) return;  // what waits on this volume is decided with its last part
  if (rb.candidates.empty() && missing_volume(rb).empty()) {
    if (rb.active || rb.restored != 0) {
      st.log->info("index rebuilt from {} volume(s): {} key(s) back", rb.reported.size(),
                   rb.restored);
    }
    finish_rebuild(self);
    return;
  }
  begin_rebuild(self);
}

void expect_volumes(controller_pointer self, const std::vector<std::string>& ids) {
  auto& st = self->state;
  auto& rb = st.rebuild;
  // An index written to since it was rebuilt (or never rebuilt and not
  // empty) waits for nothing: what a late volume brings is merged then.
  if (!rb.active && !st.index.empty()) return;
  for (const auto& id : ids) {
    if (rb.reported.count(id) == 0) rb.expected.insert(id);
  }
  if (!missing_volume(rb).empty()) begin_rebuild(self);
}

void end_rebuild(controller_pointer self, std::uint64_t epoch) {
  auto& st = self->state;
  auto& rb = st.rebuild;
  if (!rb.active || epoch != rb.epoch) return;
  if (rb.awaits_old_volume) {
    rb.awaits_old_volume = false;
    st.log->warn(
        "no volume of the store this standby took over reported within {} ms: it serves what "
        "the volumes that came hold",
        st.rebuild_grace.count());
  }
  // The volumes still expected are given up: what is complete without
  // them comes back, the rest is lost.
  const auto missing = missing_volume(rb);
  for (const auto& id : rb.expected) {
    if (rb.reported.count(id) == 0) rb.given_up.insert(id);
  }
  Objects dropped;
  // A key kept as copies comes back with those whose volumes reported it.
  for (auto& [k, c] : rb.candidates) {
    if (!c.record.copied()) continue;
    auto& shards = c.record.shards;
    auto gone = [&](const wire::ShardRecord& s) {
      return c.reported_by.count(s.volume_id) == 0 || st.volumes.count(s.volume_id) == 0;
    };
    if (std::all_of(shards.begin(), shards.end(), gone)) continue;
    shards.erase(std::remove_if(shards.begin(), shards.end(), gone), shards.end());
  }
  restore_ready(st, dropped);
  for (const auto& [k, c] : rb.candidates) {
    collect_reported(c, dropped);
    // Its own shard's volume, or (a state dict's key, a version pointer)
    // the volume that held what it waited for.
    st.lost[k] = complete(st, c) && !missing.empty() ? missing : awaited(c);
  }
  if (rb.candidates.empty()) {
    if (!missing.empty()) {
      st.log->warn("index rebuilt without volume '{}', which never came back; {} key(s) back",
                   missing, rb.restored);
    }
  } else {
    st.log->warn(
        "index rebuilt without {} key(s) whose volumes never came back (first: '{}', "
        "on volume '{}'); {} key(s) back",
        rb.candidates.size(), rb.candidates.begin()->first, st.lost[rb.candidates.begin()->first],
        rb.restored);
  }
  rb.candidates.clear();
  finish_rebuild(self);
  send_to_volumes(self, dropped, Verdict::discard);
  st.begin_write();
}

void await_old_volumes(controller_pointer self) {
  self->state.rebuild.awaits_old_volume = true;
  begin_rebuild(self);
}

// Registers volume `v` and takes the records it keeps into the index
// (rebuild.cpp), then answers. A volume that does not tell them within the
// flush bound joins with none.
caf::result<caf::ok_atom> join_volume(controller_pointer self, const wire::VolumeInfo& info,
                                      protocol::storage_volume_actor v) {
  // The same volume again (a reconnecting process whose earlier attempt
  // got this far): it is here, its records taken.
  auto known = self->state.volumes.find(info.volume_id);
  if (known != self->state.volumes.end() && known->second.address() == v.address()) {
    return caf::ok_atom::value;
  }
  if (auto s = register_volume(self, info, v); !s.ok()) return internal::to_caf_error(s);
  auto rp = self->make_response_promise<caf::ok_atom>();
  self->request(v, kFlushTimeout, protocol::held_records_atom::value,
                caf::actor_cast<caf::actor>(self))
      .then(
          [=](wire::HeldRecords& records, std::vector<std::string>& peers) mutable {
            take_records(self, info.volume_id, std::move(records).take(), peers);
            rp.deliver(caf::ok_atom::value);
            queue_thin_keys(self);  // a volume to put copies on
          },
          [=](caf::error& e) mutable {
            self->state.log->warn("volume '{}' did not tell its records: {}", info.volume_id,
                                  self->system().render(e));
            // Its parts taken so far stay; it waits for no last part now.
            self->state.rebuild.reporting.erase(info.volume_id);
            self->state.rebuild.late_keys.erase(info.volume_id);
            rp.deliver(caf::ok_atom::value);
          });
  return rp;
}

// A part of registering volume `id`'s records, ahead of its answer to
// held_records (many records come in parts): taken as they come, from
// that volume only.
void take_part(controller_pointer self, const std::string& id, wire::HeldRecords& records,
               const std::vector<std::string>& peers) {
  auto& st = self->state;
  auto it = st.volumes.find(id);
  if (it == st.volumes.end() ||
      it->second.address() != caf::actor_cast<caf::actor_addr>(self->current_sender())) {
    st.log->warn("records said to be volume '{}''s from another actor: ignored", id);
    return;
  }
  take_records(self, id, std::move(records).take(), peers, false);
}

}  // namespace meshstore::controller
