// The index's copy on a volume: each committed object keeps the record
// the controller committed for it, so that a controller that starts
// against live volumes rebuilds its index from them (the controller's
// controller/rebuild.cpp; docs/failover.md, "The controller's loss").
#include <iterator>
#include <memory>
#include <unordered_set>

#include "meshstore/protocol/controller_actor.hpp"
#include "meshstore/protocol/wire_glue.hpp"
#include "meshstore/volume/state.hpp"

namespace meshstore::volume {

namespace {

// Records per part of the answer to a controller's held_records: the
// controller takes one part while the next is encoded and on its way.
constexpr std::size_t kRecordsPerPart = 16384;

}  // namespace

void commit_objects(volume_pointer self, const std::vector<std::uint64_t>& ids,
                    std::vector<wire::KeyRecord> records) {
  auto& st = self->state;
  for (auto id : ids) {
    auto it = st.objects.find(id);
    if (it == st.objects.end()) continue;
    it->second.committed = true;
    st.small->commit(id, it->second.key);
  }
  for (auto& r : records) {
    if (!r.found()) continue;
    auto kept = std::make_shared<const wire::KeyRecord>(std::move(r));
    for (const auto& shard : kept->shards) {
      if (shard.volume_id != st.config.volume_id) continue;
      // An object dropped since (a release that overtook nothing: the
      // controller's messages arrive in order) has no record to keep.
      auto it = st.objects.find(shard.object_id);
      if (it != st.objects.end() && it->second.committed) it->second.record = kept;
    }
  }
}

caf::result<wire::HeldRecords, std::vector<std::string>> held_records(
    volume_pointer self, const caf::actor& controller) {
  auto& st = self->state;
  // Asked by the controller this volume registers with: its channels'
  // puts commit there from now (after a failover, not at the dead one).
  if (controller) {
    if (st.controllers.insert(controller.address()).second) self->monitor(controller);
    st.small_ops->controller_is(controller.address());
    st.awaiting = st.config.await_controller.count() > 0;
    st.small_ops->await_controller(st.awaiting);
    // Once this answer is on its way: the controller takes these records
    // before the held commits, whose versions then go on above them.
    st.controller_now = controller;
    self->send(self, protocol::commits_wait_atom::value, true);
  }
  std::vector<std::uint64_t> orphans;
  std::unordered_set<const wire::KeyRecord*> seen;  // records of several shards here
  // Shared, not copied: each is encoded straight from the object's record.
  std::vector<std::shared_ptr<const wire::KeyRecord>> out;
  out.reserve(st.objects.size());
  for (const auto& [id, object] : st.objects) {
    if (!object.committed) continue;
    if (!object.record) {
      orphans.push_back(id);
      continue;
    }
    // A record of one shard names one object: it comes once without a look.
    if (object.record->shards.size() == 1 || seen.insert(object.record.get()).second) {
      out.push_back(object.record);
    }
  }
  if (!orphans.empty()) {
    st.drop_all(orphans, false);
    st.log->warn(
        "volume '{}': dropped {} object(s) no committed record names (a sharded "
        "put its controller never finished)",
        st.config.volume_id, orphans.size());
  }
  std::vector<std::string> peers(st.peers.begin(), st.peers.end());
  // To a controller asking: every full part but the last goes ahead as its
  // own message (in order, before the answer), the answer is the last.
  if (controller && out.size() > kRecordsPerPart) {
    const auto to = caf::actor_cast<protocol::controller_actor>(controller);
    const std::size_t ahead = (out.size() - 1) / kRecordsPerPart * kRecordsPerPart;
    for (std::size_t i = 0; i < ahead; i += kRecordsPerPart) {
      wire::HeldRecords part;
      part.kept.assign(std::make_move_iterator(out.begin() + i),
                       std::make_move_iterator(out.begin() + i + kRecordsPerPart));
      self->send(to, protocol::held_records_atom::value, st.config.volume_id, std::move(part),
                 peers);
    }
    out.erase(out.begin(), out.begin() + ahead);
  }
  wire::HeldRecords last;
  last.kept = std::move(out);
  return {std::move(last), std::move(peers)};
}

void update_peers(volume_pointer self, const std::vector<std::string>& joined,
                  const std::vector<std::string>& left) {
  self->state.peers.insert(joined.begin(), joined.end());
  for (const auto& id : left) self->state.peers.erase(id);
}

}  // namespace meshstore::volume
