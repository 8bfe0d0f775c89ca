// A controller that starts against live volumes rebuilds its index from the
// records they keep (docs/reliability.md, "The controller's loss"). The
// volumes and the controller run in two actor systems connected over
// loopback, as two processes would be: the controller's "process" is
// stopped whole and a new one started.
#include <chrono>
#include <map>
#include <thread>

#include "meshstore/controller/controller.hpp"
#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/connect.hpp"
#include "meshstore/protocol/actor_types.hpp"
#include "meshstore/protocol/controller_actor.hpp"
#include "meshstore/protocol/storage_volume_actor.hpp"
#include "meshstore/protocol/wire_glue.hpp"
#include "meshstore/volume/volume.hpp"
#include "testing/ask.hpp"
#include "testing/test_util.hpp"

namespace meshstore::controller {
namespace {

using namespace std::chrono_literals;
using testing::ask;
using Versions = std::vector<std::uint64_t>;
using Records = std::vector<wire::KeyRecord>;

std::unique_ptr<internal::ActorRuntime> networked_runtime() {
  internal::RuntimeOptions ro;
  ro.add_types = protocol::add_actor_types;
  ro.with_middleman = true;
  ro.scheduler_threads = 2;
  return internal::ActorRuntime::create(ro).value();
}

std::string vid(int i) { return "volume-" + std::to_string(i); }

class RebuildTest : public ::testing::Test {
 protected:
  void SetUp() override {
    volumes_rt_ = networked_runtime();
    for (int i = 0; i < 2; ++i) {
      volume::VolumeConfig vc;
      vc.volume_id = vid(i);
      vc.capacity_bytes = 1 << 20;
      volumes_.push_back(volume::spawn_storage_volume(volumes_rt_->system(), vc).value());
    }
    self_ = std::make_unique<caf::scoped_actor>(volumes_rt_->system());
  }
  void TearDown() override {
    stop_controller();
    for (auto& v : volumes_) caf::anon_send_exit(v, caf::exit_reason::user_shutdown);
    volumes_.clear();
    self_.reset();
    volumes_rt_.reset();
  }

  // A controller in a system of its own, reached from the volumes' system
  // over loopback.
  void start_controller(std::chrono::milliseconds grace = 2000ms) {
    controller_rt_ = networked_runtime();
    ControllerOptions options;
    options.rebuild_grace = grace;
    own_controller_ = spawn_controller(controller_rt_->system(), options);
    auto port =
        internal::publish_actor(controller_rt_->system(), own_controller_, 0, "127.0.0.1", true);
    ASSERT_OK(port);
    auto remote = internal::connect_with_retry<protocol::controller_actor>(
        volumes_rt_->system(), "127.0.0.1", *port, 10s, "controller");
    ASSERT_OK(remote);
    controller_ = *remote;
  }
  // The controller's system goes whole, as its process would.
  void stop_controller() {
    if (own_controller_) caf::anon_send_exit(own_controller_, caf::exit_reason::kill);
    own_controller_ = nullptr;
    controller_ = nullptr;
    controller_rt_.reset();
  }
  Status join(int i) {
    return ask<caf::ok_atom>(*self_, controller_, protocol::register_volume_atom::value,
                             wire::VolumeInfo{vid(i), "h", 1 << 20, {"rpc"}, -1, ""}, volumes_[i])
        .status();
  }
  // An object of `n` bytes staged at volume `i`.
  std::uint64_t stage(int i, std::uint64_t n) {
    wire::StageRequest r;
    r.key = "k";
    r.nbytes = n;
    auto refs = ask<std::vector<wire::RegionRef>>(*self_, volumes_[i], protocol::stage_atom::value,
                                                  std::vector<wire::StageRequest>{r});
    EXPECT_OK(refs);
    return refs.ok() ? refs->front().region_id : 0;
  }
  // A record of float32 `key` of shape {4}, in one shard per volume of
  // `on` (row blocks), each staged now.
  wire::KeyRecord record(const std::string& key, const std::vector<int>& on,
                         const std::string& group = "") {
    wire::KeyRecord r;
    r.key = key;
    r.dtype = DType::float32;
    r.shape = {4};
    r.group = group;
    const std::int64_t rows = 4 / static_cast<std::int64_t>(on.size());
    for (std::size_t j = 0; j < on.size(); ++j) {
      auto slice = TensorSlice::make({4}, {rows * static_cast<std::int64_t>(j)}, {rows}).value();
      const auto n = static_cast<std::uint64_t>(rows) * 4;
      r.shards.push_back({slice, vid(on[j]), stage(on[j], n), n});
    }
    return r;
  }
  Result<Versions> commit(const Records& records) {
    return ask<Versions>(*self_, controller_, protocol::notify_put_batch_atom::value, records);
  }
  // What needs both volumes back: "split" (a shard on each), the state
  // dict "sd" (its manifest on volume-0, "sd/w" on volume-1) and the
  // version pointer "p" (on volume-0) to "p/v1" (on volume-1).
  void commit_across_both() {
    ASSERT_OK(commit({record("split", {0, 1})}));
    ASSERT_OK(commit({record("sd", {0}, "sd"), record("sd/w", {1}, "sd")}));
    auto pointer = record("p", {0});
    pointer.points_to = 1;
    ASSERT_OK(commit({record("p/v1", {1}, "p/v1")}));
    ASSERT_OK(commit({pointer}));
  }
  Result<Records> locate(const std::vector<std::string>& keys) {
    return ask<Records>(*self_, controller_, protocol::locate_atom::value, keys);
  }
  // The records volume `i` keeps.
  Records held(int i) {
    Records out;
    (*self_)
        ->request(volumes_[i], 10s, protocol::held_records_atom::value, caf::actor())
        .receive([&](Records& r, std::vector<std::string>&) { out = std::move(r); },
                 [&](caf::error& e) { ADD_FAILURE() << volumes_rt_->system().render(e); });
    return out;
  }
  std::uint64_t objects(int i) {
    return ask<wire::VolumeStat>(*self_, volumes_[i], protocol::stat_atom::value).value().objects;
  }

