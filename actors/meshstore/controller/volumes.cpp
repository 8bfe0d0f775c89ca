// What the controller tells volumes and hears of them: verdicts on their
// objects, flushes, pins, eviction, and a volume going down.
#include <algorithm>
#include <chrono>
#include <memory>
#include <set>

#include "meshstore/controller/controller_state.hpp"
#include "meshstore/protocol/wire_glue.hpp"

namespace meshstore::controller {

Status register_volume(controller_pointer self, const wire::VolumeInfo& info,
                       protocol::storage_volume_actor v) {
  auto& st = self->state;
  if (info.volume_id.empty()) return Status(Errc::invalid_argument, "register_volume: empty id");
  if (st.volumes.count(info.volume_id)) {
    return Status(Errc::invalid_argument,
                  "register_volume: volume '" + info.volume_id + "' is already registered");
  }
  self->monitor(v);
  st.volume_by_addr[v.address()] = info.volume_id;
  st.volumes.emplace(info.volume_id, std::move(v));
  st.dead_volumes.erase(info.volume_id);
  st.volume_infos.push_back(info);
  st.log->info("volume '{}' on host '{}' registered", info.volume_id, info.host);
  tell_peers(self, {info.volume_id}, {});
  return Status();
}

void tell_peers(controller_pointer self, const std::vector<std::string>& joined,
                const std::vector<std::string>& left) {
  auto& st = self->state;
  std::vector<std::string> all;
  for (const auto& info : st.volume_infos) all.push_back(info.volume_id);
  for (const auto& [id, v] : st.volumes) {
    // A volume in this process goes with the index: it needs no list.
    if (v.node() == self->node()) continue;
    const bool joining = std::find(joined.begin(), joined.end(), id) != joined.end();
    self->send(v, protocol::peers_atom::value, joining ? all : joined, left);
  }
}

void send_to_volumes(controller_pointer self,
                     const std::map<std::string, std::vector<std::uint64_t>>& by_volume,
                     Verdict verdict) {
  auto& st = self->state;
  for (const auto& [vid, all] : by_volume) {
    auto it = st.volumes.find(vid);
    if (it == st.volumes.end() || all.empty()) continue;
    std::vector<std::uint64_t> ids, retired;
    if (verdict == Verdict::commit || st.pinned.empty()) {
      ids = all;
    } else {
      // A pinned object stays until its pin ends, for the pinned reader;
      // it is retired now, so no reader that located it unpinned (from a
      // cache) reads it once this write is answered.
      for (auto id : all) {
        ControllerState::ObjectRef ref{vid, id};
        if (st.pinned.count(ref) != 0) {
          st.held_back[ref] = verdict == Verdict::discard;
          retired.push_back(id);
        } else {
          ids.push_back(id);
        }
      }
      if (!retired.empty()) {
        self->send(it->second, protocol::retire_atom::value, retired);
        st.flush_due[vid].insert(st.flush_due[vid].end(), retired.begin(), retired.end());
      }
      if (ids.empty()) continue;
    }
    switch (verdict) {
      case Verdict::commit:
        self->send(it->second, protocol::commit_atom::value, ids, std::vector<wire::KeyRecord>{});
        break;
      case Verdict::release:
        self->send(it->second, protocol::release_atom::value, ids);
        st.flush_due[vid].insert(st.flush_due[vid].end(), ids.begin(), ids.end());
        break;
      case Verdict::discard:
        self->send(it->second, protocol::discard_atom::value, ids);
        st.flush_due[vid].insert(st.flush_due[vid].end(), ids.begin(), ids.end());
        break;
    }
  }
}

void send_commits(controller_pointer self, const std::vector<IndexEntry*>& records) {
  auto& st = self->state;
  struct Part {
    const protocol::storage_volume_actor* volume = nullptr;  // null: not registered
    bool keeps = false;  // in another process: it keeps the records
    std::vector<std::uint64_t> ids;
    std::vector<wire::KeyRecord> records;
  };
  std::map<std::string, Part> parts;
  for (const auto* r : records) {
    for (std::size_t i = 0; i < r->shards.size(); ++i) {
      const auto& vid = r->shards[i].volume_id;
      auto [at, fresh] = parts.try_emplace(vid);
      auto& part = at->second;
      if (fresh) {
        auto v = st.volumes.find(vid);
        part.volume = v == st.volumes.end() ? nullptr : &v->second;
        // A volume in this process dies with the index: it needs no copy
        // (and the embedded store's commits pay none).
        part.keeps = part.volume && part.volume->node() != self->node();
      }
      part.ids.push_back(r->shards[i].object_id);
      // The record once per volume, however many of its shards lie there.
      if (part.keeps && std::none_of(r->shards.begin(), r->shards.begin() + i,
                                     [&](const auto& s) { return s.volume_id == vid; })) {
        part.records.push_back(*r);
      }
    }
  }
  for (auto& [vid, part] : parts) {
    if (!part.volume) continue;
    // Answered only once it has them (a flush, which it answers after
    // this message): an acknowledged commit is on every volume it names.
    if (part.keeps) st.flush_due[vid];
    self->send(*part.volume, protocol::commit_atom::value, std::move(part.ids),
               std::move(part.records));
  }
}

namespace {

// Whether write `w` waits for no flush but (maybe) `volume`'s.
bool only_unwaited_left(const ControllerState::FlushWait& w, const std::string& volume) {
  return w.volumes.empty() || (w.volumes.size() == 1 && w.volumes.count(volume) != 0);
}

// Write `token`'s answer goes once only its unwaited volume may be left
// to hear from; it settles once nothing is left to wait for: its keys are
// no longer unsettled, and what waited for it runs.
void settle_if_done(controller_pointer self, std::uint64_t token) {
  auto& st = self->state;
  auto it = st.flushes.find(token);
  if (it == st.flushes.end()) return;
  auto& w = it->second;
  if (w.answer && w.answer_before == 0 && only_unwaited_left(w, w.unwaited)) {
    std::exchange(w.answer, nullptr)();
  }
  if (w.before != 0 || !w.volumes.empty()) return;
  auto wait = std::move(it->second);
  st.flushes.erase(it);
  for (const auto& k : wait.keys) {
    auto u = st.unsettled.find(k);
    if (u != st.unsettled.end() && u->second == token) st.unsettled.erase(u);
  }
  for (auto& then : wait.then) then();
}

// The writes not settled yet of the keys of `records`.
std::set<std::uint64_t> unsettled_writes(const ControllerState& st,
                                         const std::vector<wire::KeyRecord>& records) {
  std::set<std::uint64_t> out;
  if (st.unsettled.empty()) return out;
  for (const auto& r : records) {
    if (auto u = st.unsettled.find(r.key); u != st.unsettled.end()) out.insert(u->second);
  }
  return out;
}

}  // namespace

void after_flush(controller_pointer self,
                 const std::map<std::string, std::vector<std::uint64_t>>& due,
                 std::function<void()> answer, const std::string& unwaited) {
  auto& st = self->state;
  std::set<std::uint64_t> earlier;
  if (!st.unsettled.empty()) {
    for (const auto& k : st.written) {
      if (auto u = st.unsettled.find(k); u != st.unsettled.end()) earlier.insert(u->second);
    }
  }
  if (due.empty() && earlier.empty()) {
    st.written.clear();
    return answer();
  }
  const auto token = st.next_flush++;
  auto& wait = st.flushes[token];
  wait.answer = std::move(answer);
  wait.unwaited = unwaited;
  wait.keys = std::exchange(st.written, {});
  for (const auto& k : wait.keys) st.unsettled[k] = token;
  for (auto e : earlier) {
    auto& before = st.flushes.at(e);
    // Left waiting only for the volume this answer goes through: that
    // volume has handled what `e` told it by the time it relays this.
    const bool through = !unwaited.empty() && before.before == 0 && !before.answer &&
                         only_unwaited_left(before, unwaited);
    ++wait.before;
    if (!through) ++wait.answer_before;
    before.then.push_back([self, token, through] {
      auto it = self->state.flushes.find(token);
      if (it == self->state.flushes.end()) return;
      --it->second.before;
      if (!through) --it->second.answer_before;
      settle_if_done(self, token);
    });
  }
  for (const auto& [vid, ids] : due) {
    wait.volumes.insert(vid);
    self->request(st.volumes.at(vid), kFlushTimeout, protocol::flush_atom::value)
        .then([self, token, vid = vid](caf::ok_atom) { flushed(self, token, vid); },
              [self, token, vid = vid](caf::error&) { flushed(self, token, vid); });
  }
  settle_if_done(self, token);  // the answer may go now (unwaited)
}

bool settling(const ControllerState& st, const std::vector<wire::KeyRecord>& records) {
  return !unsettled_writes(st, records).empty();
}

void after_settled(controller_pointer self, const std::vector<wire::KeyRecord>& records,
                   std::function<void()> then) {
  auto& st = self->state;
  const auto writes = unsettled_writes(st, records);
  if (writes.empty()) return then();
  auto left = std::make_shared<std::size_t>(writes.size());
  auto run = std::make_shared<std::function<void()>>(std::move(then));
  for (auto w : writes) {
    st.flushes.at(w).then.push_back([left, run] {
      if (--*left == 0) (*run)();
    });
  }
}

void flushed(controller_pointer self, std::uint64_t token, const std::string& volume_id) {
  auto it = self->state.flushes.find(token);
  if (it == self->state.flushes.end()) return;
  it->second.volumes.erase(volume_id);
  settle_if_done(self, token);
}

void unpin(controller_pointer self, std::uint64_t id) {
  auto& st = self->state;
  auto p = st.pins.find(id);
  if (p == st.pins.end()) return;  // ended already (unpinned, or expired)
  std::map<std::string, std::vector<std::uint64_t>> released, discarded;
  for (const auto& ref : p->second) {
    auto n = st.pinned.find(ref);
    if (n == st.pinned.end() || --n->second > 0) continue;
    st.pinned.erase(n);
    auto h = st.held_back.find(ref);
    if (h == st.held_back.end()) continue;
    (h->second ? discarded : released)[ref.first].push_back(ref.second);
    st.held_back.erase(h);
  }
  st.pins.erase(p);
  send_to_volumes(self, released, Verdict::release);
  send_to_volumes(self, discarded, Verdict::discard);
}

caf::result<std::vector<std::string>> evict(controller_pointer self, const std::string& volume_id,
                                            std::uint64_t bytes) {
  auto& st = self->state;
  auto volume = st.volumes.find(volume_id);
  if (volume == st.volumes.end()) return std::vector<std::string>{};
  std::vector<std::pair<std::uint64_t, const IndexEntry*>> candidates;
  // A version pointer (the object "P" of publish_state_dict, whose versions
  // are "P/vN") is never evicted: readers and the next publish need it.
  auto is_pointer = [&](const std::string& key, const wire::KeyRecord& r) {
    if (r.kind != wire::ObjectKind::object) return false;
    auto it = st.index.lower_bound(key + "/v");
    return it != st.index.end() && it->first.compare(0, key.size() + 2, key + "/v") == 0;
  };
  for (const auto& [key, r] : st.index) {
    if (!r.group.empty() || r.shards.size() != 1 || is_pointer(key, r)) continue;
    const auto& s = r.shards.front();
    if (s.volume_id != volume_id || st.pinned.count({s.volume_id, s.object_id}) != 0) continue;
    candidates.emplace_back(r.last_used, &r);
  }
  if (candidates.empty()) return std::vector<std::string>{};
  std::sort(candidates.begin(), candidates.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::uint64_t> objects;
  std::vector<std::pair<std::string, std::uint64_t>> offered;  // key, object
  for (const auto& [used, r] : candidates) {
    objects.push_back(r->shards.front().object_id);
    offered.emplace_back(r->key, r->shards.front().object_id);
  }
  auto rp = self->make_response_promise<std::vector<std::string>>();
  self->request(volume->second, std::chrono::seconds(10), protocol::evict_atom::value, objects,
                bytes)
      .then(
          [self, rp, volume_id, bytes, offered](const std::vector<std::uint64_t>& dropped) mutable {
            auto& st = self->state;
            const std::set<std::uint64_t> gone(dropped.begin(), dropped.end());
            std::vector<std::string> doomed;
            std::uint64_t freed = 0;
            for (const auto& [key, object] : offered) {
              if (gone.count(object) == 0) continue;
              // Still the key's value (not replaced while the volume chose).
              auto it = st.index.find(key);
              if (it == st.index.end() || it->second.shards.size() != 1 ||
                  it->second.shards.front().volume_id != volume_id ||
                  it->second.shards.front().object_id != object) {
                continue;
              }
              freed += it->second.nbytes();
              doomed.push_back(key);
            }
            if (!doomed.empty()) {
              st.log->info("evicted {} key(s), {} bytes, from volume '{}' for {} bytes asked",
                           doomed.size(), freed, volume_id, bytes);
              remove_keys(self, doomed, Verdict::discard);
            }
            rp.deliver(std::move(doomed));
          },
          [rp](caf::error&) mutable { rp.deliver(std::vector<std::string>{}); });
  return rp;
}

void volume_down(controller_pointer self, const caf::down_msg& msg) {
  auto& st = self->state;
  auto it = st.volume_by_addr.find(msg.source);
  if (it == st.volume_by_addr.end()) return;
  const std::string id = it->second;
  st.volume_by_addr.erase(it);
  st.volumes.erase(id);
  st.dead_volumes.insert(id);
  st.rebuild.reporting.erase(id);  // its last part will not come
  st.rebuild.late_keys.erase(id);
  st.volume_infos.erase(
      std::remove_if(st.volume_infos.begin(), st.volume_infos.end(),
                     [&](const wire::VolumeInfo& v) { return v.volume_id == id; }),
      st.volume_infos.end());
  copies_lost_volume(self, id);  // copies from it or onto it end now
  std::map<std::string, std::vector<std::uint64_t>> released;
  std::size_t lost = 0;
  std::vector<IndexEntry*> kept;  // keys with copies on other volumes
  for (auto k = st.index.begin(); k != st.index.end();) {
    const bool on_dead = std::any_of(k->second.shards.begin(), k->second.shards.end(),
                                     [&](const wire::ShardRecord& s) { return s.volume_id == id; });
    if (!on_dead || keep_copies(st, k->second, id)) {
      if (on_dead) kept.push_back(&k->second);
      ++k;
      continue;
    }
    collect(k->second, released);  // shards on surviving volumes are freed
    st.lost[k->first] = id;
    k = st.index.erase(k);
    ++lost;
  }
  // A sharded put in progress with a shard there cannot complete (nor can
  // the rest of its state dict).
  std::vector<std::string> doomed;
  for (const auto& [key, p] : st.pending) {
    if (std::any_of(p.shards.begin(), p.shards.end(),
                    [&](const wire::ShardRecord& s) { return s.volume_id == id; })) {
      doomed.push_back(key);
    }
  }
  for (const auto& key : doomed) drop_pending(st, key, released);
  // Its objects need no release any more; pins on them end with the pin.
  for (auto h = st.held_back.begin(); h != st.held_back.end();) {
    h = h->first.first == id ? st.held_back.erase(h) : std::next(h);
  }
  send_to_volumes(self, released, Verdict::discard);
  // Writes waiting for its flush wait no more: its objects are unreadable.
  std::vector<std::uint64_t> waiting;
  for (const auto& [token, wait] : st.flushes) {
    if (wait.volumes.count(id) != 0) waiting.push_back(token);
  }
  for (auto token : waiting) flushed(self, token, id);
  // A volume stopped in order (its store closing) with nothing on it is
  // news, not trouble.
  const bool orderly =
      msg.reason == caf::exit_reason::user_shutdown || msg.reason == caf::exit_reason::normal;
  st.log->log(lost == 0 && orderly ? spdlog::level::info : spdlog::level::warn,
              "volume '{}' went down ({}); {} key(s) it held are lost, {} kept by their copies", id,
              caf::to_string(msg.reason), lost, kept.size());
  // The volumes keeping the others hear the records without it (a rebuild
  // waits for no dead copy), and the copies it took are made again.
  send_commits(self, kept);
  st.begin_write();
  repair_next(self);
  for (const auto& [addr, client] : st.volume_watchers) {
    caf::anon_send(client, protocol::volume_gone_atom::value, id, caf::to_string(msg.reason));
  }
  tell_peers(self, {}, {id});
}

}  // namespace meshstore::controller
