// The controller's writes to its index: commits (whole keys, batches and
// sharded puts), a state dict's group replaced, and removals, with what
// each tells the volumes.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "meshstore/controller/controller_state.hpp"
#include "meshstore/protocol/controller_actor.hpp"
#include "meshstore/protocol/limits.hpp"

namespace meshstore::controller {

namespace {

Status validate_record(const ControllerState& st, const wire::KeyRecord& r) {
  const std::string ctx = "notify_put '" + r.key + "'";
  if (r.key.empty()) return Status(Errc::invalid_argument, "notify_put: empty key");
  if (r.shards.empty()) return Status(Errc::invalid_argument, ctx + ": no shards");
  if (r.copies > protocol::limits::kMaxCopies) {
    return Status(Errc::invalid_argument, ctx + ": " + std::to_string(r.copies) +
                                              " copies wanted, at most " +
                                              std::to_string(protocol::limits::kMaxCopies));
  }
  const auto elsize = dtype_size(r.dtype);
  // Copies of the whole key (make_copies) are checked as one shard.
  const std::size_t distinct = r.copied() ? 1 : r.shards.size();
  for (std::size_t i = 1; i < r.shards.size() && distinct == 1; ++i) {
    if (st.volumes.count(r.shards[i].volume_id) == 0) {
      return unknown_volume(st, ctx, r.shards[i].volume_id);
    }
    if (r.shards[i].nbytes != r.shards[0].nbytes) {
      return Status(Errc::invalid_argument, ctx + ": its copies differ in size");
    }
  }
  std::int64_t covered = 0;
  for (std::size_t i = 0; i < distinct; ++i) {
    const auto& s = r.shards[i];
    if (st.volumes.count(s.volume_id) == 0) return unknown_volume(st, ctx, s.volume_id);
    if (s.slice.global_shape() != r.shape) {
      return Status(Errc::shape_mismatch, ctx + ": shard " + s.slice.to_string() +
                                              " is not in global shape " +
                                              shape_to_string(r.shape));
    }
    if (s.nbytes != static_cast<std::uint64_t>(s.slice.numel()) * elsize) {
      return Status(Errc::invalid_argument, ctx + ": shard " + s.slice.to_string() + " holds " +
                                                std::to_string(s.nbytes) + " bytes, expected " +
                                                std::to_string(s.slice.numel() * elsize));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (s.slice.intersect(r.shards[j].slice)) {
        return Status(Errc::invalid_argument, ctx + ": shards " + r.shards[j].slice.to_string() +
                                                  " and " + s.slice.to_string() + " overlap");
      }
    }
    covered += s.slice.numel();
  }
  if (covered != shape_numel(r.shape)) {
    return Status(Errc::partially_committed, ctx + ": shards cover " + std::to_string(covered) +
                                                 " of " + std::to_string(shape_numel(r.shape)) +
                                                 " elements");
  }
  return Status();
}

// A record's precondition (KeyRecord::expect_version) against the index.
Status check_expected(const ControllerState& st, const wire::KeyRecord& r) {
  if (!r.expect_version) return Status();
  const auto it = st.index.find(r.key);
  const std::uint64_t now = it != st.index.end() && it->second.found() ? it->second.version : 0;
  if (now == *r.expect_version) return Status();
  const std::string expected = *r.expect_version == 0
                                   ? std::string("expected no such key")
                                   : "expected version " + std::to_string(*r.expect_version);
  const std::string found =
      now == 0 ? std::string("it is gone") : "it is at version " + std::to_string(now);
  return Status(Errc::conflict,
                "'" + r.key + "' was changed by another writer (" + expected + ", " + found + ")");
}

// Stamps the keys of each state dict (group) that `committed` (one
// commit's index entries) wrote with that commit: the version of its first
// key there, and how many it wrote (a rebuilt index restores a state dict
// only whole). Other keys carry none. A commit writes one group or few.
void stamp_groups(const std::vector<IndexEntry*>& committed) {
  struct Group {
    const std::string* name;
    std::uint64_t first;
    std::uint32_t size;
  };
  std::vector<Group> groups;
  auto find = [&](const std::string& g) {
    return std::find_if(groups.begin(), groups.end(), [&](const Group& x) { return *x.name == g; });
  };
  for (const auto* r : committed) {
    if (r->group.empty()) continue;
    auto it = find(r->group);
    if (it == groups.end()) {
      groups.push_back(Group{&r->group, r->version, 1});
    } else {
      ++it->size;
    }
  }
  for (auto* r : committed) {
    const auto it = r->group.empty() ? groups.end() : find(r->group);
    r->group_commit = it == groups.end() ? 0 : it->first;
    r->group_size = it == groups.end() ? 0 : it->size;
  }
}

}  // namespace

std::optional<Result<std::vector<std::uint64_t>>> resent(
    const ControllerState& st, const std::vector<wire::KeyRecord>& records) {
  std::vector<std::uint64_t> versions;
  const wire::KeyRecord* changed = nullptr;  // a key written since
  for (const auto& r : records) {
    const auto it = st.index.find(r.key);
    const bool same = !r.shards.empty() && it != st.index.end() && it->second.found() &&
                      it->second.points_to == r.points_to &&
                      std::any_of(it->second.shards.begin(), it->second.shards.end(),
                                  [&](const wire::ShardRecord& s) {
                                    return s.volume_id == r.shards.front().volume_id &&
                                           s.object_id == r.shards.front().object_id &&
                                           s.object_id != 0;
                                  });
    if (same) {
      versions.push_back(it->second.version);
    } else if (changed == nullptr) {
      changed = &r;
    }
  }
  if (versions.empty()) return std::nullopt;
  if (changed != nullptr) {
    return Result<std::vector<std::uint64_t>>(
        Status(Errc::conflict, "a commit sent again was applied before, and '" + changed->key +
                                   "' has been written since"));
  }
  return Result<std::vector<std::uint64_t>>(std::move(versions));
}

Result<std::vector<std::uint64_t>> commit_batch(controller_pointer self,
                                                const std::vector<wire::KeyRecord>& records) {
  auto& st = self->state;
  std::set<std::string> seen;
  for (const auto& r : records) {
    MESHSTORE_RETURN_IF_ERROR(validate_record(st, r));
    if (!seen.insert(r.key).second) {
      return Status(Errc::invalid_argument, "notify_put_batch: key '" + r.key + "' appears twice");
    }
    MESHSTORE_RETURN_IF_ERROR(check_expected(st, r));
  }
  // Validated as a whole, applied as a whole: no reader sees half a batch,
  // since this handler runs to completion before the next message.
  std::map<std::string, std::vector<std::uint64_t>> released;
  std::vector<std::uint64_t> versions;
  versions.reserve(records.size());
  std::vector<IndexEntry*> committed;
  committed.reserve(records.size());
  for (const auto& r : records) {
    st.lost.erase(r.key);
    auto& slot = st.index[r.key];
    if (slot.found()) collect(slot, released);
    st.written.push_back(r.key);
    slot = r;
    slot.expect_version.reset();
    slot.version = ++st.last_version;
    st.touch(slot);
    versions.push_back(slot.version);
    committed.push_back(&slot);
  }
  stamp_groups(committed);
  // The new records first, then the release of what they superseded: a
  // controller that dies between the two leaves both versions on the
  // volumes (a rebuild keeps the newer), never neither. Readers see no
  // difference: the write is answered, and its readers told, once the
  // volumes flushed both (after_flush).
  send_commits(self, committed);
  send_to_volumes(self, released, Verdict::release);
  note_thin(self, committed);
  if (!st.streams.empty() || !st.waiters.empty()) {
    for (const auto& r : records) streams_committed(self, r.key);
  }
  return versions;
}

// packed buckets "P#packed..." and the "P/..." keys written with it, not
// keys put on their own under P/) for each P of `prefixes`, except `kept`.
std::vector<std::string> group_keys(const ControllerState& st,
                                    const std::vector<std::string>& prefixes,
                                    const std::set<std::string>& kept) {
  std::vector<std::string> out;
  auto consider = [&](const std::string& k, const wire::KeyRecord& r, const std::string& p) {
    if (kept.count(k) == 0 && (r.group == p || k == p)) out.push_back(k);
  };
  for (const auto& p : prefixes) {
    if (auto it = st.index.find(p); it != st.index.end()) consider(p, it->second, p);
    const std::string packed = p + "#packed";
    for (auto it = st.index.lower_bound(packed);
         it != st.index.end() && it->first.compare(0, packed.size(), packed) == 0; ++it) {
      consider(it->first, it->second, p);
    }
    const std::string under = p + "/";
    for (auto it = st.index.lower_bound(under);
         it != st.index.end() && it->first.compare(0, under.size(), under) == 0; ++it) {
      consider(it->first, it->second, p);
    }
  }
  return out;
}

// One sharded put's shards (or a sharded state dict's, as group `group`
// of `members`, `layout`): checked against each other and the pending
// shards of their keys, then added; each key its shards now cover commits
// (a group's all at once, when every member is covered). Answers a version
// per record: 0 for a key still waiting for shards.
Result<std::vector<std::uint64_t>> put_shards(controller_pointer self,
                                              const std::vector<wire::KeyRecord>& records,
                                              const std::string& group,
                                              const std::vector<std::string>& members,
                                              std::uint64_t layout) {
  auto& st = self->state;
  st.count(protocol::ControllerCounter::notify_put_batch);
  // Validated as a whole (against each other too), then applied.
  if (auto s = validate_group(st, records, group, members, layout); !s.ok()) {
    return s;
  }
  auto pending = st.pending;
  for (const auto& r : records) {
    if (auto s = validate_shard(st, pending, r); !s.ok()) return s;
    add_shard(pending, r);
  }
  st.pending = std::move(pending);
  if (!group.empty() && st.groups.count(group) == 0) {
    st.groups[group] = ControllerState::Group{members, layout};
  }
  std::map<std::string, std::vector<std::uint64_t>> adopted, released;
  // The volumes keep them even if their writers die.
  for (const auto& r : records) collect(r, adopted);
  send_to_volumes(self, adopted, Verdict::commit);
  // Commits `key`'s pending shards, all at once.
  std::vector<std::string> committed;
  auto commit = [&](const std::string& key) {
    auto it = st.pending.find(key);
    st.lost.erase(key);
    auto& slot = st.index[key];
    if (slot.found()) collect(slot, released);
    st.written.push_back(key);
    slot = std::move(it->second);
    slot.version = ++st.last_version;
    st.touch(slot);
    st.pending.erase(it);
    committed.push_back(key);
  };
  auto complete = [&](const std::string& key) { return pending_complete(st, key); };
  if (group.empty()) {
    // Keys whose shards now cover them commit.
    for (const auto& r : records) {
      if (complete(r.key)) commit(r.key);
    }
  } else if (std::all_of(members.begin(), members.end(), complete)) {
    // The whole state dict commits in this handler run, and the keys
    // its previous version had and this one has not go with it.
    for (const auto& m : members) commit(m);
    st.groups.erase(group);
  }
  // A state dict's keys (all in `group`) are stamped as one commit; a
  // sharded key put on its own carries no group.
  std::vector<IndexEntry*> records_now;
  for (const auto& k : committed) records_now.push_back(&st.index.at(k));
  stamp_groups(records_now);
  // As commit_batch: the new records reach the volumes before anything
  // this commit supersedes is released, the keys its state dict's
  // previous version had and this one has not included.
  send_commits(self, records_now);
  send_to_volumes(self, released, Verdict::release);
  if (!group.empty() && !committed.empty()) {
    const auto stale =
        group_keys(st, {group}, std::set<std::string>(members.begin(), members.end()));
    if (!stale.empty()) remove_keys(self, stale, Verdict::release);
  }
  if (!st.streams.empty() || !st.waiters.empty()) {
    for (const auto& k : committed) streams_committed(self, k);
  }
  std::vector<std::uint64_t> versions;
  versions.reserve(records.size());
  for (const auto& r : records) {
    auto it = st.index.find(r.key);
    const bool now = std::find(committed.begin(), committed.end(), r.key) != committed.end();
    versions.push_back(now ? it->second.version : 0);
  }
  return versions;
}

// Removes the keys of the groups under `prefixes` that `records` (just
// committed, in the same handler run: no reader sees the new keys next to
// stale ones) did not write. Only keys of the same group (written with the
// state dict P, or the manifest P itself) go: keys put on their own under
// P/ stay.
void replace_groups(controller_pointer self, const std::vector<wire::KeyRecord>& records,
                    const std::vector<std::string>& prefixes, Verdict verdict) {
  if (prefixes.empty()) return;
  std::set<std::string> kept;
  for (const auto& r : records) kept.insert(r.key);
  const auto doomed = group_keys(self->state, prefixes, kept);
  if (!doomed.empty()) remove_keys(self, doomed, verdict);
}

// The keys that go with `key` when it is removed: for a state dict's
// manifest, the keys written with it (its packed buckets and the entries
// stored alone); for a version pointer (an object P with versions P/vN),
// every version with its keys; none otherwise.
std::vector<std::string> written_with(const ControllerState& st, const std::string& key) {
  auto it = st.index.find(key);
  if (it == st.index.end()) return {};
  if (it->second.group == key) return group_keys(st, {key}, {key});
  if (it->second.kind != wire::ObjectKind::object) return {};
  std::vector<std::string> out;
  const std::string v = key + "/v";
  for (auto j = st.index.lower_bound(v);
       j != st.index.end() && j->first.compare(0, v.size(), v) == 0; ++j) {
    const std::string& k = j->first;
    const bool version = k.size() > v.size() && j->second.group == k &&
                         std::all_of(k.begin() + static_cast<std::ptrdiff_t>(v.size()), k.end(),
                                     [](char c) { return c >= '0' && c <= '9'; });
    if (!version) continue;
    out.push_back(k);
    auto members = group_keys(st, {k}, {k});
    out.insert(out.end(), members.begin(), members.end());
  }
  return out;
}

// Drops `keys` from the index; their objects go into `released`.
wire::RemoveReply drop_keys(ControllerState& st, const std::vector<std::string>& keys,
                            std::map<std::string, std::vector<std::uint64_t>>& released) {
  wire::RemoveReply reply;
  for (const auto& k : keys) {
    drop_pending(st, k, released);  // a sharded put in progress goes too
    auto it = st.index.find(k);
    if (it == st.index.end()) {
      if (st.lost.erase(k) == 0) reply.missing.push_back(k);
      continue;
    }
    collect(it->second, released);
    st.written.push_back(k);
    st.index.erase(it);
    ++reply.removed;
  }
  return reply;
}

// Removes `keys`; the volumes free the objects (discard) or keep their
// memory for the next version (release). With `whole`, a state dict's
// manifest among them takes the keys written with it along (nothing could
// read them without it); the reply counts only `keys`.
wire::RemoveReply remove_keys(controller_pointer self, const std::vector<std::string>& keys,
                              Verdict verdict, bool whole) {
  auto& st = self->state;
  st.count(protocol::ControllerCounter::remove);
  std::vector<std::string> members;
  if (whole) {
    for (const auto& k : keys) {
      auto m = written_with(st, k);
      members.insert(members.end(), m.begin(), m.end());
    }
  }
  std::map<std::string, std::vector<std::uint64_t>> released;
  auto reply = drop_keys(st, keys, released);
  drop_keys(st, members, released);  // one named among `keys` too is gone already
  send_to_volumes(self, released, verdict);
  return reply;
}

}  // namespace meshstore::controller
