// The controller actor: the store's index (key -> version, shape, shards and
// their volumes). It commits puts, locates keys, removes them, follows the
// volumes' lives and runs the streams readers follow. Never touches payload
// bytes. Its state is in controller/controller_state.hpp; commits and
// removals are controller/commits.cpp, sharded puts are checked in
// controller/sharded_puts.cpp, what it tells volumes and hears
// of them is in controller/volumes.cpp, streams in controller/streams.cpp.
#include "meshstore/controller/controller.hpp"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "meshstore/controller/controller_state.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/protocol/controller_actor.hpp"
#include "meshstore/protocol/wire_glue.hpp"

namespace meshstore::controller {

void collect(const wire::KeyRecord& r, std::map<std::string, std::vector<std::uint64_t>>& out) {
  for (const auto& s : r.shards) out[s.volume_id].push_back(s.object_id);
}

Status unknown_volume(const ControllerState& st, const std::string& ctx, const std::string& id) {
  if (st.dead_volumes.count(id) != 0) {
    return Status(Errc::unavailable,
                  ctx + ": volume '" + id + "' went down before the commit; put it again");
  }
  return Status(Errc::not_found, ctx + ": unknown volume '" + id + "'");
}

namespace {

using internal::to_caf_error;

// The flushes the write being handled waits for, and the volume among
// them its writer's answer need not wait for: `sender`, the volume that
// sent it (its fast_commit), hears of what the write released or
// discarded there before it hears the answer, and answers its client only
// then. Readers still wait for that flush too (after_flush): another
// reader told of the write could otherwise be followed by one reading
// the old object there from its cache.
struct Flushes {
  std::map<std::string, std::vector<std::uint64_t>> due;
  std::string unwaited;
};
Flushes flushes_needed(ControllerState& st, const std::string& sender) {
  Flushes f{std::exchange(st.flush_due, {}), {}};
  if (!sender.empty() && f.due.count(sender) != 0) f.unwaited = sender;
  return f;
}

// The id of the volume that sent the message being handled ("" for none).
std::string sending_volume(controller_pointer self) {
  const auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
  auto s = self->state.volume_by_addr.find(sender);
  return s == self->state.volume_by_addr.end() ? std::string() : s->second;
}

// Answers the write being handled with `value` once it is settled
// (after_flush, flushes_needed).
template <class T>
caf::result<T> answer_after_flush(controller_pointer self, T value) {
  auto f = flushes_needed(self->state, sending_volume(self));
  if (f.due.empty() && self->state.unsettled.empty()) {
    self->state.written.clear();
    return value;
  }
  auto rp = self->make_response_promise<T>();
  after_flush(
      self, f.due, [rp, value = std::move(value)]() mutable { rp.deliver(std::move(value)); },
      f.unwaited);
  return rp;
}

// `values` (what a read answers, about the keys of `seen`) once every
// write of those keys is settled: no reader hears of a write before the
// volumes it told handled it (docs/internals/actors.md, "Readers wait for
// the same flushes").
// (Called when settling(seen): the fast path answers at once.)
template <class... Ts>
caf::result<Ts...> answer_settled(controller_pointer self, const std::vector<wire::KeyRecord>& seen,
                                  Ts... values) {
  auto rp = self->make_response_promise<Ts...>();
  auto held = std::make_shared<std::tuple<Ts...>>(std::move(values)...);
  after_settled(self, seen, [rp, held]() mutable {
    std::apply([&rp](auto&... v) { rp.deliver(std::move(v)...); }, *held);
  });
  return rp;
}

// The records of `keys`: a missing key comes back with version 0, naming
// why when it is known (its volume died, or it is partially committed).
// A key found counts as used (eviction's recency).
std::vector<wire::KeyRecord> locate(ControllerState& st, const std::vector<std::string>& keys) {
  std::vector<wire::KeyRecord> out;
  out.reserve(keys.size());
  for (const auto& k : keys) {
    auto it = st.index.find(k);
    if (it != st.index.end()) {
      st.touch(it->second);
      out.push_back(it->second);
      continue;
    }
    wire::KeyRecord missing;
    missing.key = k;
    if (auto l = st.lost.find(k); l != st.lost.end()) {
      missing.lost_on = l->second;
    } else if (!st.rebuild.given_up.empty()) {
      missing.maybe_lost_on = *st.rebuild.given_up.begin();
    }
    if (auto p = st.pending.find(k); p != st.pending.end()) {
      missing = p->second;  // partial: its shards so far, version 0
      missing.version = 0;
    }
    // A key of a sharded state dict being put (the manifest's key too,
    // before rank 0 put it).
    const std::string& group = missing.group.empty() ? k : missing.group;
    if (st.groups.count(group) != 0) missing.pending = group_progress(st, group, k);
    out.push_back(std::move(missing));
  }
  return out;
}

// Commits `job` (LocalCommit) and answers it once every other volume
// flushed; the sender retires what it superseded itself, before the
// answer. A commit that fails after copies were made for it discards them.
void finish_local_commit(controller_pointer self, protocol::LocalCommit& job, bool copies_made) {
  auto& st = self->state;
  st.begin_write();
  if (!job.sharded) st.count(protocol::ControllerCounter::notify_put_batch);
  auto versions = job.sharded ? put_shards(self, job.records, job.group, job.members, job.layout)
                              : commit_batch(self, job.records);
  if (!versions.ok()) {
    if (copies_made) discard_copies(self, job.records);
    return job.done(versions.status());
  }
  if (!job.sharded) replace_groups(self, job.records, job.prefixes);
  // The volume that sent it hears of the release only after this
  // answer: what the commit superseded there is retired first.
  auto due = std::exchange(st.flush_due, {});
  auto own = due.find(job.volume_id);
  if (own != due.end() && job.retire(own->second)) due.erase(own);
  after_flush(self, due, [done = std::move(job.done), v = std::move(versions).value()]() mutable {
    done(std::move(v));
  });
}

// A commit from a volume in this actor system (LocalCommit), after the
// copies its keys want (wants_copies).
caf::result<void> local_commit(controller_pointer self, protocol::LocalCommit& job) {
  if (self->state.rebuild.active) return caf::skip;  // waits for the index
  if (!job.sharded) {
    if (auto again = resent(self->state, job.records)) {
      job.done(std::move(*again));
      return {};
    }
  }
  if (job.sharded || !wants_copies(self->state, job.records)) {
    finish_local_commit(self, job, false);
    return {};
  }
  auto held = std::make_shared<protocol::LocalCommit>(std::move(job));
  make_copies(self, held->records, [self, held](Result<std::vector<wire::KeyRecord>> copied) {
    if (!copied.ok()) return held->done(copied.status());
    held->records = std::move(copied).value();
    finish_local_commit(self, *held, true);
  });
  return {};
}

// `prefix`'s latest pointer; with `with_version`, then the manifest P/vN
// it points to and the keys written with it.
caf::result<std::vector<wire::KeyRecord>> locate_latest(controller_pointer self,
                                                        const std::string& prefix,
                                                        bool with_version) {
  auto& st = self->state;
  if (st.rebuild.active && st.index.count(prefix) == 0) return caf::skip;
  st.count(protocol::ControllerCounter::locate);
  auto out = locate(st, {prefix});
  const std::uint64_t n = out.front().found() ? out.front().points_to : 0;
  if (with_version && n != 0) {
    auto version = locate(st, group_keys(st, {prefix + "/v" + std::to_string(n)}, {}));
    out.insert(out.end(), std::make_move_iterator(version.begin()),
               std::make_move_iterator(version.end()));
  }
  if (settling(st, out)) return answer_settled(self, out, out);
  return out;
}

// `keys`' locations, their objects pinned for `ttl_ms` (kept past a
// release until then): the pin's id (0: nothing found, nothing pinned).
caf::result<std::uint64_t, std::vector<wire::KeyRecord>> locate_pinned(
    controller_pointer self, const std::vector<std::string>& keys, std::uint64_t ttl_ms) {
  auto& st = self->state;
  if (st.rebuild.active) return caf::skip;
  st.count(protocol::ControllerCounter::locate);
  st.count(protocol::ControllerCounter::pinned_locate);
  auto out = locate(st, keys);
  std::vector<ControllerState::ObjectRef> refs;
  for (const auto& r : out) {
    if (!r.found()) continue;
    for (const auto& shard : r.shards) refs.emplace_back(shard.volume_id, shard.object_id);
  }
  std::uint64_t id = 0;
  if (!refs.empty()) {
    id = st.next_pin++;
    for (const auto& ref : refs) ++st.pinned[ref];
    st.pins.emplace(id, std::move(refs));
    self->delayed_send(self, std::chrono::milliseconds(ttl_ms), protocol::unpin_atom::value, id);
  }
  if (settling(st, out)) return answer_settled(self, out, id, out);
  return {id, std::move(out)};
}

// Records naming `keys` only: what settling and answer_settled look at.
std::vector<wire::KeyRecord> naming(const std::vector<std::string>& keys) {
  std::vector<wire::KeyRecord> out(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) out[i].key = keys[i];
  return out;
}

// The keys under `prefix` (key_matches_prefix), in order; once the writes
// of keys under it (a removed one too) are settled.
caf::result<std::vector<std::string>> keys_under(controller_pointer self,
                                                 const std::string& prefix) {
  auto& st = self->state;
  if (st.rebuild.active) return caf::skip;
  st.count(protocol::ControllerCounter::keys);
  std::vector<std::string> out;
  for (auto it = st.index.lower_bound(prefix); it != st.index.end(); ++it) {
    if (it->first.compare(0, prefix.size(), prefix) != 0) break;
    if (key_matches_prefix(it->first, prefix)) out.push_back(it->first);
  }
  std::vector<std::string> written;
  for (const auto& [key, token] : st.unsettled) {
    if (key_matches_prefix(key, prefix)) written.push_back(key);
  }
  if (!written.empty()) return answer_settled(self, naming(written), out);
  return out;
}

// Removes `key`, a pending sharded put of it, or the record of its loss; a
// state dict's manifest takes its buckets and entries along.
caf::result<caf::ok_atom> remove_key(controller_pointer self, const std::string& key) {
  auto& st = self->state;
  if (st.rebuild.active) return caf::skip;
  st.count(protocol::ControllerCounter::remove);
  st.begin_write();
  std::map<std::string, std::vector<std::uint64_t>> doomed;
  if (drop_pending(st, key, doomed)) {
    send_to_volumes(self, doomed, Verdict::discard);
    if (st.index.count(key) == 0) return answer_after_flush(self, caf::ok_atom::value);
  }
  auto it = st.index.find(key);
  if (it == st.index.end()) {
    // Removing a key lost with its volume acknowledges the loss.
    if (st.lost.erase(key) != 0) return caf::ok_atom::value;
    auto absent = to_caf_error(Status(Errc::not_found, "no such key"));
    // Told only once a removal of it under way is settled (as a locate).
    const auto seen = naming({key});
    if (!settling(st, seen)) return absent;
    auto rp = self->make_response_promise<caf::ok_atom>();
    after_settled(self, seen, [rp, absent]() mutable { rp.deliver(absent); });
    return rp;
  }
  const auto members = written_with(st, key);
  std::map<std::string, std::vector<std::uint64_t>> released;
  collect(it->second, released);
  st.written.push_back(key);
  st.index.erase(it);
  drop_keys(st, members, released);
  send_to_volumes(self, released, Verdict::discard);
  return answer_after_flush(self, caf::ok_atom::value);
}

// Removes `keys`, a state dict's manifest with the keys written with it.
caf::result<wire::RemoveReply> remove_batch(controller_pointer self,
                                            const std::vector<std::string>& keys) {
  if (self->state.rebuild.active) return caf::skip;
  auto& st = self->state;
  st.begin_write();
  auto reply = remove_keys(self, keys, Verdict::discard, true);
  // A key said missing is told so only once a write of it under way is
  // settled: its answer waits for them as for the keys it removed.
  for (const auto& k : reply.missing) {
    if (st.unsettled.count(k) != 0) st.written.push_back(k);
  }
  return answer_after_flush(self, std::move(reply));
}

// Volume `id`'s description and handle.
caf::result<wire::VolumeInfo, protocol::storage_volume_actor> volume_of(const ControllerState& st,
                                                                        const std::string& id) {
  auto it = st.volumes.find(id);
  if (it == st.volumes.end())
    return to_caf_error(Status(Errc::not_found, "no volume '" + id + "'"));
  if (const auto* info = st.info_of(id)) return {*info, it->second};
  return to_caf_error(Status(Errc::internal, "volume '" + id + "' has no info"));
}

// Runs `commit` (commit_batch, put_shards) and answers what `answer`
// makes of the versions it returns, once the volumes flushed.
template <class Commit, class Answer>
auto commit_and_answer(controller_pointer self, Commit commit, Answer answer)
    -> caf::result<decltype(answer(std::vector<std::uint64_t>{}))> {
  if (self->state.rebuild.active) return caf::skip;
  self->state.begin_write();
  auto versions = commit();
  if (!versions.ok()) return to_caf_error(versions.status());
  return answer_after_flush(self, answer(std::move(versions).value()));
}

// A write whose keys want copies (wants_copies): the copies are made
// first, then `commit` runs on the records naming them, and the answer,
// what `answer` makes of its versions, goes once the write is settled
// (flushes_needed, after_flush). A commit that
// fails then discards the copies.
template <class T, class Commit, class Answer>
caf::result<T> commit_after_copies(controller_pointer self, std::vector<wire::KeyRecord> records,
                                   Commit commit, Answer answer) {
  auto rp = self->make_response_promise<T>();
  const auto sender = sending_volume(self);
  make_copies(
      self, std::move(records),
      [self, rp, commit, answer, sender](Result<std::vector<wire::KeyRecord>> copied) mutable {
        if (!copied.ok()) return (void)rp.deliver(to_caf_error(copied.status()));
        auto& st = self->state;
        st.begin_write();
        auto versions = commit(*copied);
        if (!versions.ok()) {
          discard_copies(self, *copied);
          return (void)rp.deliver(to_caf_error(versions.status()));
        }
        auto f = flushes_needed(st, sender);
        after_flush(
            self, f.due,
            [rp, v = answer(std::move(versions).value())]() mutable { rp.deliver(std::move(v)); },
            f.unwaited);
      });
  return rp;
}

// Commits whole-key `records` with `commit` and answers what `answer`
// makes of their versions: a commit sent again (resent) at once, one whose
// keys want copies once they are made (commit_after_copies), any other
// once the volumes flushed (commit_and_answer).
template <class T, class Commit, class Answer>
caf::result<T> commit_whole(controller_pointer self, const std::vector<wire::KeyRecord>& records,
                            Commit commit, Answer answer) {
  if (self->state.rebuild.active) return caf::skip;
  if (auto again = resent(self->state, records)) {
    if (!again->ok()) return to_caf_error(again->status());
    return answer(std::move(*again).value());
  }
  if (wants_copies(self->state, records)) {
    return commit_after_copies<T>(self, records, commit, answer);
  }
  return commit_and_answer(
      self, [&] { return commit(records); }, answer);
}

// Commits one key (after its copies), answering its version.
caf::result<std::uint64_t> notify_put(controller_pointer self, const wire::KeyRecord& r) {
  auto commit = [self](const std::vector<wire::KeyRecord>& rs) {
    self->state.count(protocol::ControllerCounter::notify_put);
    return commit_batch(self, rs);
  };
  auto first = [](std::vector<std::uint64_t> v) { return v.front(); };
  return commit_whole<std::uint64_t>(self, std::vector<wire::KeyRecord>{r}, commit, first);
}

// Commits a batch of keys as a whole (after their copies).
caf::result<std::vector<std::uint64_t>> notify_put_batch(
    controller_pointer self, const std::vector<wire::KeyRecord>& records) {
  auto commit = [self](const std::vector<wire::KeyRecord>& rs) {
    self->state.count(protocol::ControllerCounter::notify_put_batch);
    return commit_batch(self, rs);
  };
  auto all = [](std::vector<std::uint64_t> v) { return v; };
  return commit_whole<std::vector<std::uint64_t>>(self, records, commit, all);
}

// Commits `records` and replaces the groups of `prefixes` with them; what
// they supersede is released for reuse (`reuse`) or discarded.
caf::result<std::vector<std::uint64_t>> replace(controller_pointer self,
                                                const std::vector<wire::KeyRecord>& records,
                                                const std::vector<std::string>& prefixes,
                                                bool reuse) {
  // Sent again (resent), its groups were replaced with it, once.
  auto commit = [self, prefixes, reuse](
                    const std::vector<wire::KeyRecord>& rs) -> Result<std::vector<std::uint64_t>> {
    std::vector<std::uint64_t> versions;
    if (!rs.empty()) {
      self->state.count(protocol::ControllerCounter::notify_put_batch);
      auto committed = commit_batch(self, rs);
      if (!committed.ok()) return committed.status();
      versions = std::move(committed).value();
    }
    replace_groups(self, rs, prefixes, reuse ? Verdict::release : Verdict::discard);
    return versions;
  };
  auto all = [](std::vector<std::uint64_t> v) { return v; };
  return commit_whole<std::vector<std::uint64_t>>(self, records, commit, all);
}

// Each of `keys`' version, 0 for a key not held.
// (While the index is rebuilt, a key not back yet waits: skipped.)
// A write of them not settled yet is answered once it is (answer_settled).
caf::result<std::vector<std::uint64_t>> versions_of(controller_pointer self,
                                                    const std::vector<std::string>& keys) {
  auto& st = self->state;
  std::vector<std::uint64_t> out;
  for (const auto& k : keys) {
    auto it = st.index.find(k);
    out.push_back(it == st.index.end() ? 0 : it->second.version);
    if (out.back() == 0 && st.rebuild.active) return caf::skip;
  }
  st.count(protocol::ControllerCounter::exists);
  if (st.unsettled.empty()) return out;
  const auto seen = naming(keys);
  if (settling(st, seen)) return answer_settled(self, seen, out);
  return out;
}

// The sender (a client) hears of every volume that goes down from now.
void watch_volumes(controller_pointer self) {
  auto client = caf::actor_cast<caf::actor>(self->current_sender());
  if (!client) return;
  auto& watchers = self->state.volume_watchers;
  if (watchers.emplace(client.address(), client).second) self->monitor(client);
}

// While the index is rebuilt, a locate that misses a key waits (skipped:
// CAF runs it again after the next message) rather than answering "no
// such key": the key may be on its way back.
// A located write not settled yet is answered once it is (answer_settled).
caf::result<std::vector<wire::KeyRecord>> locate_or_wait(controller_pointer self,
                                                         const std::vector<std::string>& keys) {
  auto& st = self->state;
  if (st.rebuild.active && std::any_of(keys.begin(), keys.end(),
                                       [&](const auto& k) { return st.index.count(k) == 0; })) {
    return caf::skip;
  }
  st.count(protocol::ControllerCounter::locate);
  auto out = locate(st, keys);
  if (settling(st, out)) return answer_settled(self, out, out);
  return out;
}

// An actor the controller monitors went down. One actor may be a stream
// writer and a watcher (a client) at once.
void on_down(controller_pointer self, caf::down_msg& msg) {
  self->state.volume_watchers.erase(msg.source);
  if (!writer_down(self, msg)) volume_down(self, msg);
}

protocol::controller_actor::behavior_type controller_impl(controller_pointer self,
                                                          ControllerOptions options) {
  self->state.rebuild_grace = options.rebuild_grace;
  self->state.copies.wanted = options.replicas;
  self->state.copies.repair_share = options.repair_share;
  self->set_down_handler([=](caf::down_msg& msg) { on_down(self, msg); });
  if (options.took_over) await_old_volumes(self);
  return {
      [=](protocol::watch_volumes_atom) { watch_volumes(self); },
      [=](protocol::register_volume_atom, const wire::VolumeInfo& info,
          protocol::storage_volume_actor v) { return join_volume(self, info, std::move(v)); },
      [=](protocol::held_records_atom, const std::string& id, wire::HeldRecords& records,
          const std::vector<std::string>& peers) { take_part(self, id, records, peers); },
      [=](protocol::rebuild_end_atom, std::uint64_t epoch) { end_rebuild(self, epoch); },
      [=](protocol::repair_atom) { repair_due(self); },
      [=](protocol::expect_volumes_atom, const std::vector<std::string>& ids) {
        expect_volumes(self, ids);
      },
      [=](protocol::volume_atom, const std::string& id) { return volume_of(self->state, id); },
      [=](protocol::volumes_atom) { return self->state.volume_infos; },
      [=](protocol::notify_put_atom, const wire::KeyRecord& r) { return notify_put(self, r); },
      [=](protocol::notify_put_batch_atom, const std::vector<wire::KeyRecord>& records) {
        return notify_put_batch(self, records);
      },
      [=](protocol::local_commit_atom, protocol::LocalCommit& job) {
        return local_commit(self, job);
      },
      [=](protocol::locate_atom, const std::vector<std::string>& keys) {
        return locate_or_wait(self, keys);
      },
      [=](protocol::locate_latest_atom, const std::string& prefix, bool with_version) {
        return locate_latest(self, prefix, with_version);
      },
      [=](protocol::evict_atom, const std::string& volume_id, std::uint64_t bytes) {
        return evict(self, volume_id, bytes);
      },
      [=](protocol::locate_pinned_atom, const std::vector<std::string>& keys,
          std::uint64_t ttl_ms) { return locate_pinned(self, keys, ttl_ms); },
      [=](protocol::unpin_atom, std::uint64_t id) { unpin(self, id); },
      [=](protocol::keys_atom, const std::string& prefix) { return keys_under(self, prefix); },
      [=](protocol::exists_atom, const std::vector<std::string>& keys) {
        return versions_of(self, keys);
      },
      [=](protocol::remove_atom, const std::string& key) { return remove_key(self, key); },
      [=](protocol::remove_batch_atom, const std::vector<std::string>& keys) {
        return remove_batch(self, keys);
      },
      [=](protocol::counters_atom) { return self->state.counters; },
      [=](protocol::put_shards_atom, const std::vector<wire::KeyRecord>& records,
          const std::string& group, const std::vector<std::string>& members, std::uint64_t layout) {
        return commit_and_answer(
            self, [&] { return put_shards(self, records, group, members, layout); },
            [](auto v) { return v; });
      },
      [=](protocol::stream_open_atom, const std::string& key, std::string& manifest,
          std::vector<wire::KeyRecord>& records, std::vector<std::uint64_t>& filled) {
        open_stream(self, key, std::move(manifest), std::move(records), std::move(filled));
        return caf::ok_atom::value;
      },
      [=](protocol::stream_progress_atom, const std::string& key,
          const std::vector<std::uint64_t>& filled) { stream_progress(self, key, filled); },
      [=](protocol::stream_abort_atom, const std::string& key, const std::string& why) {
        abort_stream(self, key, why);
      },
      [=](protocol::stream_subscribe_atom, const std::string& key, std::uint64_t wait_ms) {
        return subscribe(self, key, wait_ms);
      },
      [=](protocol::stream_expire_atom, const std::string& key, std::uint64_t id) {
        expire_waiter(self, key, id);
      },
      [=](protocol::replace_atom, const std::vector<wire::KeyRecord>& records,
          const std::vector<std::string>& prefixes,
          bool reuse) -> caf::result<std::vector<std::uint64_t>> {
        return replace(self, records, prefixes, reuse);
      },
  };
}

}  // namespace

bool key_matches_prefix(const std::string& key, const std::string& prefix) noexcept {
  if (prefix.empty()) return true;
  if (key.size() < prefix.size() || key.compare(0, prefix.size(), prefix) != 0) return false;
  if (key.size() == prefix.size()) return true;
  const char last = prefix.back();
  if (last == '/' || last == '.') return true;
  const char next = key[prefix.size()];
  return next == '/' || next == '.';
}

protocol::controller_actor spawn_controller(caf::actor_system& sys, ControllerOptions options) {
  return sys.spawn(controller_impl, options);
}

}  // namespace meshstore::controller
