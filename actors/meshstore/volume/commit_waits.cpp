// Commits through a failover. When the store's controller dies, a volume
// in another process (VolumeConfig::await_controller > 0) does not fail
// its channels' commits: it holds them until its store has reconnected to
// the restarted server and registered it with the new controller
// (held_records), then sends them there, or fails them once the wait is
// over. A commit the dead controller never answered is held too; it is
// done once: if the old controller committed it, its commit message
// reached this volume first (the controller's messages arrive in order,
// and the answer comes after it), so its objects here are committed with
// their records and the volume answers from them (committed_already);
// otherwise no volume names its objects and the new controller commits
// it. The objects are the commit's idempotent identity. docs/failover.md,
// "The controller's loss".
#include <algorithm>

#include "meshstore/internal/deadlines.hpp"
#include "meshstore/volume/state.hpp"

namespace meshstore::volume {

namespace {

using Placed = protocol::fast_get::CommitDone::Placed;

// A commits_wait message comes at the first deadline of what is held.
void arm_timer(volume_pointer self) {
  auto& st = self->state;
  if (st.wait_timer || st.held_commits.empty()) return;
  st.wait_timer = true;
  self->delayed_send(self, internal::until_first(st.held_commits),
                     protocol::commits_wait_atom::value, false);
}

// A held job is sent again as it stands: what it gave back is gone, and
// its inline bytes are staged (`placed`), its records naming them. It
// waits until VolumeConfig::await_controller after the controller went
// down (not after it came: no commit waits longer past the death).
HeldCommit held(VolumeState& st, protocol::FastCommitJob job, std::vector<Placed> placed) {
  job.request.release.clear();
  job.request.inlined.clear();
  if (st.controller_down_at == std::chrono::steady_clock::time_point()) {
    st.controller_down_at = std::chrono::steady_clock::now();
  }
  return HeldCommit{
      std::move(job), std::move(placed), {}, st.controller_down_at + st.config.await_controller};
}

}  // namespace

bool hold_commit(volume_pointer self, protocol::FastCommitJob& job, std::vector<Placed> placed) {
  auto& st = self->state;
  const auto wait = st.config.await_controller;
  if (!st.awaiting || wait.count() <= 0) return false;
  if (st.held_commits.empty()) {
    st.log->info("volume '{}': the controller is gone; commits wait for a new one (at most {} ms)",
                 st.config.volume_id, wait.count());
  }
  st.held_commits.push_back(held(st, std::move(job), std::move(placed)));
  arm_timer(self);
  return true;
}

std::uint64_t track_sent(volume_pointer self, const protocol::FastCommitJob& job,
                         const std::vector<Placed>& placed, const caf::actor_addr& controller) {
  auto& st = self->state;
  if (st.config.await_controller.count() <= 0) return 0;
  const auto token = st.next_sent++;
  HeldCommit sent{job, placed, controller, {}};
  sent.job.inlined.clear();  // staged: `placed` names them, the records too
  st.commits_sent.emplace(token, std::move(sent));
  return token;
}

bool sent_answered(volume_pointer self, std::uint64_t token) {
  return token == 0 || self->state.commits_sent.erase(token) != 0;
}

void controller_lost(volume_pointer self, const caf::actor_addr& controller, bool hold) {
  auto& st = self->state;
  if (st.config.await_controller.count() <= 0) return;
  st.awaiting = hold;
  st.controller_down_at = std::chrono::steady_clock::now();
  std::size_t n = 0;
  for (auto it = st.commits_sent.begin(); it != st.commits_sent.end();) {
    if (it->second.controller != controller) {
      ++it;
      continue;
    }
    if (!hold) {  // answered already, by the small-op service's refusal
      it = st.commits_sent.erase(it);
      continue;
    }
    st.held_commits.push_back(held(st, std::move(it->second.job), std::move(it->second.placed)));
    it = st.commits_sent.erase(it);
    ++n;
  }
  if (n != 0) {
    st.log->info("volume '{}': {} commit(s) the dead controller never answered wait for a new one",
                 st.config.volume_id, n);
  }
  arm_timer(self);
}

void resume_held(volume_pointer self) {
  auto& st = self->state;
  st.controller_down_at = {};
  if (st.held_commits.empty() || !st.controller_now) return;
  auto held = std::exchange(st.held_commits, {});
  st.log->info("volume '{}': {} commit(s) go to the new controller", st.config.volume_id,
               held.size());
  for (auto& h : held) {
    // A part of a sharded put may need other ranks' parts, which waited
    // at the dead controller and died with it: sent alone, it would
    // complete a later put's key with this one's shard. Only one the dead
    // controller committed is answered.
    if (h.job.request.sharded && !committed_already(st, h.job)) {
      (*h.job.done)(Status(Errc::unavailable,
                           "volume '" + st.config.volume_id +
                               "': the store's controller went down during this sharded put, "
                               "and the other ranks' shards it held were lost with it; put it "
                               "again from every rank"));
      continue;
    }
    h.job.controller = st.controller_now.address();
    fast_commit(self, std::move(h.job), std::move(h.placed));
  }
}

void expire_held(volume_pointer self) {
  auto& st = self->state;
  st.wait_timer = false;
  for (auto& h : internal::take_due(st.held_commits, std::chrono::steady_clock::now())) {
    // Its objects stay staged with their client, as after any refusal.
    (*h.job.done)(
        Status(Errc::unavailable, "volume '" + st.config.volume_id +
                                      "': the store's controller went down and a failover is in "
                                      "progress; no new controller within " +
                                      std::to_string(st.config.await_controller.count()) + " ms"));
  }
  arm_timer(self);
}

}  // namespace meshstore::volume