  std::unique_ptr<internal::ActorRuntime> volumes_rt_, controller_rt_;
  std::vector<protocol::storage_volume_actor> volumes_;
  std::unique_ptr<caf::scoped_actor> self_;
  protocol::controller_actor own_controller_, controller_;
};

// What a locate answers that a rebuild must give back as it was.
void expect_same(const wire::KeyRecord& got, const wire::KeyRecord& want) {
  SCOPED_TRACE(want.key);
  ASSERT_TRUE(got.found());
  EXPECT_EQ(got.version, want.version);
  EXPECT_EQ(got.group, want.group);
  EXPECT_EQ(got.group_commit, want.group_commit);
  EXPECT_EQ(got.group_size, want.group_size);
  EXPECT_EQ(got.points_to, want.points_to);
  ASSERT_EQ(got.shards.size(), want.shards.size());
  for (std::size_t i = 0; i < got.shards.size(); ++i) {
    EXPECT_EQ(got.shards[i].volume_id, want.shards[i].volume_id);
    EXPECT_EQ(got.shards[i].object_id, want.shards[i].object_id);
    EXPECT_EQ(got.shards[i].slice, want.shards[i].slice);
  }
}

TEST_F(RebuildTest, AnAcknowledgedCommitIsKeptByEveryVolumeItNames) {
  start_controller();
  ASSERT_OK(join(0));
  ASSERT_OK(join(1));
  ASSERT_OK(commit({record("split", {0, 1})}));
  // Answered: both volumes keep the record already, each once.
  for (int i = 0; i < 2; ++i) {
    auto kept = held(i);
    ASSERT_EQ(kept.size(), 1u) << vid(i);
    EXPECT_EQ(kept.front().key, "split");
    EXPECT_EQ(kept.front().version, 1u);
    EXPECT_EQ(kept.front().shards.size(), 2u);
  }
}

TEST_F(RebuildTest, AControllerStartedAgainstLiveVolumesGetsEveryKeyBack) {
  start_controller();
  ASSERT_OK(join(0));
  ASSERT_OK(join(1));
  ASSERT_OK(commit({record("a", {0})}));
  ASSERT_OK(commit({record("a", {0})}));  // the newer version is the one to come back
  commit_across_both();
  const std::vector<std::string> keys = {"a", "split", "sd", "sd/w", "p/v1", "p"};
  auto before = locate(keys);
  ASSERT_OK(before);
  EXPECT_EQ(before->at(2).group_commit, before->at(2).version);
  EXPECT_EQ(before->at(3).group_size, 2u);
  const auto objects0 = objects(0), objects1 = objects(1);

  stop_controller();
  start_controller();
  ASSERT_OK(join(0));
  // Until volume-1 is back, what waits for it is not answered "no such
  // key", and nothing commits.
  auto waiting = locate({"split"});
  ASSERT_FALSE(waiting.ok());
  EXPECT_EQ(waiting.status().code(), Errc::unavailable);
  EXPECT_NE(waiting.status().message().find("rebuilding its index"), std::string::npos)
      << waiting.status().to_string();
  auto refused = commit({record("new", {0})});
  EXPECT_EQ(refused.status().code(), Errc::unavailable) << refused.status().to_string();
  // Even a key whole on volume-0 waits: volume-1 might hold a newer version.
  EXPECT_EQ(locate({"a"}).status().code(), Errc::unavailable);

  ASSERT_OK(join(1));
  auto after = locate(keys);
  ASSERT_OK(after);
  for (std::size_t i = 0; i < keys.size(); ++i) expect_same(after->at(i), before->at(i));
  // Nothing was dropped or left behind (the refused commit's object stays
  // staged with its stager), and the versions go on above the old ones.
  EXPECT_EQ(objects(0), objects0);
  EXPECT_EQ(objects(1), objects1);
  auto next = commit({record("new", {0})});
  ASSERT_OK(next);
  EXPECT_GT(next->front(), before->back().version);
}

TEST_F(RebuildTest, WhatWaitsForAVolumeThatNeverComesBackIsDroppedWhole) {
  start_controller();
  ASSERT_OK(join(0));
  ASSERT_OK(join(1));
  ASSERT_OK(commit({record("solo", {0})}));
  commit_across_both();
  const std::uint64_t solo_version = locate({"solo"}).value().front().version;
  ASSERT_EQ(objects(0), 4u);  // solo, split's half, sd, p

  stop_controller();
  start_controller(300ms);
  ASSERT_OK(join(0));
  // At the deadline the rebuild ends without volume-1.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  Result<Records> found = Status(Errc::unavailable, "not asked");
  while (std::chrono::steady_clock::now() < deadline) {
    found = locate({"solo", "split", "sd", "sd/w", "p"});
    if (found.ok() || found.status().code() != Errc::unavailable) break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_OK(found);
  EXPECT_EQ(found->at(0).version, solo_version);
  // What volume-0 held part of is lost, naming volume-1; what only
  // volume-1 held ("sd/w") no controller knows of now.
  for (std::size_t i = 1; i < found->size(); ++i) {
    SCOPED_TRACE(found->at(i).key);
    EXPECT_FALSE(found->at(i).found());
    EXPECT_EQ(found->at(i).lost_on, found->at(i).key == "sd/w" ? "" : vid(1));
  }
  // The halves of what was dropped went from volume-0.
  EXPECT_EQ(objects(0), 1u);
  ASSERT_OK(commit({record("after", {0})}));
}

// A sharded state dict, put by two ranks (put_shards), is stamped as one
// commit when it becomes whole and comes back whole.
TEST_F(RebuildTest, AShardedStateDictPutByTwoRanksComesBackWhole) {
  start_controller();
  ASSERT_OK(join(0));
  ASSERT_OK(join(1));
  const std::vector<std::string> members = {"g", "g/w"};
  auto halves = record("g/w", {0, 1}, "g");
  auto rank = [&](int i) {
    auto part = halves;
    part.shards = {halves.shards[i]};
    Records records{part};
    if (i == 0) records.push_back(record("g", {0}, "g"));
    return ask<Versions>(*self_, controller_, protocol::put_shards_atom::value, records,
                         std::string("g"), members, std::uint64_t{7});
  };
  ASSERT_OK(rank(0));
  ASSERT_OK(rank(1));
  auto want = locate(members);
  ASSERT_OK(want);
  for (const auto& r : *want) {
    SCOPED_TRACE(r.key);
    EXPECT_EQ(r.group_commit, want->front().version);
    EXPECT_EQ(r.group_size, 2u);
  }

  stop_controller();
  start_controller();
  ASSERT_OK(join(0));
  ASSERT_OK(join(1));
  auto got = locate(members);
  ASSERT_OK(got);
  for (std::size_t i = 0; i < members.size(); ++i) expect_same(got->at(i), want->at(i));
}

TEST_F(RebuildTest, TheNewestVersionWinsWhicheverVolumeReportsFirst) {
  start_controller();
  ASSERT_OK(join(0));
  ASSERT_OK(join(1));
  ASSERT_OK(commit({record("x", {0})}));
  ASSERT_OK(commit({record("k", {0})}));
  auto want = locate({"k"});
  ASSERT_OK(want);
  ASSERT_EQ(want->front().version, 2u);
  // Volume-1 still keeps version 1 of "k", as when the controller died
  // before its release of that version arrived (the commit of version 2
  // was then never acknowledged: it waits for that release).
  auto stale = record("k", {1});
  stale.version = 1;
  (*self_)->send(volumes_[1], protocol::commit_atom::value,
                 std::vector<std::uint64_t>{stale.shards[0].object_id}, Records{stale});
  ASSERT_EQ(held(1).size(), 1u);
  const auto objects1 = objects(1);

  stop_controller();
  start_controller();
  ASSERT_OK(join(1));
  // Volume-1 knew of volume-0: nothing is back before it is.
  EXPECT_EQ(locate({"k"}).status().code(), Errc::unavailable);
  ASSERT_OK(join(0));
  auto got = locate({"k"});
  ASSERT_OK(got);
  expect_same(got->front(), want->front());
  // The older version's object went.
  EXPECT_EQ(objects(1), objects1 - 1);
  EXPECT_TRUE(held(1).empty());
}

}  // namespace
}  // namespace meshstore::controller
