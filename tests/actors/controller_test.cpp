#include "meshstore/controller/controller.hpp"

#include <cstring>
#include <optional>
#include <thread>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/protocol/actor_types.hpp"
#include "meshstore/protocol/controller_actor.hpp"
#include "meshstore/protocol/fast_get.hpp"
#include "meshstore/protocol/limits.hpp"
#include "meshstore/protocol/storage_volume_actor.hpp"
#include "meshstore/protocol/wire_glue.hpp"
#include "meshstore/volume/volume.hpp"
#include "testing/ask.hpp"
#include "testing/test_util.hpp"

namespace meshstore::controller {
namespace {

using namespace std::chrono_literals;

using testing::ask;

// A stage request without inline data.
wire::StageRequest stage_req(const std::string& key, std::uint64_t n) {
  wire::StageRequest r;
  r.key = key;
  r.nbytes = n;
  return r;
}

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    internal::RuntimeOptions ro;
    ro.add_types = protocol::add_actor_types;
    runtime_ = internal::ActorRuntime::create(ro).value();
    auto& sys = runtime_->system();
    controller_ = spawn_controller(sys);
    volume::VolumeConfig vc;
    vc.volume_id = "volume-0";
    vc.capacity_bytes = 1 << 20;
    volume_ = volume::spawn_storage_volume(sys, vc).value();
    self_ = std::make_unique<caf::scoped_actor>(sys);
    ASSERT_OK(
        (ask<caf::ok_atom>(*self_, controller_, protocol::register_volume_atom::value,
                           wire::VolumeInfo{"volume-0", "h", 1 << 20, {"rpc"}, -1, ""}, volume_)));
  }
  void TearDown() override {
    caf::anon_send_exit(controller_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(volume_, caf::exit_reason::user_shutdown);
    self_.reset();
    controller_ = nullptr;
    volume_ = nullptr;
    runtime_.reset();
  }

  // Stages an object of `n` bytes at the volume; returns its id.
  std::uint64_t stage(std::uint64_t n) {
    auto r = ask<std::vector<wire::RegionRef>>(*self_, volume_, protocol::stage_atom::value,
                                               std::vector<wire::StageRequest>{stage_req("k", n)});
    EXPECT_OK(r);
    return r.ok() ? r->front().region_id : 0;
  }

  wire::KeyRecord record(const std::string& key, Shape shape, std::uint64_t object) {
    wire::KeyRecord r;
    r.key = key;
    r.dtype = DType::float32;
    r.shape = shape;
    r.shards.push_back({TensorSlice::full(shape), "volume-0", object,
                        static_cast<std::uint64_t>(shape_numel(shape)) * 4});
    return r;
  }

  wire::VolumeStat stat() {
    return ask<wire::VolumeStat>(*self_, volume_, protocol::stat_atom::value).value();
  }

  std::unique_ptr<internal::ActorRuntime> runtime_;
  protocol::controller_actor controller_;
  protocol::storage_volume_actor volume_;
  std::unique_ptr<caf::scoped_actor> self_;
};

TEST_F(ControllerTest, CommittedKeyIsLocatedWithItsVersion) {
  auto v = ask<std::uint64_t>(*self_, controller_, protocol::notify_put_atom::value,
                              record("a", {2, 2}, stage(16)));
  ASSERT_OK(v);
  auto recs = ask<std::vector<wire::KeyRecord>>(*self_, controller_, protocol::locate_atom::value,
                                                std::vector<std::string>{"a", "missing"});
  ASSERT_OK(recs);
  ASSERT_EQ(recs->size(), 2u);
  EXPECT_EQ((*recs)[0].version, *v);
  EXPECT_EQ((*recs)[0].shape, (Shape{2, 2}));
  EXPECT_FALSE((*recs)[1].found());
  EXPECT_EQ((*recs)[1].key, "missing");
}

TEST_F(ControllerTest, BatchIsAllOrNothing) {
  auto good = record("good", {4}, stage(16));
  auto bad = record("bad", {4}, stage(16));
  bad.shards.front().nbytes = 3;  // does not match 4 x float32
  auto r =
      ask<std::vector<std::uint64_t>>(*self_, controller_, protocol::notify_put_batch_atom::value,
                                      std::vector<wire::KeyRecord>{good, bad});
  EXPECT_ERROR(r, Errc::invalid_argument, "'bad'");
  auto exists = ask<std::vector<std::uint64_t>>(*self_, controller_, protocol::exists_atom::value,
                                                std::vector<std::string>{"good", "bad"});
  EXPECT_EQ(*exists, (std::vector<std::uint64_t>{0, 0}));
}

TEST_F(ControllerTest, BatchRejectsDuplicateKeysAndUnknownVolumes) {
  auto a = record("a", {1}, stage(4));
  EXPECT_ERROR(
      (ask<std::vector<std::uint64_t>>(*self_, controller_, protocol::notify_put_batch_atom::value,
                                       std::vector<wire::KeyRecord>{a, a})),
      Errc::invalid_argument, "appears twice");
  auto b = record("b", {1}, stage(4));
  b.shards.front().volume_id = "volume-9";
  EXPECT_ERROR((ask<std::uint64_t>(*self_, controller_, protocol::notify_put_atom::value, b)),
               Errc::not_found, "volume-9");
}

TEST_F(ControllerTest, ShardsMustCoverTheTensor) {
  auto r = record("half", {4, 4}, stage(32));
  r.shards.front().slice = TensorSlice::make({4, 4}, {0, 0}, {2, 4}).value();
  r.shards.front().nbytes = 32;
  EXPECT_ERROR((ask<std::uint64_t>(*self_, controller_, protocol::notify_put_atom::value, r)),
               Errc::partially_committed, "cover 8 of 16");
}

TEST_F(ControllerTest, OverwriteBumpsVersionAndReleasesTheOldObject) {
  auto v1 = ask<std::uint64_t>(*self_, controller_, protocol::notify_put_atom::value,
                               record("w", {4}, stage(16)));
  auto v2 = ask<std::uint64_t>(*self_, controller_, protocol::notify_put_atom::value,
                               record("w", {8}, stage(32)));
  ASSERT_OK(v1);
  ASSERT_OK(v2);
  EXPECT_GT(*v2, *v1);
  // The release travels to the volume ahead of this stat request.
  auto s = stat();
  EXPECT_EQ(s.objects, 1u);
  EXPECT_EQ(s.bytes_held, 32u);
}

// A commit sent again after its answer was lost (a channel that failed, a
// failover) names the objects its keys already name: it is answered with
// their versions and applied once; the objects stay (applied again, it
// released them). One only partly so is refused, changing nothing.
TEST_F(ControllerTest, ACommitSentAgainIsAnsweredWithItsVersionsAndAppliedOnce) {
  const auto w = record("w", {4}, stage(16));
  auto v1 = ask<std::uint64_t>(*self_, controller_, protocol::notify_put_atom::value, w);
  ASSERT_OK(v1);
  auto again = ask<std::uint64_t>(*self_, controller_, protocol::notify_put_atom::value, w);
  ASSERT_OK(again);
  EXPECT_EQ(*again, *v1);
  auto s = stat();
  EXPECT_EQ(s.objects, 1u);  // not released by its own commit
  EXPECT_EQ(s.bytes_held, 16u);
  auto fenced = w;
  fenced.expect_version = 0;  // as the first send had it: no such key then
  auto batch = ask<std::vector<std::uint64_t>>(*self_, controller_, protocol::replace_atom::value,
                                               std::vector<wire::KeyRecord>{fenced},
                                               std::vector<std::string>{}, true);
  ASSERT_OK(batch);
  EXPECT_EQ(*batch, (std::vector<std::uint64_t>{*v1}));
  EXPECT_EQ(stat().objects, 1u);

  const auto x = record("x", {4}, stage(16));
  auto vx =
      ask<std::vector<std::uint64_t>>(*self_, controller_, protocol::notify_put_batch_atom::value,
                                      std::vector<wire::KeyRecord>{w, x});
  EXPECT_ERROR(vx, Errc::conflict, "a commit sent again was applied before, and 'x'");
  auto exists = ask<std::vector<std::uint64_t>>(*self_, controller_, protocol::exists_atom::value,
                                                std::vector<std::string>{"w", "x"});
  EXPECT_EQ(*exists, (std::vector<std::uint64_t>{*v1, 0}));
}

TEST_F(ControllerTest, KeysMatchWholeComponents) {
  for (const char* k :
       {"model.layers.0.w", "model.layers.1.w", "model.layers_extra", "model/emb", "other"}) {
    ASSERT_OK((ask<std::uint64_t>(*self_, controller_, protocol::notify_put_atom::value,
                                  record(k, {1}, stage(4)))));
  }
  auto keys = ask<std::vector<std::string>>(*self_, controller_, protocol::keys_atom::value,
                                            std::string("model.layers"));
  EXPECT_EQ(*keys, (std::vector<std::string>{"model.layers.0.w", "model.layers.1.w"}));
  keys = ask<std::vector<std::string>>(*self_, controller_, protocol::keys_atom::value,
                                       std::string("model"));
  EXPECT_EQ(keys->size(), 4u);
  keys = ask<std::vector<std::string>>(*self_, controller_, protocol::keys_atom::value,
                                       std::string(""));
  EXPECT_EQ(keys->size(), 5u);
}

TEST_F(ControllerTest, VolumeWithAnUnknownTransportDoesNotStart) {
  volume::VolumeConfig vc;
  vc.volume_id = "volume-x";
  vc.transports = {"rpc", "smoke-signals"};
  EXPECT_ERROR(volume::spawn_storage_volume(runtime_->system(), vc), Errc::not_found,
               "smoke-signals");
  vc.volume_id = "";
  EXPECT_ERROR(volume::spawn_storage_volume(runtime_->system(), vc), Errc::invalid_argument,
               "volume id is empty");
}

TEST_F(ControllerTest, DeadClientsLeasesAndStagingAreReclaimed) {
  volume::VolumeConfig vc;
  vc.volume_id = "volume-g";
  vc.orphan_grace = 50ms;
  auto volume = volume::spawn_storage_volume(runtime_->system(), vc).value();
  const std::uint64_t big = 2 * protocol::limits::kInlineBytes;  // read through a real lease
  {
    // A short-lived client: stages two objects, has one committed, opens a
    // lease on it, and dies.
    caf::scoped_actor client{runtime_->system()};
    auto regions = ask<std::vector<wire::RegionRef>>(
        client, volume, protocol::stage_atom::value,
        std::vector<wire::StageRequest>{stage_req("a", big), stage_req("b", 200)});
    ASSERT_OK(regions);
    const auto committed_id = regions->at(0).region_id;
    client->send(volume, protocol::commit_atom::value, std::vector<std::uint64_t>{committed_id},
                 std::vector<wire::KeyRecord>{});
    auto lease =
        ask<wire::ReadLease>(client, volume, protocol::open_read_atom::value,
                             std::vector<std::uint64_t>{committed_id}, std::uint64_t{1}, false);
    ASSERT_OK(lease);
    ASSERT_NE(lease->lease_id, 0u);
    auto alive = ask<wire::VolumeStat>(*self_, volume, protocol::stat_atom::value).value();
    EXPECT_EQ(alive.leases, 1u);
    EXPECT_EQ(alive.staged, 1u);
  }
  // Bounded wait for the volume to process the client's death and the grace.
  wire::VolumeStat s;
  for (int i = 0; i < 200; ++i) {
    s = ask<wire::VolumeStat>(*self_, volume, protocol::stat_atom::value).value();
    if (s.leases == 0 && s.staged == 0) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(s.leases, 0u);
  EXPECT_EQ(s.staged, 0u);   // "b" was never committed: dropped
  EXPECT_EQ(s.objects, 1u);  // "a" was committed: kept
  EXPECT_EQ(s.bytes_held, big);
  caf::anon_send_exit(volume, caf::exit_reason::user_shutdown);
}

TEST_F(ControllerTest, ClosingALeaseThatNeverOpenedIsHarmless) {
  // What a client does after its open_read timed out: close the id it chose.
  (*self_)->send(volume_, protocol::close_read_atom::value, std::uint64_t{424242});
  EXPECT_EQ(stat().leases, 0u);
  const auto id = stage(2 * protocol::limits::kInlineBytes);  // large enough to need a lease
  EXPECT_ERROR((ask<wire::ReadLease>(*self_, volume_, protocol::open_read_atom::value,
                                     std::vector<std::uint64_t>{id}, std::uint64_t{0}, false)),
               Errc::protocol_error, "lease id 0");
}

// Locates `keys` pinned for `ttl_ms`; answers the pin and the records.
std::pair<std::uint64_t, std::vector<wire::KeyRecord>> locate_pinned(
    caf::scoped_actor& self, const protocol::controller_actor& controller,
    std::vector<std::string> keys, std::uint64_t ttl_ms) {
  std::pair<std::uint64_t, std::vector<wire::KeyRecord>> out{0, {}};
  self->request(controller, 30s, protocol::locate_pinned_atom::value, std::move(keys), ttl_ms)
      .receive(
          [&](std::uint64_t pin, std::vector<wire::KeyRecord>& records) {
            out = {pin, std::move(records)};
          },
          [&](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
  return out;
}

TEST_F(ControllerTest, PinnedLocateHoldsTheReleaseOfAReplacedVersionUntilUnpinned) {
  // A reader that keeps losing the race to writers locates pinned: the
  // version it located stays readable however often the key is replaced.
  const std::uint64_t n = 2 * protocol::limits::kInlineBytes;
  const auto old_id = stage(n);
  ASSERT_OK((ask<std::uint64_t>(*self_, controller_, protocol::notify_put_atom::value,
                                record("hot", {static_cast<std::int64_t>(n / 4)}, old_id))));
  auto [pin, records] = locate_pinned(*self_, controller_, {"hot", "absent"}, 30000);
  ASSERT_NE(pin, 0u);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].shards.at(0).object_id, old_id);
  EXPECT_FALSE(records[1].found());
  // Two overwrites and a remove commit as usual...
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK((ask<std::uint64_t>(*self_, controller_, protocol::notify_put_atom::value,
                                  record("hot", {static_cast<std::int64_t>(n / 4)}, stage(n)))));
  }
  ASSERT_OK(
      (ask<caf::ok_atom>(*self_, controller_, protocol::remove_atom::value, std::string("hot"))));
  EXPECT_FALSE((ask<std::vector<wire::KeyRecord>>(*self_, controller_, protocol::locate_atom::value,
                                                  std::vector<std::string>{"hot"}))
                   ->front()
                   .found());
  // ...but the located object is still there for the pinned reader; the
  // unpinned second version is gone.
  EXPECT_EQ(stat().bytes_held, n);
  auto lease = ask<wire::ReadLease>(*self_, volume_, protocol::open_read_atom::value,
                                    std::vector<std::uint64_t>{old_id}, std::uint64_t{1}, true);
  ASSERT_OK(lease);
  // A reader without the pin (one that located the old version before the
  // overwrites, and kept it in its cache) is refused: it reads the key
  // afresh, never the version the returned overwrites replaced.
  EXPECT_ERROR((ask<wire::ReadLease>(*self_, volume_, protocol::open_read_atom::value,
                                     std::vector<std::uint64_t>{old_id}, std::uint64_t{2}, false)),
               Errc::not_found, "replaced or removed");
  (*self_)->send(volume_, protocol::close_read_atom::value, lease->lease_id);
  // Unpinning lets it go (a locate after it orders the volume's messages).
  (*self_)->send(controller_, protocol::unpin_atom::value, pin);
  (*self_)->send(controller_, protocol::unpin_atom::value, pin);  // a second unpin is harmless
  ASSERT_OK((ask<std::vector<wire::KeyRecord>>(*self_, controller_, protocol::locate_atom::value,
                                               std::vector<std::string>{"hot"})));
  EXPECT_EQ(stat().bytes_held, 0u);
  EXPECT_EQ(stat().objects, 0u);
}

TEST_F(ControllerTest, OverlappingPinsEachHoldTheObject) {
  const std::uint64_t n = 2 * protocol::limits::kInlineBytes;
  const std::int64_t elems = static_cast<std::int64_t>(n / 4);
  ASSERT_OK((ask<std::uint64_t>(*self_, controller_, protocol::notify_put_atom::value,
                                record("k", {elems}, stage(n)))));
  EXPECT_EQ(locate_pinned(*self_, controller_, {"nothing"}, 30000).first, 0u);  // nothing to pin
  const auto first = locate_pinned(*self_, controller_, {"k"}, 30000).first;
  const auto second = locate_pinned(*self_, controller_, {"k"}, 30000).first;
  ASSERT_NE(first, 0u);
  ASSERT_NE(second, first);
  ASSERT_OK((ask<std::uint64_t>(*self_, controller_, protocol::notify_put_atom::value,
                                record("k", {elems}, stage(n)))));
  (*self_)->send(controller_, protocol::unpin_atom::value, first);
  ASSERT_OK((ask<std::vector<wire::KeyRecord>>(*self_, controller_, protocol::locate_atom::value,
                                               std::vector<std::string>{"k"})));
  EXPECT_EQ(stat().bytes_held, 2 * n);  // the second pin still holds the old version
  (*self_)->send(controller_, protocol::unpin_atom::value, second);
  ASSERT_OK((ask<std::vector<wire::KeyRecord>>(*self_, controller_, protocol::locate_atom::value,
                                               std::vector<std::string>{"k"})));
  EXPECT_EQ(stat().bytes_held, n);
  EXPECT_EQ(stat().objects, 1u);
}

TEST_F(ControllerTest, APinEndsAtItsDeadline) {
  // A reader that died holding a pin holds the memory only until the pin's
  // deadline.
  const std::uint64_t n = 2 * protocol::limits::kInlineBytes;
  const std::int64_t elems = static_cast<std::int64_t>(n / 4);
  ASSERT_OK((ask<std::uint64_t>(*self_, controller_, protocol::notify_put_atom::value,
                                record("k", {elems}, stage(n)))));
  ASSERT_NE(locate_pinned(*self_, controller_, {"k"}, 50).first, 0u);
  ASSERT_OK((ask<std::uint64_t>(*self_, controller_, protocol::notify_put_atom::value,
                                record("k", {elems}, stage(n)))));
  // Polls (bounded) until the controller's own timer ends the pin.
  bool freed = false;
  for (int i = 0; i < 1000 && !freed; ++i) {
    ASSERT_OK((ask<std::vector<wire::KeyRecord>>(*self_, controller_, protocol::locate_atom::value,
                                                 std::vector<std::string>{"k"})));
    freed = stat().bytes_held == n;
    if (!freed) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(freed) << "the pin's deadline did not release the replaced version";
  EXPECT_EQ(stat().objects, 1u);
}

TEST(KeyMatchesPrefix, Components) {
  EXPECT_TRUE(key_matches_prefix("a.b", "a"));
  EXPECT_TRUE(key_matches_prefix("a/b", "a"));
  EXPECT_TRUE(key_matches_prefix("a.b", "a."));
  EXPECT_TRUE(key_matches_prefix("a.b", "a.b"));
  EXPECT_FALSE(key_matches_prefix("a.bc", "a.b"));
  EXPECT_FALSE(key_matches_prefix("ab", "a"));
  EXPECT_FALSE(key_matches_prefix("a", "a.b"));
  EXPECT_TRUE(key_matches_prefix("anything", ""));
}

TEST_F(ControllerTest, RemoveAndRemoveBatch) {
  ASSERT_OK((ask<std::uint64_t>(*self_, controller_, protocol::notify_put_atom::value,
                                record("x", {1}, stage(4)))));
  ASSERT_OK((ask<std::uint64_t>(*self_, controller_, protocol::notify_put_atom::value,
                                record("y", {1}, stage(4)))));
  EXPECT_OK(
      (ask<caf::ok_atom>(*self_, controller_, protocol::remove_atom::value, std::string("x"))));
  EXPECT_ERROR(
      (ask<caf::ok_atom>(*self_, controller_, protocol::remove_atom::value, std::string("x"))),
      Errc::not_found, "no such key");
  auto reply = ask<wire::RemoveReply>(*self_, controller_, protocol::remove_batch_atom::value,
                                      std::vector<std::string>{"y", "nope"});
  ASSERT_OK(reply);
  EXPECT_EQ(reply->removed, 1u);
  EXPECT_EQ(reply->missing, std::vector<std::string>{"nope"});
  EXPECT_EQ(stat().objects, 0u);
  EXPECT_EQ(stat().bytes_held, 0u);
}

// A stand-in volume that answers `flush` only when sent `ok_atom` (or never,
// if it is killed first); it takes commits, releases and discards silently.
// Sent a record and a controller, it commits the record there itself, as a
// volume's fast_commit does, and answers the controller's answer.
caf::behavior held_flush_volume(caf::event_based_actor* self) {
  auto held = std::make_shared<std::vector<caf::response_promise>>();
  return {
      [self](const caf::actor& controller, const wire::KeyRecord& r) {
        auto rp = self->make_response_promise();
        self->request(controller, testing::kWait, protocol::replace_atom::value,
                      std::vector<wire::KeyRecord>{r}, std::vector<std::string>{}, true)
            .then([rp](std::vector<std::uint64_t>& v) mutable { rp.deliver(std::move(v)); },
                  [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
      [](protocol::commit_atom, const std::vector<std::uint64_t>&,
         const std::vector<wire::KeyRecord>&) {},
      [](protocol::held_records_atom, const caf::actor&) {
        return caf::make_message(wire::HeldRecords{}, std::vector<std::string>{});
      },
      [](protocol::release_atom, const std::vector<std::uint64_t>&) {},
      [](protocol::discard_atom, const std::vector<std::uint64_t>&) {},
      [self, held](protocol::flush_atom) {
        held->push_back(self->make_response_promise());
        return held->back();
      },
      [held](caf::ok_atom) {
        for (auto& rp : *held) rp.deliver(caf::ok_atom::value);
        held->clear();
      },
  };
}

class HeldFlushTest : public ControllerTest {
 protected:
  void SetUp() override {
    ControllerTest::SetUp();
    held_ = runtime_->system().spawn(held_flush_volume);
    ASSERT_OK((ask<caf::ok_atom>(*self_, controller_, protocol::register_volume_atom::value,
                                 wire::VolumeInfo{"volume-1", "h", 1 << 20, {"rpc"}, -1, ""},
                                 caf::actor_cast<protocol::storage_volume_actor>(held_))));
  }
  void TearDown() override {
    caf::anon_send_exit(held_, caf::exit_reason::user_shutdown);
    held_ = nullptr;
    ControllerTest::TearDown();
  }

  wire::KeyRecord on_held(const std::string& key, std::uint64_t object) {
    auto r = record(key, {1}, object);
    r.shards.front().volume_id = "volume-1";
    return r;
  }

  // Whether an answer to a message this test's actor sent arrives within `t`.
  bool answered_within(std::chrono::milliseconds t) {
    bool got = false;
    (*self_)->receive([&](std::uint64_t) { got = true; }, [&](caf::ok_atom) { got = true; },
                      caf::after(t) >> [] {});
    return got;
  }

  caf::actor held_;
};

TEST_F(HeldFlushTest, AnOverwriteOrRemoveAnswersOnlyOnceTheVolumeDroppedWhatItReplaced) {
  // A new key releases nothing: answered at once.
  ASSERT_OK(
      (ask<std::uint64_t>(*self_, controller_, protocol::notify_put_atom::value, on_held("k", 1))));
  // Its overwrite releases object 1: no answer while the volume has not
  // confirmed (until then a cached location could still read object 1).
  (*self_)->send(controller_, protocol::notify_put_atom::value, on_held("k", 2));
  EXPECT_FALSE(answered_within(300ms));
  (*self_)->send(held_, caf::ok_atom::value);
  EXPECT_TRUE(answered_within(testing::kWait));
  // The same for a remove.
  (*self_)->send(controller_, protocol::remove_atom::value, std::string("k"));
  EXPECT_FALSE(answered_within(300ms));
  (*self_)->send(held_, caf::ok_atom::value);
  EXPECT_TRUE(answered_within(testing::kWait));
}

// A reader hears of a write only once it is settled: until the volume
// that held what the write replaced or removed confirmed, a locate of the
// key waits (a reader that saw the new value, or the key gone, could
// otherwise be followed by one reading the old object from its cache),
// and a later write of the key waits for the earlier one. Other keys are
// answered at once.
TEST_F(HeldFlushTest, AReaderHearsOfAWriteOnlyOnceTheVolumesHandledIt) {
  ASSERT_OK(
      (ask<std::uint64_t>(*self_, controller_, protocol::notify_put_atom::value, on_held("k", 1))));
  // Moves k to volume-0: object 1 on the held volume is released.
  (*self_)->send(controller_, protocol::notify_put_atom::value, record("k", {1}, stage(4)));
  caf::scoped_actor reader{runtime_->system()};
  auto located = [&](std::chrono::milliseconds t) {
    std::optional<std::vector<wire::KeyRecord>> out;
    reader->receive([&](std::vector<wire::KeyRecord>& r) { out = std::move(r); },
                    caf::after(t) >> [] {});
    return out;
  };
  reader->send(controller_, protocol::locate_atom::value, std::vector<std::string>{"k"});
  EXPECT_FALSE(located(300ms));
  caf::scoped_actor other{runtime_->system()};
  auto elsewhere = ask<std::vector<wire::KeyRecord>>(
      other, controller_, protocol::locate_atom::value, std::vector<std::string>{"other"});
  ASSERT_OK(elsewhere);
  EXPECT_FALSE(elsewhere->front().found());
  // A third write of k releases volume-0's object, which that volume
  // confirms at once; it still waits for the second.
  (*self_)->send(controller_, protocol::notify_put_atom::value, on_held("k", 3));
  EXPECT_FALSE(answered_within(300ms));
  (*self_)->send(held_, caf::ok_atom::value);
  EXPECT_TRUE(answered_within(testing::kWait));
  EXPECT_TRUE(answered_within(testing::kWait));
  // The reader is told of the write it asked after: k on volume-0.
  auto seen = located(testing::kWait);
  ASSERT_TRUE(seen);
  ASSERT_TRUE(seen->front().found());
  EXPECT_EQ(seen->front().shards.front().volume_id, "volume-0");
  // A removal: the key is said to be gone (by a locate, exists or keys)
  // only once the volume confirmed.
  (*self_)->send(controller_, protocol::remove_atom::value, std::string("k"));
  reader->send(controller_, protocol::locate_atom::value, std::vector<std::string>{"k"});
  caf::scoped_actor asker{runtime_->system()};
  asker->send(controller_, protocol::exists_atom::value, std::vector<std::string>{"k"});
  asker->send(controller_, protocol::keys_atom::value, std::string("k"));
  caf::scoped_actor remover{runtime_->system()};
  remover->send(controller_, protocol::remove_atom::value, std::string("k"));
  EXPECT_FALSE(located(300ms));
  std::optional<std::vector<std::uint64_t>> versions;
  std::optional<std::vector<std::string>> listed;
  auto listen = [&](std::chrono::milliseconds t) {
    asker->receive([&](std::vector<std::uint64_t>& v) { versions = std::move(v); },
                   [&](std::vector<std::string>& k) { listed = std::move(k); },
                   caf::after(t) >> [] {});
  };
  std::optional<caf::error> refused;
  auto removed = [&](std::chrono::milliseconds t) {
    remover->receive([&](caf::error& e) { refused = std::move(e); }, [](caf::ok_atom) {},
                     caf::after(t) >> [] {});
    return refused.has_value();
  };
  listen(50ms);
  EXPECT_FALSE(versions || listed);
  EXPECT_FALSE(removed(0ms));  // a second remove is told "no such key" only then too
  (*self_)->send(held_, caf::ok_atom::value);
  EXPECT_TRUE(answered_within(testing::kWait));
  seen = located(testing::kWait);
  ASSERT_TRUE(seen);
  EXPECT_FALSE(seen->front().found());
  listen(testing::kWait);
  listen(testing::kWait);
  ASSERT_TRUE(versions && listed);
  EXPECT_EQ(*versions, std::vector<std::uint64_t>{0});
  EXPECT_TRUE(listed->empty());
  ASSERT_TRUE(removed(testing::kWait));
  EXPECT_EQ(internal::from_caf_error(*refused, "remove").code(), Errc::not_found);
}

// A volume's own commit (its fast_commit) that releases an object of that
// volume is answered at once: the volume hears of the release before the
// answer, and answers its client only then. A reader still waits for the
// volume's flush: until the volume dropped the old object, a reader told
// of the new one could be followed by one reading the old one from its
// cache.
TEST_F(HeldFlushTest, AVolumesOwnOverwriteAnswersAtOnceButReadersWaitForItsFlush) {
  ASSERT_OK(
      (ask<std::uint64_t>(*self_, controller_, protocol::notify_put_atom::value, on_held("k", 1))));
  auto own = ask<std::vector<std::uint64_t>>(
      *self_, held_, caf::actor_cast<caf::actor>(controller_), on_held("k", 2));
  ASSERT_OK(own);
  ASSERT_EQ(own->size(), 1u);
  // Its next overwrite of the key is answered at once too: the write
  // before it waits only for this volume, which relays the answer.
  auto again = ask<std::vector<std::uint64_t>>(
      *self_, held_, caf::actor_cast<caf::actor>(controller_), on_held("k", 3));
  ASSERT_OK(again);
  caf::scoped_actor reader{runtime_->system()};
  std::optional<std::vector<wire::KeyRecord>> seen;
  auto located = [&](std::chrono::milliseconds t) {
    reader->receive([&](std::vector<wire::KeyRecord>& r) { seen = std::move(r); },
                    caf::after(t) >> [] {});
    return seen.has_value();
  };
  reader->send(controller_, protocol::locate_atom::value, std::vector<std::string>{"k"});
  EXPECT_FALSE(located(300ms));
  (*self_)->send(held_, caf::ok_atom::value);
  ASSERT_TRUE(located(testing::kWait));
  ASSERT_TRUE(seen->front().found());
  EXPECT_EQ(seen->front().shards.front().object_id, 3u);
}

TEST_F(HeldFlushTest, AVolumeThatDiesBeforeConfirmingDoesNotHoldTheWriteUp) {
  ASSERT_OK(
      (ask<std::uint64_t>(*self_, controller_, protocol::notify_put_atom::value, on_held("k", 1))));
  (*self_)->send(controller_, protocol::remove_atom::value, std::string("k"));
  EXPECT_FALSE(answered_within(300ms));
  caf::anon_send_exit(held_, caf::exit_reason::kill);
  // Well before the 10 s a stuck (live) volume may take: its death ends the wait.
  EXPECT_TRUE(answered_within(std::chrono::milliseconds(5000)));
}

TEST_F(ControllerTest, VolumeStagesAllOrNothingWithinCapacity) {
  auto r = ask<std::vector<wire::RegionRef>>(
      *self_, volume_, protocol::stage_atom::value,
      std::vector<wire::StageRequest>{stage_req("a", 600 << 10), stage_req("b", 600 << 10)});
  EXPECT_ERROR(r, Errc::out_of_capacity, "volume 'volume-0' is full");
  EXPECT_EQ(stat().staged, 0u);
  EXPECT_EQ(stat().bytes_held, 0u);
}

TEST_F(ControllerTest, LeasePinsReleasedMemoryUntilClosed) {
  const std::uint64_t n = 2 * protocol::limits::kInlineBytes;  // large: read through a lease
  const auto id = stage(n);
  auto lease = ask<wire::ReadLease>(*self_, volume_, protocol::open_read_atom::value,
                                    std::vector<std::uint64_t>{id}, std::uint64_t{7}, false);
  ASSERT_OK(lease);
  EXPECT_NE(lease->lease_id, 0u);
  EXPECT_TRUE(lease->data.empty());
  (*self_)->send(volume_, protocol::release_atom::value, std::vector<std::uint64_t>{id});
  auto s = stat();
  EXPECT_EQ(s.staged + s.objects, 0u);
  EXPECT_EQ(s.bytes_held, n);  // still pinned by the lease
  EXPECT_ERROR((ask<wire::ReadLease>(*self_, volume_, protocol::open_read_atom::value,
                                     std::vector<std::uint64_t>{id}, std::uint64_t{8}, false)),
               Errc::not_found, "is gone");
  (*self_)->send(volume_, protocol::close_read_atom::value, lease->lease_id);
  EXPECT_EQ(stat().bytes_held, 0u);
}

TEST_F(ControllerTest, SmallObjectsTravelInsideTheControlMessages) {
  wire::StageRequest r = stage_req("small", 5);
  r.has_data = true;
  r.data = "hello";
  auto regions = ask<std::vector<wire::RegionRef>>(*self_, volume_, protocol::stage_atom::value,
                                                   std::vector<wire::StageRequest>{r});
  ASSERT_OK(regions);
  auto lease = ask<wire::ReadLease>(*self_, volume_, protocol::open_read_atom::value,
                                    std::vector<std::uint64_t>{regions->front().region_id},
                                    std::uint64_t{9}, false);
  ASSERT_OK(lease);
  EXPECT_EQ(lease->lease_id, 0u);  // nothing pinned
  EXPECT_EQ(lease->data, std::vector<std::string>{"hello"});
  EXPECT_EQ(stat().leases, 0u);
  r.data = "too long";
  EXPECT_ERROR((ask<std::vector<wire::RegionRef>>(*self_, volume_, protocol::stage_atom::value,
                                                  std::vector<wire::StageRequest>{r})),
               Errc::protocol_error, "inline data of 8 bytes for 5 announced");
}

}  // namespace
}  // namespace meshstore::controller

namespace meshstore::controller {
namespace {

// small_op: a channel's request in an actor message (the transports with
// no channel of their own), here a small put in one round trip.
class SmallOpMessageTest : public ControllerTest {
 protected:
  void SetUp() override {
    ControllerTest::SetUp();
    (*self_)
        ->request(volume_, 30s, protocol::small_attach_atom::value, kToken,
                  caf::actor_cast<caf::actor>(controller_))
        .receive([](caf::ok_atom) {}, [](caf::error& e) { FAIL() << to_string(e); });
  }
  // Sends a commit of one 4-float object for `rec`, its bytes inline,
  // retiring the state dicts under `retire`.
  Status commit(const wire::KeyRecord& rec, std::vector<std::uint64_t>* objects = nullptr,
                std::vector<std::string> retire = {}) {
    const std::string bytes(16, '\x01');
    protocol::fast_get::CommitRequest req;
    req.records = {rec};
    req.inlined = {std::string_view(bytes)};
    req.prefixes = std::move(retire);
    std::vector<std::byte> encoded;
    protocol::fast_get::encode_into(req, encoded);
    std::vector<char> framed(sizeof(kToken));
    std::memcpy(framed.data(), &kToken, sizeof(kToken));
    framed.insert(framed.end(), reinterpret_cast<const char*>(encoded.data()),
                  reinterpret_cast<const char*>(encoded.data()) + encoded.size());
    Status out = Status(Errc::internal, "no reply");
    (*self_)
        ->request(volume_, 30s, protocol::small_op_atom::value, framed)
        .receive(
            [&](std::vector<char>& reply) {
              const auto* b = reinterpret_cast<const std::byte*>(reply.data());
              bool refused = false;
              auto done = protocol::fast_get::decode_commit_reply(
                  std::vector<std::byte>(b, b + reply.size()), 1, 1, 0, &refused);
              if (!done.ok()) return (void)(out = done.status());
              out = Status();
              if (objects) *objects = {done->placed.front().object_id};
            },
            [&](caf::error& e) { out = internal::from_caf_error(e, "small_op"); });
    return out;
  }
  wire::VolumeStat stat() {
    wire::VolumeStat s;
    (*self_)
        ->request(volume_, 30s, protocol::stat_atom::value)
        .receive([&](wire::VolumeStat& v) { s = v; }, [](caf::error&) {});
    return s;
  }
  wire::KeyRecord record(const std::string& key, Shape covered) {
    wire::KeyRecord r;
    r.key = key;
    r.dtype = DType::float32;
    r.shape = {4};
    r.shards.push_back({TensorSlice::full(covered), "volume-0", 0, 16});
    return r;
  }
  static constexpr std::uint64_t kToken = 0x5eed;
};

TEST_F(SmallOpMessageTest, CommitsInOneCallAndNamesTheObject) {
  std::vector<std::uint64_t> objects;
  ASSERT_OK(commit(record("k", {4}), &objects));
  auto s = stat();
  EXPECT_EQ(s.objects, 1u);
  EXPECT_EQ(s.staged, 0u);
  std::vector<wire::KeyRecord> located;
  (*self_)
      ->request(controller_, 30s, protocol::locate_atom::value, std::vector<std::string>{"k"})
      .receive([&](std::vector<wire::KeyRecord>& r) { located = r; }, [](caf::error&) {});
  ASSERT_EQ(located.size(), 1u);
  ASSERT_TRUE(located[0].found());
  EXPECT_EQ(located[0].shards.front().volume_id, "volume-0");
  EXPECT_EQ(located[0].shards.front().object_id, objects.front());
}

// The commit is checked as input from another process (check_commit): a
// record naming another volume, or bytes its dtype and shape do not take,
// are refused before anything is staged; so is a request without the token
// of an attached client.
TEST_F(SmallOpMessageTest, AHostileRequestIsRefusedBeforeAnythingIsStaged) {
  auto elsewhere = record("k", {4});
  elsewhere.shards.front().volume_id = "volume-9";
  EXPECT_ERROR(commit(elsewhere), Errc::protocol_error, "not one object of volume");
  auto wrong = record("k", {4});
  wrong.shape = {5};
  wrong.shards.front().slice = TensorSlice::full({5});
  EXPECT_ERROR(commit(wrong), Errc::protocol_error, "16 bytes inline for shape");
  std::vector<char> untokened(4, '\0');
  std::string answer;
  (*self_)
      ->request(volume_, 30s, protocol::small_op_atom::value, untokened)
      .receive([&](std::vector<char>& r) { answer.assign(r.begin(), r.end()); },
               [](caf::error& e) { FAIL() << to_string(e); });
  EXPECT_NE(answer.find("without its token"), std::string::npos);
  auto s = stat();
  EXPECT_EQ(s.objects + s.staged, 0u);
  EXPECT_EQ(s.bytes_held, 0u);
}

TEST_F(SmallOpMessageTest, ControllerRefusalLeavesNothingStaged) {
  // The whole of another global shape (4 floats, as sent): the controller
  // refuses the record.
  EXPECT_ERROR(commit(record("k", {2, 2})), Errc::shape_mismatch, "not in global shape");
  // The refusal reached the volume before our reply did: nothing is left.
  auto s = stat();
  EXPECT_EQ(s.objects + s.staged, 0u);
  EXPECT_EQ(s.bytes_held, 0u);
}

// A version pointer's move (publish) retires the version that falls out in
// the same controller step: committed, the state dict named goes whole
// (its memory reused); refused, neither happens.
TEST_F(SmallOpMessageTest, ACommitRetiresTheStateDictsItNamesOrNothing) {
  auto member = [&](const std::string& key, const std::string& group) {
    auto r = record(key, {4});
    r.group = group;
    return r;
  };
  for (const char* key : {"w/v1", "w/v1/a", "w/v2", "w/v2/a"}) {
    const std::string k = key;
    ASSERT_OK(commit(member(k, k.substr(0, 4))));
  }
  auto keys = [&] {
    std::vector<std::string> out;
    (*self_)
        ->request(controller_, 30s, protocol::keys_atom::value, std::string())
        .receive([&](std::vector<std::string>& k) { out = k; }, [](caf::error&) {});
    return out;
  };
  auto pointer = record("w", {4});
  pointer.expect_version = 0;  // absent
  ASSERT_OK(commit(pointer, nullptr, {"w/v1"}));
  EXPECT_EQ(keys(), (std::vector<std::string>{"w", "w/v2", "w/v2/a"}));
  // Refused (the pointer moved on since): nothing retired, nothing staged.
  pointer.expect_version = 0;
  EXPECT_ERROR(commit(pointer, nullptr, {"w/v2"}), Errc::conflict, "another writer");
  EXPECT_EQ(keys(), (std::vector<std::string>{"w", "w/v2", "w/v2/a"}));
  EXPECT_EQ(stat().staged, 0u);
}

// -- streams: readers follow a state dict while its writer puts it ------------

namespace streams {

struct Subscribed {
  std::uint32_t kind = 99;
  std::string manifest;
  std::vector<wire::KeyRecord> records;
  std::vector<std::uint64_t> filled;
};

Subscribed subscribe(caf::scoped_actor& self, const protocol::controller_actor& c,
                     const std::string& key, std::uint64_t wait_ms) {
  Subscribed out;
  self->request(c, 30s, protocol::stream_subscribe_atom::value, key, wait_ms)
      .receive(
          [&](std::uint32_t kind, std::string& manifest, std::vector<wire::KeyRecord>& records,
              std::vector<std::uint64_t>& filled) {
            out = Subscribed{kind, std::move(manifest), std::move(records), std::move(filled)};
          },
          [&](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
  return out;
}

struct Event {
  std::vector<std::uint64_t> filled;
  std::uint32_t end = 99;
  std::string why;
};

// The next stream event this actor receives (a failure after 10 s).
Event next_event(caf::scoped_actor& self, const std::string& key) {
  Event out;
  self->receive(
      [&](protocol::stream_event_atom, const std::string& k, std::vector<std::uint64_t>& filled,
          std::uint32_t end, std::string& why) {
        EXPECT_EQ(k, key);
        out = Event{std::move(filled), end, std::move(why)};
      },
      caf::after(std::chrono::seconds(10)) >> [&] { ADD_FAILURE() << "no stream event"; });
  return out;
}

constexpr auto kCommitted = static_cast<std::uint32_t>(protocol::StreamEnd::committed);
constexpr auto kAborted = static_cast<std::uint32_t>(protocol::StreamEnd::aborted);
constexpr auto kNone = static_cast<std::uint32_t>(protocol::StreamEnd::none);

}  // namespace streams

TEST_F(ControllerTest, StreamReadersFollowProgressThenTheCommit) {
  using namespace streams;
  caf::scoped_actor writer{runtime_->system()}, reader{runtime_->system()};
  const auto a = stage(64), b = stage(64);
  std::vector<wire::KeyRecord> records{record("sd", {16}, a), record("sd/w", {16}, b)};
  writer->send(controller_, protocol::stream_open_atom::value, std::string("sd"),
               std::string("manifest"), records, std::vector<std::uint64_t>{0});
  auto sub = subscribe(reader, controller_, "sd", 0);
  ASSERT_EQ(sub.kind, static_cast<std::uint32_t>(protocol::StreamKind::streaming));
  EXPECT_EQ(sub.manifest, "manifest");
  ASSERT_EQ(sub.records.size(), 2u);
  EXPECT_EQ(sub.records[1].shards.front().object_id, b);
  EXPECT_EQ(sub.filled, (std::vector<std::uint64_t>{0}));

  writer->send(controller_, protocol::stream_progress_atom::value, std::string("sd"),
               std::vector<std::uint64_t>{1});
  auto e = next_event(reader, "sd");
  EXPECT_EQ(e.filled, (std::vector<std::uint64_t>{1}));
  EXPECT_EQ(e.end, kNone);

  // The commit ends the stream; a later subscriber reads it as committed.
  ASSERT_OK((ask<std::vector<std::uint64_t>>(writer, controller_, protocol::replace_atom::value,
                                             records, std::vector<std::string>{"sd"}, true)));
  EXPECT_EQ(next_event(reader, "sd").end, kCommitted);
  EXPECT_EQ(subscribe(reader, controller_, "sd", 0).kind,
            static_cast<std::uint32_t>(protocol::StreamKind::committed));
}

TEST_F(ControllerTest, StreamReadersLearnOfAbortsAndOfTheWritersDeath) {
  using namespace streams;
  caf::scoped_actor reader{runtime_->system()};
  std::vector<wire::KeyRecord> records{record("p", {16}, stage(64))};
  {
    caf::scoped_actor writer{runtime_->system()};
    writer->send(controller_, protocol::stream_open_atom::value, std::string("p"), std::string("m"),
                 records, std::vector<std::uint64_t>{});
    ASSERT_EQ(subscribe(reader, controller_, "p", 0).kind,
              static_cast<std::uint32_t>(protocol::StreamKind::streaming));
    // Only the stream's own writer may abort it.
    caf::anon_send(controller_, protocol::stream_abort_atom::value, std::string("p"),
                   std::string("forged"));
    writer->send(controller_, protocol::stream_abort_atom::value, std::string("p"),
                 std::string("transport_error: disk on fire"));
    auto e = next_event(reader, "p");
    EXPECT_EQ(e.end, kAborted);
    EXPECT_EQ(e.why, "transport_error: disk on fire");

    writer->send(controller_, protocol::stream_open_atom::value, std::string("p"), std::string("m"),
                 records, std::vector<std::uint64_t>{});
    ASSERT_EQ(subscribe(reader, controller_, "p", 0).kind,
              static_cast<std::uint32_t>(protocol::StreamKind::streaming));
  }  // the writer dies with its stream open
  auto e = next_event(reader, "p");
  EXPECT_EQ(e.end, kAborted);
  EXPECT_NE(e.why.find("its writer went down"), std::string::npos) << e.why;
  EXPECT_EQ(subscribe(reader, controller_, "p", 0).kind,
            static_cast<std::uint32_t>(protocol::StreamKind::absent));
}

TEST_F(ControllerTest, AWaitingSubscriberIsAnsweredByTheStreamTheCommitOrItsDeadline) {
  using namespace streams;
  caf::scoped_actor writer{runtime_->system()};
  // Nothing happens to "late" within the wait.
  EXPECT_EQ(subscribe(*self_, controller_, "late", 50).kind,
            static_cast<std::uint32_t>(protocol::StreamKind::absent));

  // A waiter is answered when the stream opens...
  std::vector<wire::KeyRecord> records{record("s", {16}, stage(64))};
  auto pending = (*self_)->request(controller_, 30s, protocol::stream_subscribe_atom::value,
                                   std::string("s"), std::uint64_t{20000});
  writer->send(controller_, protocol::stream_open_atom::value, std::string("s"), std::string("m"),
               records, std::vector<std::uint64_t>{});
  std::uint32_t kind = 99;
  pending.receive([&](std::uint32_t k, std::string&, std::vector<wire::KeyRecord>&,
                      std::vector<std::uint64_t>&) { kind = k; },
                  [&](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
  EXPECT_EQ(kind, static_cast<std::uint32_t>(protocol::StreamKind::streaming));

  // ... or when the key commits without a stream (a small put).
  auto pending2 = (*self_)->request(controller_, 30s, protocol::stream_subscribe_atom::value,
                                    std::string("plain"), std::uint64_t{20000});
  ASSERT_OK((ask<std::uint64_t>(writer, controller_, protocol::notify_put_atom::value,
                                record("plain", {4}, stage(16)))));
  kind = 99;
  pending2.receive([&](std::uint32_t k, std::string&, std::vector<wire::KeyRecord>&,
                       std::vector<std::uint64_t>&) { kind = k; },
                   [&](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
  EXPECT_EQ(kind, static_cast<std::uint32_t>(protocol::StreamKind::committed));
}

}  // namespace
}  // namespace meshstore::controller
