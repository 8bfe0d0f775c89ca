// A controller that starts against live volumes rebuilds its index from the
// records they keep (docs/failover.md, "The controller's loss"). The
// volumes and the controller run in two actor systems connected over
// loopback, as two processes would be: the controller's "process" is
// stopped whole and a new one started.
#include <atomic>
#include <chrono>
#include <future>
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
      vc.capacity_bytes = 16 << 20;  // room for tens of thousands of small keys
      vc.await_controller = 10s;     // its commits wait through a failover
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
  void start_controller(std::chrono::milliseconds grace = 2000ms, bool took_over = false) {
    controller_rt_ = networked_runtime();
    ControllerOptions options;
    options.rebuild_grace = grace;
    options.took_over = took_over;
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
  // `n` objects of 16 bytes staged at volume `i` in one request.
  std::vector<std::uint64_t> stage_many(int i, std::size_t n) {
    std::vector<wire::StageRequest> requests(n);
    for (auto& r : requests) {
      r.key = "k";
      r.nbytes = 16;
    }
    auto refs = ask<std::vector<wire::RegionRef>>(*self_, volumes_[i], protocol::stage_atom::value,
                                                  requests);
    EXPECT_OK(refs);
    std::vector<std::uint64_t> ids;
    for (std::size_t j = 0; refs.ok() && j < refs->size(); ++j)
      ids.push_back(refs->at(j).region_id);
    return ids;
  }
  // `n` float32 keys "`prefix`/i" of shape {4}, each whole on volume `on`,
  // staged in one request and committed in one batch; their records.
  Records many(int on, const std::string& prefix, std::size_t n) {
    const auto ids = stage_many(on, n);
    Records out(ids.size());
    for (std::size_t i = 0; i < out.size(); ++i) {
      out[i].key = prefix + "/" + std::to_string(i);
      out[i].dtype = DType::float32;
      out[i].shape = {4};
      out[i].shards.push_back({TensorSlice::full({4}), vid(on), ids[i], 16});
    }
    auto versions = commit(out);
    EXPECT_OK(versions);
    for (std::size_t i = 0; versions.ok() && i < out.size(); ++i) out[i].version = versions->at(i);
    return out;
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
  // A locate of `keys` asked from a thread of its own: it may wait for
  // the rebuild.
  std::future<Result<Records>> locate_later(std::vector<std::string> keys) {
    return std::async(std::launch::async, [this, keys = std::move(keys)] {
      caf::scoped_actor me{volumes_rt_->system()};
      return ask<Records>(me, controller_, protocol::locate_atom::value, keys);
    });
  }
  // Every key of `keys` is back at its version, on its object.
  void expect_back(const Records& keys) {
    std::vector<std::string> names;
    for (const auto& r : keys) names.push_back(r.key);
    auto got = locate(names);
    ASSERT_OK(got);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      ASSERT_TRUE(got->at(i).found()) << names[i];
      ASSERT_EQ(got->at(i).version, keys[i].version) << names[i];
      ASSERT_EQ(got->at(i).shards.front().object_id, keys[i].shards.front().object_id);
    }
  }
  // The records volume `i` keeps.
  Records held(int i) {
    Records out;
    (*self_)
        ->request(volumes_[i], 10s, protocol::held_records_atom::value, caf::actor())
        .receive(
            [&](wire::HeldRecords& r, std::vector<std::string>&) { out = std::move(r).take(); },
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
  // key", and nothing commits: they wait (each from a thread of its own).
  auto fresh = record("new", {0});
  auto in_thread = [this](auto call) {
    return std::async(std::launch::async, [this, call] {
      caf::scoped_actor me{volumes_rt_->system()};
      return call(me);
    });
  };
  auto waiting = in_thread([&](caf::scoped_actor& me) {
    return ask<Records>(me, controller_, protocol::locate_atom::value,
                        std::vector<std::string>{"split"});
  });
  auto committing = in_thread([&, fresh](caf::scoped_actor& me) {
    return ask<Versions>(me, controller_, protocol::notify_put_batch_atom::value, Records{fresh});
  });
  // Even a key whole on volume-0 waits: volume-1 might hold a newer version.
  auto whole = in_thread([&](caf::scoped_actor& me) {
    return ask<Records>(me, controller_, protocol::locate_atom::value,
                        std::vector<std::string>{"a"});
  });
  // Still waiting (a bounded look: an answer now would be a wrong one).
  EXPECT_EQ(waiting.wait_for(200ms), std::future_status::timeout);
  EXPECT_EQ(committing.wait_for(0ms), std::future_status::timeout);
  EXPECT_EQ(whole.wait_for(0ms), std::future_status::timeout);

  ASSERT_OK(join(1));
  auto split = waiting.get();
  ASSERT_OK(split);
  expect_same(split->front(), before->at(1));
  ASSERT_OK(whole.get());
  auto committed = committing.get();
  ASSERT_OK(committed);
  // The commit that waited went on above the old versions.
  EXPECT_GT(committed->front(), before->back().version);
  auto after = locate(keys);
  ASSERT_OK(after);
  for (std::size_t i = 0; i < keys.size(); ++i) expect_same(after->at(i), before->at(i));
  // Nothing was dropped or left behind: volume-0 holds one object more,
  // the waiting commit's.
  EXPECT_EQ(objects(0), objects0 + 1);
  EXPECT_EQ(objects(1), objects1);
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
  // The locate waits for the deadline, where the rebuild ends without
  // volume-1.
  auto found = locate({"solo", "split", "sd", "sd/w", "p"});
  ASSERT_OK(found);
  EXPECT_EQ(found->at(0).version, solo_version);
  // What volume-0 held part of is lost, naming volume-1; what only
  // volume-1 held ("sd/w") no controller knows of now.
  for (std::size_t i = 1; i < found->size(); ++i) {
    SCOPED_TRACE(found->at(i).key);
    EXPECT_FALSE(found->at(i).found());
    EXPECT_EQ(found->at(i).lost_on, found->at(i).key == "sd/w" ? "" : vid(1));
    // What no volume left knows may have been on volume-1.
    EXPECT_EQ(found->at(i).maybe_lost_on, found->at(i).key == "sd/w" ? vid(1) : "");
  }
  EXPECT_EQ(locate({"never-put"}).value().front().maybe_lost_on, vid(1));
  // The halves of what was dropped went from volume-0.
  EXPECT_EQ(objects(0), 1u);
  ASSERT_OK(commit({record("after", {0})}));
  // Once volume-1 is back, a miss is a plain miss again.
  ASSERT_OK(join(1));
  EXPECT_EQ(locate({"never-put"}).value().front().maybe_lost_on, "");
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

// A reconnecting process may register a volume twice (an attempt cut
// short got that far): the same volume is answered OK, once in the index;
// another actor under its id is refused.
TEST_F(RebuildTest, RegisteringTheSameVolumeAgainIsOkAnotherUnderItsIdIsNot) {
  start_controller();
  ASSERT_OK(join(0));
  ASSERT_OK(commit({record("a", {0})}));
  ASSERT_OK(join(0));
  auto found = locate({"a"});
  ASSERT_OK(found);
  EXPECT_EQ(found->front().version, 1u);
  auto other =
      ask<caf::ok_atom>(*self_, controller_, protocol::register_volume_atom::value,
                        wire::VolumeInfo{vid(0), "h", 1 << 20, {"rpc"}, -1, ""}, volumes_[1]);
  EXPECT_ERROR(other, Errc::invalid_argument, "is already registered");
}

// A controller that takes one commit and dies before it answers: with
// `commit_first`, once it told the volume (the commit happened), else at
// once (it did not). Asked by the volume as a remote controller is.
caf::behavior dying_controller(caf::event_based_actor* self, bool commit_first) {
  return {
      [=](protocol::replace_atom, Records records, const std::vector<std::string>&,
          bool) -> caf::result<Versions> {
        if (commit_first) {
          std::vector<std::uint64_t> ids;
          for (auto& r : records) {
            r.version = 41;
            ids.push_back(r.shards.front().object_id);
          }
          auto volume = caf::actor_cast<protocol::storage_volume_actor>(self->current_sender());
          self->send(volume, protocol::commit_atom::value, ids, std::move(records));
        }
        auto never = self->make_response_promise<Versions>();
        self->quit(caf::exit_reason::kill);
        return never;
      },
  };
}

// A channel's commit (FastCommitJob) at volume-0 whose controller dies
// before answering it is held, and goes on once a new controller
// registers the volume: done once, whether or not the dead one committed
// it.
class CommitThroughFailoverTest : public RebuildTest, public ::testing::WithParamInterface<bool> {
 protected:
  // Volume-0 commits at a dying controller in the other actor system.
  void register_dying(bool commit_first) {
    controller_rt_ = networked_runtime();
    auto dying = controller_rt_->system().spawn(dying_controller, commit_first);
    auto port = internal::publish_actor(controller_rt_->system(), dying, 0, "127.0.0.1", true);
    ASSERT_OK(port);
    auto remote = internal::connect_with_retry<caf::actor>(volumes_rt_->system(), "127.0.0.1",
                                                           *port, 10s, "controller");
    ASSERT_OK(remote);
    dying_ = *remote;
    (*self_)
        ->request(volumes_[0], 10s, protocol::held_records_atom::value, dying_)
        .receive([](wire::HeldRecords&, std::vector<std::string>&) {},
                 [&](caf::error& e) { ADD_FAILURE() << volumes_rt_->system().render(e); });
  }
  // Sends `r` as a channel's commit; its answer comes in the future.
  std::future<Result<Versions>> fast_commit(const wire::KeyRecord& r) {
    auto answer = std::make_shared<std::promise<Result<Versions>>>();
    auto fut = answer->get_future();
    protocol::FastCommitJob job;
    job.request.records = {r};
    job.owner = (*self_)->address();
    job.controller = dying_.address();
    job.reply_limit = 1 << 20;
    job.done = std::make_shared<std::function<void(Result<protocol::fast_get::CommitDone>)>>(
        [answer](Result<protocol::fast_get::CommitDone> d) {
          answer->set_value(d.ok() ? Result<Versions>(d->versions) : Result<Versions>(d.status()));
        });
    (*self_)->send(volumes_[0], protocol::fast_commit_atom::value, std::move(job));
    return fut;
  }
  caf::actor dying_;
};

TEST_P(CommitThroughFailoverTest, IsDoneOnceByTheNextController) {
  const bool commit_first = GetParam();
  register_dying(commit_first);
  auto answer = fast_commit(record("k", {0}));
  // Held (a bounded look: an answer now would be a wrong one).
  EXPECT_EQ(answer.wait_for(200ms), std::future_status::timeout);
  controller_rt_.reset();  // the dead controller's process goes whole
  dying_ = nullptr;

  start_controller();
  ASSERT_OK(join(0));
  ASSERT_EQ(answer.wait_for(10s), std::future_status::ready);
  auto versions = answer.get();
  ASSERT_OK(versions);
  ASSERT_EQ(versions->size(), 1u);
  // The dead controller's version if it committed (the new one rebuilt it
  // from the volume), else the new controller's first: never both.
  EXPECT_EQ(versions->front(), commit_first ? 41u : 1u);
  auto found = locate({"k"});
  ASSERT_OK(found);
  EXPECT_EQ(found->front().version, versions->front());
  EXPECT_EQ(objects(0), 1u);
  ASSERT_EQ(held(0).size(), 1u);
  EXPECT_EQ(held(0).front().version, versions->front());
}

INSTANTIATE_TEST_SUITE_P(DeadControllerCommitted, CommitThroughFailoverTest, ::testing::Bool());

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
  auto waiting = locate_later({"k"});
  EXPECT_EQ(waiting.wait_for(200ms), std::future_status::timeout);
  ASSERT_OK(join(0));
  auto got = waiting.get();
  ASSERT_OK(got);
  expect_same(got->front(), want->front());
  // The older version's object went.
  EXPECT_EQ(objects(1), objects1 - 1);
  EXPECT_TRUE(held(1).empty());
}

// A volume sends a registering controller its records in parts of this
// many (volume/records_kept.cpp), the last as its answer.
constexpr std::size_t kPart = 16384;

TEST_F(RebuildTest, AVolumeWithManyRecordsGivesThemAllBackInParts) {
  start_controller();
  ASSERT_OK(join(0));
  ASSERT_OK(join(1));
  const auto keys = many(0, "w", 2 * kPart + 100);  // three parts
  ASSERT_EQ(keys.size(), 2 * kPart + 100);
  ASSERT_OK(commit({record("split", {0, 1})}));
  const auto objects0 = objects(0);

  stop_controller();
  start_controller();
  ASSERT_OK(join(0));
  // Volume-0 knew of volume-1: with all of volume-0's parts taken, a key
  // whole on it still waits (volume-1 might hold a newer version).
  auto waiting = locate_later({"w/0", "w/" + std::to_string(2 * kPart + 99)});
  EXPECT_EQ(waiting.wait_for(200ms), std::future_status::timeout);
  ASSERT_OK(join(1));
  ASSERT_OK(waiting.get());
  expect_back(keys);
  auto split = locate({"split"});
  ASSERT_OK(split);
  EXPECT_EQ(split->front().shards.size(), 2u);
  EXPECT_EQ(objects(0), objects0);  // nothing dropped
  // A commit goes on above every version that came back.
  auto fresh = commit({record("fresh", {1})});
  ASSERT_OK(fresh);
  EXPECT_GT(fresh->front(), split->front().version);
}

// A volume can keep an older version of a key beside the newest (the
// controller died before the older one's release came). Whichever part
// brings which, the newest comes back and the older one's object goes.
TEST_F(RebuildTest, TheNewestVersionWinsWhicheverPartHoldsIt) {
  start_controller();
  ASSERT_OK(join(0));                     // volume-0 alone: it waits for no other volume
  ASSERT_OK(commit({record("x", {0})}));  // every version below is 2 or more
  // Every key has an older version (1) whose object was staged before the
  // newest's: two parts and more.
  const std::size_t n = kPart + 100;
  const auto early = stage_many(0, n);
  const auto keys = many(0, "k", n);
  ASSERT_EQ(early.size(), n);
  ASSERT_EQ(keys.size(), n);
  Records older = keys;
  for (std::size_t i = 0; i < n; ++i) {
    older[i].version = 1;
    older[i].shards.front().object_id = early[i];
  }
  (*self_)->send(volumes_[0], protocol::commit_atom::value, early, older);
  // The order the volume lists its records in, which its parts follow:
  // some key's older version comes a part ahead of its newest, and some
  // key's after it.
  const auto kept = held(0);
  std::map<std::string, std::size_t> older_at, newest_at;
  for (std::size_t i = 0; i < kept.size(); ++i) {
    if (kept[i].key == "x") continue;
    (kept[i].version == 1 ? older_at : newest_at)[kept[i].key] = i;
  }
  ASSERT_EQ(older_at.size(), n);
  bool older_ahead = false, newest_ahead = false;
  for (const auto& [key, at] : older_at) {
    older_ahead |= at / kPart < newest_at.at(key) / kPart;
    newest_ahead |= newest_at.at(key) / kPart < at / kPart;
  }
  ASSERT_TRUE(older_ahead && newest_ahead) << "no key's versions are in two parts both ways";
  const auto objects0 = objects(0);

  stop_controller();
  start_controller();
  ASSERT_OK(join(0));
  expect_back(keys);
  EXPECT_EQ(objects(0), objects0 - n);  // every older version's object went
}

// A standby's controller (ControllerOptions::took_over) takes over a store
// that existed: until a volume of that store reports, a miss waits rather
// than answer "no such key", even for a caller that never knew the store;
// a fresh volume (no records, no peers) does not end the wait.
TEST_F(RebuildTest, AStandbysControllerWaitsForAVolumeOfTheStoreItTookOver) {
  start_controller();
  ASSERT_OK(join(0));
  auto a = record("a", {0});
  auto v = commit({a});
  ASSERT_OK(v);
  stop_controller();

  start_controller(10s, true);
  auto reading = locate_later({"a"});
  ASSERT_OK(join(1));  // never registered before: it ends no wait
  // A bounded look: an answer now would be "no such key".
  EXPECT_EQ(reading.wait_for(200ms), std::future_status::timeout);
  ASSERT_OK(join(0));
  ASSERT_EQ(reading.wait_for(10s), std::future_status::ready);
  auto got = reading.get();
  ASSERT_OK(got);
  ASSERT_TRUE(got->front().found()) << "read empty before the old volume came";
  EXPECT_EQ(got->front().version, v->front());
}

// With no volume of the old store at all, the wait ends at the deadline:
// misses are answered, and commits go on.
TEST_F(RebuildTest, AStandbyWithNoOldVolumeServesAfterTheDeadline) {
  start_controller(300ms, true);
  ASSERT_OK(join(0));
  auto reading = locate_later({"nothing"});
  ASSERT_EQ(reading.wait_for(10s), std::future_status::ready);
  auto got = reading.get();
  ASSERT_OK(got);
  EXPECT_FALSE(got->front().found());
  ASSERT_OK(commit({record("a", {0})}));
}

// -- a controller that dies in the middle of telling its volumes ----------

using relay_idle_atom = caf::atom_constant<caf::atom("relayidle")>;

// How many more messages a Relay lets through: -1 for all; once 0, it
// drops the rest (counted), as the network does with what a killed
// process had not sent yet.
struct Cut {
  std::atomic<int> left{-1};
  std::atomic<int> dropped{0};
};

// Stands between the controller and a volume, registered in the volume's
// place: passes each message on as it came (requests answered by the
// volume), until its Cut says stop.
caf::behavior relay(caf::event_based_actor* self, caf::actor volume, std::shared_ptr<Cut> cut) {
  self->set_default_handler([volume, cut](caf::scheduled_actor* s,
                                          caf::message_view& x) -> caf::result<caf::message> {
    int left = cut->left.load();
    while (left > 0 && !cut->left.compare_exchange_weak(left, left - 1)) {
    }
    if (left == 0) {
      ++cut->dropped;
      return caf::message();  // an answer no one reads: its asker is killed next
    }
    return static_cast<caf::event_based_actor*>(s)->delegate(volume, x.move_content_to_message());
  });
  return {[](relay_idle_atom) {}};
}

// A controller that dies while it tells a volume of an overwrite of "a".
class DyingControllerTest : public RebuildTest {
 protected:
  // Registers the first `volumes` volumes at a new controller, volume
  // `relayed` through a relay; commits "a" there (old_, at v1_), then
  // overwrites it (fresh_) and the controller's system goes once `passed`
  // of the overwrite's messages reached that volume: the rest (and the
  // flush the controller waits on) are lost. A batch commit, or with
  // `sharded` a sharded put (put_shards). With `fresh_first` the new
  // version's object is staged before the old one's (a volume lists its
  // objects in no set order: both orders are tried).
  void overwrite_as_the_controller_dies(int relayed, bool sharded, int passed, bool fresh_first,
                                        int volumes = 1) {
    auto cut = std::make_shared<Cut>();
    auto relay_actor = caf::actor_cast<protocol::storage_volume_actor>(
        volumes_rt_->system().spawn(relay, caf::actor_cast<caf::actor>(volumes_[relayed]), cut));
    start_controller();
    for (int i = 0; i < volumes; ++i) {
      ASSERT_OK(ask<caf::ok_atom>(*self_, controller_, protocol::register_volume_atom::value,
                                  wire::VolumeInfo{vid(i), "h", 1 << 20, {"rpc"}, -1, ""},
                                  i == relayed ? relay_actor : volumes_[i]));
    }
    if (fresh_first) fresh_ = record("a", {relayed});
    old_ = record("a", {relayed});
    if (!fresh_first) fresh_ = record("a", {relayed});
    auto v1 = commit_by(sharded, {old_});
    ASSERT_OK(v1);
    v1_ = v1->front();
    cut->left = passed;
    if (sharded) {
      caf::anon_send(controller_, protocol::put_shards_atom::value, Records{fresh_}, std::string(),
                     std::vector<std::string>(), std::uint64_t{0});
    } else {
      caf::anon_send(controller_, protocol::notify_put_batch_atom::value, Records{fresh_});
    }
    ASSERT_TRUE(testing::eventually([&] { return cut->dropped.load() > 0; }, 10s))
        << "the overwrite sent the volume no more than " << passed << " message(s)";
    stop_controller();
    caf::anon_send_exit(relay_actor, caf::exit_reason::user_shutdown);
  }
  Result<Versions> commit_by(bool sharded, const Records& records) {
    if (!sharded) return commit(records);
    return ask<Versions>(*self_, controller_, protocol::put_shards_atom::value, records,
                         std::string(), std::vector<std::string>(), std::uint64_t{0});
  }
  // "a" as the controller finds it: the new version, else the old one.
  void expect_a(bool fresh) {
    auto found = locate({"a"});
    ASSERT_OK(found);
    const auto& a = found->front();
    ASSERT_TRUE(a.found()) << "the key was lost: the old version went before the new one came";
    ASSERT_EQ(a.shards.size(), 1u);
    const auto& want = fresh ? fresh_ : old_;
    EXPECT_EQ(a.shards.front().object_id, want.shards.front().object_id)
        << "the " << (fresh ? "old" : "new") << " version came back";
    if (fresh) {
      EXPECT_GT(a.version, v1_);
    } else {
      EXPECT_EQ(a.version, v1_);
    }
  }

  wire::KeyRecord old_, fresh_;
  std::uint64_t v1_ = 0;
};

// Whichever of the overwrite's messages got to volume-0 (none, the first,
// or the first two), the next controller finds a committed version of "a",
// never none: the new one once its records got there (they go first), the
// old one otherwise. One parameter per way of committing.
class OverwriteAsTheControllerDiesTest
    : public DyingControllerTest,
      public ::testing::WithParamInterface<std::tuple<bool, int, bool>> {};

TEST_P(OverwriteAsTheControllerDiesTest, LeavesTheOldOrTheNewVersionNeverNone) {
  const auto [sharded, passed, fresh_first] = GetParam();
  overwrite_as_the_controller_dies(0, sharded, passed, fresh_first);
  start_controller();
  ASSERT_OK(join(0));
  // A sharded put first adopts its objects (a message without records).
  expect_a(passed >= (sharded ? 2 : 1));
  // The version that lost keeps no record on the volume, once rebuilt.
  EXPECT_TRUE(testing::eventually([&] { return held(0).size() == 1; }, 10s)) << held(0).size();
}

// A volume that registers after its rebuild gave it up, with the index
// written to again, and keeps two versions of a key the index lacks (its
// controller died between the new one's commit and the old one's release):
// the newer comes back, whichever it lists first.
class LateVolumeTest : public DyingControllerTest, public ::testing::WithParamInterface<bool> {};

TEST_P(LateVolumeTest, ItsNewerVersionWinsOverItsOlderOne) {
  overwrite_as_the_controller_dies(1, false, 1, GetParam(), 2);
  ASSERT_EQ(held(1).size(), 2u) << "volume-1 keeps both versions of 'a'";
  start_controller(300ms);
  ASSERT_OK(join(0));                     // volume-1, its peer, is given up after 300 ms
  ASSERT_OK(commit({record("b", {0})}));  // answered once the rebuild is over
  ASSERT_OK(join(1));
  expect_a(true);
  EXPECT_TRUE(testing::eventually([&] { return held(1).size() == 1; }, 10s)) << held(1).size();
}

INSTANTIATE_TEST_SUITE_P(Messages, OverwriteAsTheControllerDiesTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(0, 1, 2),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<bool, int, bool>>& info) {
                           return std::string(std::get<0>(info.param) ? "sharded" : "batch") + "_" +
                                  std::to_string(std::get<1>(info.param)) + "_passed" +
                                  (std::get<2>(info.param) ? "_new_staged_first"
                                                           : "_old_staged_first");
                         });
INSTANTIATE_TEST_SUITE_P(StagingOrders, LateVolumeTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "new" : "old") + "_staged_first";
                         });

}  // namespace
}  // namespace meshstore::controller
