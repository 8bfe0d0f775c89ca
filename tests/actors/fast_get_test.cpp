// The volume end of the fast path's channels (docs/internals/data-path-small-ops.md,
// "The fast path for small gets and puts"): a volume attaches a client's
// shared-memory ring (ring_attach) or a tcp small-op session (small_attach)
// and answers gets of small committed objects on it from its own threads
// (protocol/fast_get.hpp), "stale" for anything it does not hold
// committed under that name, an error for a malformed request; puts and
// commits are checked as input from another process. Channels/VolumeEnd.*
// run over every channel (ring, tcp); FastGetTest.* are the ring's own: its
// segment truncated, one thread serving many rings, and the ring closed
// when the volume goes.
#include "meshstore/protocol/fast_get.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/protocol/actor_types.hpp"
#include "meshstore/protocol/controller_actor.hpp"
#include "meshstore/protocol/storage_volume_actor.hpp"
#include "meshstore/protocol/wire_glue.hpp"
#include "meshstore/transports/registry.hpp"
#include "meshstore/transports/shm/peer_memory.hpp"
#include "meshstore/transports/shm/ring.hpp"
#include "meshstore/transports/shm/shm_segment.hpp"
#include "meshstore/volume/volume.hpp"
#include "testing/ask.hpp"
#include "testing/pipe.hpp"
#include "testing/shm_resize.hpp"
#include "testing/test_util.hpp"

namespace meshstore::client {
namespace {

using namespace std::chrono_literals;
using transports::shm::Ring;

using testing::ask;

Ring::Deadline in(std::chrono::milliseconds d) { return std::chrono::steady_clock::now() + d; }

class FastGetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    internal::RuntimeOptions ro;
    ro.add_types = protocol::add_actor_types;
    runtime_ = internal::ActorRuntime::create(ro).value();
    volume::VolumeConfig vc;
    vc.volume_id = "volume-0";
    volume_ = volume::spawn_storage_volume(runtime_->system(), vc).value();
    self_ = std::make_unique<caf::scoped_actor>(runtime_->system());
    auto ring = Ring::create({});
    ASSERT_OK(ring);
    ring_ = std::move(ring).value();
  }
  void TearDown() override {
    tcp_.reset();
    tcp_transport_.reset();
    ring_.reset();
    if (volume_) caf::anon_send_exit(volume_, caf::exit_reason::user_shutdown);
    self_.reset();
    volume_ = nullptr;
    runtime_.reset();
  }

  // Stages `key` with `bytes` inline; answers its object id.
  std::uint64_t stage(const std::string& key, const std::string& bytes) {
    wire::StageRequest r;
    r.key = key;
    r.nbytes = bytes.size();
    r.has_data = true;
    r.data = bytes;
    auto refs = ask<std::vector<wire::RegionRef>>(*self_, volume_, protocol::stage_atom::value,
                                                  std::vector<wire::StageRequest>{r});
    EXPECT_OK(refs);
    return refs.ok() ? refs->front().region_id : 0;
  }
  // Sends `atom` for `id` as the controller would, then waits until the
  // volume handled it (a request from the same sender comes after it).
  template <class Atom>
  void verdict(Atom atom, std::uint64_t id) {
    if constexpr (std::is_same_v<Atom, protocol::commit_atom>) {
      (*self_)->send(volume_, atom, std::vector<std::uint64_t>{id}, std::vector<wire::KeyRecord>{});
    } else {
      (*self_)->send(volume_, atom, std::vector<std::uint64_t>{id});
    }
    ASSERT_OK((ask<wire::VolumeStat>(*self_, volume_, protocol::stat_atom::value)));
  }
  // Attaches `ring` (ring_ by default) to the volume, its puts committed
  // at `controller`; the ring then rings the volume's doorbell. Over tcp
  // (over_tcp_), attaches a session token and opens tcp's small-op
  // connection to the volume instead; over actor messages (over_actors_),
  // attaches the token and sends each request as small_op.
  Status attach(Ring* ring = nullptr, const caf::actor& controller = caf::actor()) {
    if (over_tcp_ && !ring) return attach_tcp(controller);
    if (over_actors_ && !ring) {
      // The channel of a transport without one of its own: small_op
      // messages under a token attached as for tcp.
      auto ok = ask<caf::ok_atom>(*self_, volume_, protocol::small_attach_atom::value, kToken,
                                  controller);
      if (ok.ok()) attached_actors_ = true;
      return ok.ok() ? Status() : ok.status();
    }
    if (!ring) ring = ring_.get();
    auto bell = ask<std::string>(*self_, volume_, protocol::ring_attach_atom::value, ring->name(),
                                 static_cast<std::int32_t>(getpid()), controller);
    if (!bell.ok()) return bell.status();
    auto opened = transports::shm::Doorbell::open(*bell);
    if (!opened.ok()) return opened.status();
    ring->use_doorbell(std::move(opened).value());
    return Status();
  }
  Status attach_tcp(const caf::actor& controller) {
    auto ok =
        ask<caf::ok_atom>(*self_, volume_, protocol::small_attach_atom::value, kToken, controller);
    if (!ok.ok()) return ok.status();
    auto endpoints = ask<std::vector<transports::EndpointInfo>>(*self_, volume_,
                                                                protocol::endpoints_atom::value);
    if (!endpoints.ok()) return endpoints.status();
    auto tcp = std::find_if(endpoints->begin(), endpoints->end(),
                            [](const auto& e) { return e.transport == "tcp"; });
    if (tcp == endpoints->end()) return Status(Errc::not_found, "the volume offers no tcp");
    auto factory = transports::builtin_registry().find("tcp");
    if (!factory.ok()) return factory.status();
    transports::ClientContext context;
    context.system = &runtime_->system();
    auto transport = factory->make_client(context, *tcp);
    if (!transport.ok()) return transport.status();
    tcp_transport_ = std::move(transport).value();
    auto ops = tcp_transport_->open_small_ops();
    if (!ops.ok()) return ops.status();
    tcp_ = std::move(ops).value();
    return Status();
  }
  // Sends request `bytes` over the channel (ring_, or `ring`; tcp_ when
  // attached) and answers the reply's bytes.
  Result<std::vector<std::byte>> exchange(const std::vector<std::byte>& bytes,
                                          Ring* ring = nullptr) {
    if ((tcp_ || attached_actors_) && !ring) {
      std::vector<std::byte> framed(sizeof kToken);
      std::memcpy(framed.data(), &kToken, sizeof kToken);
      framed.insert(framed.end(), bytes.begin(), bytes.end());
      if (tcp_) return tcp_->exchange(framed.data(), framed.size(), in(10s));
      const auto* p = reinterpret_cast<const char*>(framed.data());
      auto reply = ask<std::vector<char>>(*self_, volume_, protocol::small_op_atom::value,
                                          std::vector<char>(p, p + framed.size()));
      if (!reply.ok()) return reply.status();
      const auto* b = reinterpret_cast<const std::byte*>(reply->data());
      return std::vector<std::byte>(b, b + reply->size());
    }
    if (!ring) ring = ring_.get();
    MESHSTORE_RETURN_IF_ERROR(ring->send(7, bytes.data(), bytes.size(), in(10s)));
    auto m = ring->receive(in(10s));
    if (!m.ok()) return m.status();
    EXPECT_EQ(m->tag, 7u);
    return std::move(m->bytes);
  }
  // A get of object `id` named `key` over the channel (or `ring`).
  Result<protocol::fast_get::Reply> get(std::uint64_t id, const std::string& key,
                                        Ring* ring = nullptr) {
    auto m = exchange(protocol::fast_get::encode(protocol::fast_get::Request{id, key}), ring);
    if (!m.ok()) return m.status();
    return protocol::fast_get::decode_reply(*m);
  }

  // Sends a put of one object whose bytes come inline (inline_put) over
  // the channel: the volume's verdict.
  Status send_put(const std::vector<std::byte>& request) {
    auto done = exchange_commit(request, 1, 0, nullptr, 1);
    return done.ok() ? Status() : done.status();
  }
  // Sends commit request `bytes` (of `records` records and `stages`
  // objects to stage) over the channel: what the volume did
  // (`*refused`: a well-formed refusal).
  Result<protocol::fast_get::CommitDone> exchange_commit(const std::vector<std::byte>& bytes,
                                                         std::size_t records, std::size_t stages,
                                                         bool* refused = nullptr,
                                                         std::size_t inlined = 0) {
    auto m = exchange(bytes);
    if (!m.ok()) return m.status();
    bool was_refused = false;
    auto done = protocol::fast_get::decode_commit_reply(*m, records, inlined, stages, &was_refused);
    if (refused) *refused = was_refused;
    return done;
  }
  Status send_commit(const std::vector<std::byte>& bytes, std::size_t records,
                     bool* refused = nullptr) {
    auto done = exchange_commit(bytes, records, 0, refused);
    return done.ok() ? Status() : done.status();
  }
  static constexpr std::uint64_t kToken = 0x5eed5eed5eed5eedULL;
  std::unique_ptr<internal::ActorRuntime> runtime_;
  protocol::storage_volume_actor volume_;
  std::unique_ptr<caf::scoped_actor> self_;
  std::unique_ptr<Ring> ring_;
  bool over_tcp_ = false;
  bool over_actors_ = false;      // the channel is small_op messages
  bool attached_actors_ = false;  // ... and its token is attached
  std::unique_ptr<transports::Transport> tcp_transport_;
  std::unique_ptr<transports::SmallOps> tcp_;
};

// The same volume end over each channel: "ring" or "tcp".
class VolumeEnd : public FastGetTest, public ::testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override {
    FastGetTest::SetUp();
    over_tcp_ = std::string(GetParam()) == "tcp";
    over_actors_ = std::string(GetParam()) == "actors";
  }
};

std::string text(const std::vector<std::byte>& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// A commit request that puts one object of `n` bytes at `data` inline
// (the volume stages it), as key `key` of `dtype` and `shape` on `volume`.
std::vector<std::byte> inline_put(const std::string& key, DType dtype, const Shape& shape,
                                  const void* data, std::size_t n,
                                  const std::string& volume = "volume-0") {
  wire::KeyRecord r;
  r.key = key;
  r.dtype = dtype;
  r.shape = shape;
  TensorSlice whole;
  if (std::all_of(shape.begin(), shape.end(), [](std::int64_t d) { return d >= 0; })) {
    whole = TensorSlice::full(shape);
  }
  r.shards.push_back(wire::ShardRecord{whole, volume, 0, n});
  protocol::fast_get::CommitRequest req;
  req.records = {r};
  req.inlined = {std::string_view(static_cast<const char*>(data), n)};
  std::vector<std::byte> bytes;
  protocol::fast_get::encode_into(req, bytes);
  return bytes;
}

TEST_P(VolumeEnd, ACommittedSmallObjectIsServed) {
  const std::string value(3000, 'v');
  const auto id = stage("weights/step", value);
  verdict(protocol::commit_atom::value, id);
  ASSERT_OK(attach());
  for (int i = 0; i < 100; ++i) {
    auto r = get(id, "weights/step");
    ASSERT_OK(r);
    ASSERT_EQ(r->status, protocol::fast_get::ReplyStatus::ok);
    EXPECT_EQ(text(r->bytes), value);
  }
}

TEST_P(VolumeEnd, WhatTheVolumeDoesNotHoldCommittedUnderThatNameIsStale) {
  const auto staged = stage("k", "staged, not committed");
  const auto committed = stage("k2", "committed");
  verdict(protocol::commit_atom::value, committed);
  ASSERT_OK(attach());
  auto r = get(staged, "k");
  ASSERT_OK(r);
  EXPECT_EQ(r->status, protocol::fast_get::ReplyStatus::stale) << "an uncommitted object";
  r = get(committed, "another key");
  ASSERT_OK(r);
  EXPECT_EQ(r->status, protocol::fast_get::ReplyStatus::stale) << "a cached id under another name";
  r = get(committed + 1000, "k2");
  ASSERT_OK(r);
  EXPECT_EQ(r->status, protocol::fast_get::ReplyStatus::stale) << "an id never staged";
  // Replaced: the controller releases the old object, and a get of it is
  // stale (the client then locates again), never the old bytes.
  verdict(protocol::release_atom::value, committed);
  r = get(committed, "k2");
  ASSERT_OK(r);
  EXPECT_EQ(r->status, protocol::fast_get::ReplyStatus::stale);
}

// A check (a get too large for one message, read next with the
// transport's bulk read) says whether the object is still committed under
// its key, with no bytes, on the same terms as a get.
TEST_P(VolumeEnd, ACheckSaysWhetherAnObjectIsCommittedUnderItsNameWithoutItsBytes) {
  const auto staged = stage("k", "staged, not committed");
  const auto committed = stage("k2", "committed");
  verdict(protocol::commit_atom::value, committed);
  ASSERT_OK(attach());
  auto check = [&](std::uint64_t id, const std::string& key) {
    protocol::fast_get::Request req{id, key, true};
    auto bytes = protocol::fast_get::encode(req);
    auto decoded = protocol::fast_get::decode_request(bytes);
    EXPECT_OK(decoded);
    EXPECT_TRUE(decoded.ok() && decoded->check) << "not a check once decoded";
    auto m = exchange(bytes);
    return m.ok() ? protocol::fast_get::decode_reply(*m)
                  : Result<protocol::fast_get::Reply>(m.status());
  };
  auto r = check(committed, "k2");
  ASSERT_OK(r);
  EXPECT_EQ(r->status, protocol::fast_get::ReplyStatus::ok);
  EXPECT_TRUE(r->bytes.empty()) << "a check carries no bytes";
  for (const auto& [id, key] : std::vector<std::pair<std::uint64_t, std::string>>{
           {staged, "k"}, {committed, "another key"}, {committed + 1000, "k2"}}) {
    r = check(id, key);
    ASSERT_OK(r);
    EXPECT_EQ(r->status, protocol::fast_get::ReplyStatus::stale) << id << " " << key;
  }
  verdict(protocol::release_atom::value, committed);  // replaced
  r = check(committed, "k2");
  ASSERT_OK(r);
  EXPECT_EQ(r->status, protocol::fast_get::ReplyStatus::stale) << "released, yet current";
}

TEST_P(VolumeEnd, AMalformedRequestGetsAnErrorAndTheChannelKeepsServing) {
  const auto id = stage("k", "value");
  verdict(protocol::commit_atom::value, id);
  ASSERT_OK(attach());
  const std::string garbage = "this is not a request at all";
  auto m = exchange(
      std::vector<std::byte>(reinterpret_cast<const std::byte*>(garbage.data()),
                             reinterpret_cast<const std::byte*>(garbage.data()) + garbage.size()));
  ASSERT_OK(m);
  auto r = protocol::fast_get::decode_reply(*m);
  ASSERT_OK(r);
  EXPECT_EQ(r->status, protocol::fast_get::ReplyStatus::error);
  EXPECT_NE(text(r->bytes).find("bad magic"), std::string::npos) << text(r->bytes);
  auto good = get(id, "k");
  ASSERT_OK(good);
  EXPECT_EQ(good->status, protocol::fast_get::ReplyStatus::ok);
  EXPECT_EQ(text(good->bytes), "value");
}

// Puts on a channel are input from another process too: a hostile one is
// refused with the reason (protocol_error), stores nothing, and the
// channel keeps serving. This volume was attached without a controller,
// so even a well-formed put is refused, naming that.
TEST_P(VolumeEnd, HostileInlinePutsAreRefusedAndStoreNothing) {
  const auto id = stage("k", "value");
  verdict(protocol::commit_atom::value, id);
  ASSERT_OK(attach());
  const float four[4] = {1, 2, 3, 4};
  auto put = [&](const std::string& key, DType dtype, const Shape& shape) {
    return send_put(inline_put(key, dtype, shape, four, sizeof four));
  };
  EXPECT_ERROR(put(std::string("a\0b", 3), DType::float32, {4}), Errc::protocol_error, "NUL");
  EXPECT_ERROR(put("neg", DType::float32, {-2, -2}), Errc::protocol_error, "negative dimension");
  EXPECT_ERROR(put("size", DType::float32, {5}), Errc::protocol_error, "16 bytes inline for shape");
  EXPECT_ERROR(put("huge", DType::float32, {std::int64_t{1} << 62, 4}), Errc::protocol_error,
               "bytes inline for shape");
  EXPECT_ERROR(send_put(inline_put("elsewhere", DType::float32, {4}, four, 16, "volume-9")),
               Errc::protocol_error, "not one object of volume");
  EXPECT_ERROR(put("fine", DType::float32, {4}), Errc::unavailable, "controller");
  auto stat = ask<wire::VolumeStat>(*self_, volume_, protocol::stat_atom::value);
  ASSERT_OK(stat);
  EXPECT_EQ(stat->objects, 1u);  // "k" alone: nothing staged or kept
  EXPECT_EQ(stat->staged, 0u);
  auto good = get(id, "k");
  ASSERT_OK(good);
  EXPECT_EQ(text(good->bytes), "value");
}

// A request over a channel stages objects for its client (the next
// put's, or this one's) and gives them back: each staged object comes with
// the place its client writes it at, and counts as staged until given back.
TEST_P(VolumeEnd, AChannelStagesObjectsForItsClientAndTakesThemBack) {
  ASSERT_OK(attach());
  protocol::fast_get::CommitRequest req;
  req.stage = {{"sd", 64}, {"sd#packed", 256 << 10}};
  std::vector<std::byte> bytes;
  protocol::fast_get::encode_into(req, bytes);
  auto done = exchange_commit(bytes, 0, 2);
  ASSERT_OK(done);
  EXPECT_TRUE(done->versions.empty());
  ASSERT_EQ(done->staged.size(), 2u);
  EXPECT_EQ(done->staged[1].nbytes, 256u << 10);
  for (const auto& r : done->staged) EXPECT_FALSE(r.described.at("shm").empty());
  auto stat = ask<wire::VolumeStat>(*self_, volume_, protocol::stat_atom::value);
  ASSERT_OK(stat);
  EXPECT_EQ(stat->staged, 2u);
  protocol::fast_get::CommitRequest give;
  for (const auto& r : done->staged) give.release.push_back(r.region_id);
  protocol::fast_get::encode_into(give, bytes);
  ASSERT_OK(exchange_commit(bytes, 0, 0));
  stat = ask<wire::VolumeStat>(*self_, volume_, protocol::stat_atom::value);
  ASSERT_OK(stat);
  EXPECT_EQ(stat->staged, 0u);
  // Given back once: a second time they are no objects of this client's.
  EXPECT_ERROR(send_commit(bytes, 0), Errc::protocol_error, "to give back is no object");
}

// A commit sent again with its id (its client's channel failed with the
// first on its way: FastPath::commit) is answered what the first was, and
// not done again; another id is another commit.
TEST_P(VolumeEnd, ACommitSentAgainWithItsIdIsDoneOnce) {
  ASSERT_OK(attach());
  protocol::fast_get::CommitRequest req;
  req.stage = {{"sd", 64}, {"sd#packed", 4096}};
  req.id = 0x1d1d;
  std::vector<std::byte> bytes;
  protocol::fast_get::encode_into(req, bytes);
  auto first = exchange_commit(bytes, 0, 2);
  ASSERT_OK(first);
  ASSERT_EQ(first->staged.size(), 2u);
  auto again = exchange_commit(bytes, 0, 2);
  ASSERT_OK(again);
  ASSERT_EQ(again->staged.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(again->staged[i].region_id, first->staged[i].region_id);
  }
  auto stat = ask<wire::VolumeStat>(*self_, volume_, protocol::stat_atom::value);
  ASSERT_OK(stat);
  EXPECT_EQ(stat->staged, 2u) << "the commit sent again was done again";
  req.id = 0x1d1e;
  protocol::fast_get::encode_into(req, bytes);
  auto other = exchange_commit(bytes, 0, 2);
  ASSERT_OK(other);
  ASSERT_EQ(other->staged.size(), 2u);
  EXPECT_NE(other->staged[0].region_id, first->staged[0].region_id);
  stat = ask<wire::VolumeStat>(*self_, volume_, protocol::stat_atom::value);
  ASSERT_OK(stat);
  EXPECT_EQ(stat->staged, 4u);
}

// A commit over a channel (a state dict put on its caller's thread:
// docs/internals/data-path-small-ops.md) is input from another process: the
// volume refuses one that does not decode, one naming another volume's
// object, an object that is not staged here by the channel's client, already
// committed, or of another size, and commits (and gives back) nothing of
// them. A good one goes to the controller (none here: unavailable).
TEST_P(VolumeEnd, HostileCommitsAreRefusedAndCommitNothing) {
  const auto committed = stage("k", "value");
  verdict(protocol::commit_atom::value, committed);
  const auto staged = stage("sd/x", "staged");
  ASSERT_OK(attach());
  auto request = [](std::uint64_t id, std::uint64_t nbytes, const std::string& volume) {
    protocol::fast_get::CommitRequest req;
    wire::KeyRecord r;
    r.key = "sd/x";
    r.dtype = DType::uint8;
    r.shape = {static_cast<std::int64_t>(nbytes)};
    r.shards.push_back(wire::ShardRecord{TensorSlice::full(r.shape), volume, id, nbytes});
    req.records.push_back(r);
    req.prefixes = {"sd"};
    std::vector<std::byte> bytes;
    protocol::fast_get::encode_into(req, bytes);
    return bytes;
  };
  bool refused = false;
  EXPECT_ERROR(send_commit(request(staged, 6, "volume-1"), 1, &refused), Errc::protocol_error,
               "not one object of volume 'volume-0'");
  EXPECT_TRUE(refused);
  EXPECT_ERROR(send_commit(request(12345, 6, "volume-0"), 1), Errc::protocol_error,
               "no object of that size its client staged here");
  EXPECT_ERROR(send_commit(request(committed, 5, "volume-0"), 1), Errc::protocol_error,
               "no object of that size");
  EXPECT_ERROR(send_commit(request(staged, 7, "volume-0"), 1), Errc::protocol_error,
               "no object of that size");
  // Fields that lie about their lengths or counts.
  auto lying = request(staged, 6, "volume-0");
  const std::uint32_t huge = 1u << 30;
  std::memcpy(lying.data() + 24, &huge, 4);
  EXPECT_ERROR(send_commit(lying, 1), Errc::protocol_error, "a commit field of");
  auto none = request(staged, 6, "volume-0");
  const std::uint32_t zero = 0;
  std::memcpy(none.data() + 4, &zero, 4);
  EXPECT_ERROR(send_commit(none, 1), Errc::protocol_error, "a commit of 0 records under 1");
  auto cut = request(staged, 6, "volume-0");
  cut.resize(cut.size() - 1);
  EXPECT_ERROR(send_commit(cut, 1), Errc::protocol_error, "commit");
  // Objects to give back that are not this client's staged ones: nothing
  // goes, not even the good one beside them.
  for (std::uint64_t bad : {committed, std::uint64_t{12345}}) {
    protocol::fast_get::CommitRequest give;
    give.release = {staged, bad};
    std::vector<std::byte> bytes;
    protocol::fast_get::encode_into(give, bytes);
    EXPECT_ERROR(send_commit(bytes, 0), Errc::protocol_error, "to give back is no object");
  }
  // Well formed, its object staged here by this ring's client: the
  // controller's to commit, and there is none here.
  EXPECT_ERROR(send_commit(request(staged, 6, "volume-0"), 1), Errc::unavailable, "controller");
  auto stat = ask<wire::VolumeStat>(*self_, volume_, protocol::stat_atom::value);
  ASSERT_OK(stat);
  EXPECT_EQ(stat->objects, 1u);  // "k"
  EXPECT_EQ(stat->staged, 1u);   // "sd/x", still staged: nothing committed
  auto good = get(committed, "k");
  ASSERT_OK(good);
  EXPECT_EQ(text(good->bytes), "value");
}

// A request larger than one message of its channel (a ring slot, a tcp
// small op of 1 MiB) travels in parts, and a reply larger than one comes
// back in parts: 16,384 objects staged in one request (2.3 MiB of it) are
// all staged, named in one reply (more than a message too), and given
// back in one request.
TEST_P(VolumeEnd, ARequestLargerThanAMessageAndItsReplyTravelInParts) {
  ASSERT_OK(attach());
  const std::size_t message = over_tcp_ || over_actors_
                                  ? transports::kMaxSmallOpBytes - sizeof kToken
                                  : ring_->slot_bytes();
  std::size_t messages = 0;
  auto one = [&](const std::byte* p, std::size_t n, bool* sent) {
    ++messages;
    if (sent) *sent = true;
    return exchange(std::vector<std::byte>(p, p + n));
  };
  protocol::fast_get::CommitRequest req;
  for (int i = 0; i < 16384; ++i) {
    req.stage.push_back({std::string(120, 'k') + std::to_string(i), 1 + std::uint64_t(i % 7)});
  }
  std::vector<std::byte> bytes;
  protocol::fast_get::encode_into(req, bytes);
  ASSERT_GT(bytes.size(), message);
  bool sent = false;
  auto reply =
      protocol::fast_get::exchange_in_parts(bytes.data(), bytes.size(), message, one, &sent);
  ASSERT_OK(reply);
  EXPECT_TRUE(sent);
  ASSERT_GT(reply->size(), message);
  EXPECT_GT(messages, (bytes.size() + message - 1) / message) << "the reply came in one part";
  bool refused = false;
  auto done = protocol::fast_get::decode_commit_reply(*reply, 0, 0, req.stage.size(), &refused);
  ASSERT_OK(done);
  ASSERT_EQ(done->staged.size(), req.stage.size());
  for (std::size_t i = 0; i < req.stage.size(); ++i) {
    EXPECT_EQ(done->staged[i].nbytes, req.stage[i].nbytes) << i;
  }
  auto stat = ask<wire::VolumeStat>(*self_, volume_, protocol::stat_atom::value);
  ASSERT_OK(stat);
  EXPECT_EQ(stat->staged, req.stage.size());
  protocol::fast_get::CommitRequest give;
  for (const auto& r : done->staged) give.release.push_back(r.region_id);
  protocol::fast_get::encode_into(give, bytes);
  reply = protocol::fast_get::exchange_in_parts(bytes.data(), bytes.size(), message, one);
  ASSERT_OK(reply);
  ASSERT_OK(protocol::fast_get::decode_commit_reply(*reply, 0, 0, 0, &refused));
  stat = ask<wire::VolumeStat>(*self_, volume_, protocol::stat_atom::value);
  ASSERT_OK(stat);
  EXPECT_EQ(stat->staged, 0u);
  // Parts that do not fit together are refused, and the channel serves on:
  // a fetch with no reply to fetch, unknown flags, a fetch carrying bytes.
  auto part = [](std::uint32_t flags, std::size_t n) {
    std::vector<std::byte> p(protocol::fast_get::kPartHeaderBytes + n, std::byte{'x'});
    std::memcpy(p.data(), &protocol::fast_get::kPartMagic, 4);
    std::memcpy(p.data() + 4, &flags, 4);
    return p;
  };
  for (const auto& [bad, why] : std::vector<std::pair<std::vector<std::byte>, std::string>>{
           {part(protocol::fast_get::kPartFetch, 0), "a fetch with no reply to fetch"},
           {part(64, 4), "a part's unknown flags"},
           {part(protocol::fast_get::kPartFetch, 4), "a fetch that is also a part"},
           {part(protocol::fast_get::kPartFirst | protocol::fast_get::kPartLast, 3), "commit"}}) {
    auto m = exchange(bad);
    ASSERT_OK(m);
    EXPECT_ERROR(protocol::fast_get::decode_commit_reply(*m, 0, 0, 0, &refused),
                 Errc::protocol_error, why);
  }
  const auto id = stage("k", "value");
  verdict(protocol::commit_atom::value, id);
  auto good = get(id, "k");
  ASSERT_OK(good);
  EXPECT_EQ(text(good->bytes), "value");
}

INSTANTIATE_TEST_SUITE_P(Channels, VolumeEnd, ::testing::Values("ring", "tcp", "actors"),
                         [](const auto& info) { return std::string(info.param); });

// The parts codec on its own, both ends in this process: a request of
// 1,000 bytes over 64-byte messages arrives whole, and its reply of 5,000
// bytes comes back whole; a request over fast_get::kMaxAssembledBytes is
// not sent, and parts that would assemble to more are refused, leaving the
// assembly ready for the next request; a reply abandoned part way goes at
// the next answer.
TEST_F(FastGetTest, PartsAssembleWholeRequestsAndRepliesWithinABound) {
  protocol::fast_get::PartAssembly volume;
  std::vector<std::byte> served;
  std::vector<std::byte> answer(5000);
  for (std::size_t i = 0; i < answer.size(); ++i) answer[i] = std::byte(i * 7);
  std::size_t messages = 0;
  auto one = [&](const std::byte* p, std::size_t n, bool* sent) -> Result<std::vector<std::byte>> {
    ++messages;
    if (sent) *sent = true;
    EXPECT_LE(n, 64u);
    std::vector<std::byte> bytes(p, p + n);
    auto magic = protocol::fast_get::request_magic(bytes);
    if (!magic.ok() || *magic != protocol::fast_get::kPartMagic) {
      served = bytes;
      return volume.first_part(answer, 64);
    }
    std::vector<std::byte> whole;
    if (auto reply = volume.take(bytes, &whole)) return *reply;
    served = whole;
    return volume.first_part(answer, 64);
  };
  std::vector<std::byte> request(1000);
  for (std::size_t i = 0; i < request.size(); ++i) request[i] = std::byte(i * 13);
  bool sent = false;
  auto reply =
      protocol::fast_get::exchange_in_parts(request.data(), request.size(), 64, one, &sent);
  ASSERT_OK(reply);
  EXPECT_TRUE(sent);
  EXPECT_EQ(served, request);
  EXPECT_EQ(*reply, answer);
  EXPECT_EQ(messages, (1000 + 55) / 56 + (5000 + 55) / 56 - 1);
  // Small enough for one message: sent as it is, answered as it is.
  messages = 0;
  answer.resize(20);
  reply = protocol::fast_get::exchange_in_parts(request.data(), 30, 64, one, &sent);
  ASSERT_OK(reply);
  EXPECT_EQ(messages, 1u);
  EXPECT_EQ(served, std::vector<std::byte>(request.begin(), request.begin() + 30));
  EXPECT_EQ(*reply, answer);
  // Over the bound: nothing sent.
  messages = 0;
  std::vector<std::byte> huge(protocol::fast_get::kMaxAssembledBytes + 1);
  EXPECT_ERROR(protocol::fast_get::exchange_in_parts(huge.data(), huge.size(), 1 << 20, one, &sent),
               Errc::unsupported, "over the");
  EXPECT_FALSE(sent);
  EXPECT_EQ(messages, 0u);
  // Parts that assemble to more: refused, and the next request is whole.
  auto part = [](std::uint32_t flags, std::size_t n) {
    std::vector<std::byte> p(protocol::fast_get::kPartHeaderBytes + n);
    std::memcpy(p.data(), &protocol::fast_get::kPartMagic, 4);
    std::memcpy(p.data() + 4, &flags, 4);
    return p;
  };
  std::vector<std::byte> whole;
  auto r = volume.take(
      part(protocol::fast_get::kPartFirst, protocol::fast_get::kMaxAssembledBytes - 10), &whole);
  ASSERT_TRUE(r);
  EXPECT_EQ(protocol::fast_get::decode_reply(*r)->status, protocol::fast_get::ReplyStatus::ok);
  r = volume.take(part(protocol::fast_get::kPartLast, 11), &whole);
  ASSERT_TRUE(r);
  bool refused = false;
  EXPECT_ERROR(protocol::fast_get::decode_commit_reply(*r, 0, 0, 0, &refused), Errc::protocol_error,
               "in parts");
  EXPECT_FALSE(
      volume.take(part(protocol::fast_get::kPartFirst | protocol::fast_get::kPartLast, 5), &whole));
  EXPECT_EQ(whole.size(), 5u);
  // A reply in parts its client gave up on after the first part is not
  // kept past the next answer: a fetch then finds nothing.
  EXPECT_EQ(volume.first_part(std::vector<std::byte>(5000), 64).size(), 64u);
  EXPECT_EQ(volume.first_part(std::vector<std::byte>(10), 64).size(), 10u);
  r = volume.take(part(protocol::fast_get::kPartFetch, 0), &whole);
  ASSERT_TRUE(r);
  EXPECT_ERROR(protocol::fast_get::decode_commit_reply(*r, 0, 0, 0, &refused), Errc::protocol_error,
               "no reply to fetch");
}

TEST_F(FastGetTest, TheCommitCodecRoundTripsAndRefusesWhatItCannotTrust) {
  protocol::fast_get::CommitRequest req;
  for (int i = 0; i < 3; ++i) {
    wire::KeyRecord r;
    r.key = "sd/" + std::to_string(i);
    r.dtype = DType::float32;
    r.shape = {4, i + 1};
    r.group = "sd";
    r.shards.push_back(
        wire::ShardRecord{TensorSlice::full(r.shape), "v", 10u + i, 16u * (i + 1), 1, 0, "place"});
    req.records.push_back(r);
  }
  // The second record's object comes inline.
  const std::string inline_bytes(32, 'i');
  req.records[1].shards[0].object_id = 0;
  req.inlined = {std::nullopt, std::string_view(inline_bytes), std::nullopt};
  req.prefixes = {"sd"};
  req.release = {41, 42};
  req.stage = {{"sd", 100}, {"sd#packed", 1 << 20, 2}};  // the second on the volume's GPU 2
  std::vector<std::byte> bytes;
  protocol::fast_get::encode_into(req, bytes);
  auto back = protocol::fast_get::decode_commit(bytes);
  ASSERT_OK(back);
  ASSERT_EQ(back->records.size(), 3u);
  ASSERT_EQ(back->inlined.size(), 3u);
  EXPECT_FALSE(back->inlined[0]);
  ASSERT_TRUE(back->inlined[1]);
  EXPECT_EQ(*back->inlined[1], inline_bytes);
  EXPECT_FALSE(back->inlined[2]);
  EXPECT_EQ(back->prefixes, req.prefixes);
  EXPECT_EQ(back->release, req.release);
  EXPECT_EQ(back->stage, req.stage);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back->records[i].key, req.records[i].key);
    EXPECT_EQ(back->records[i].shape, req.records[i].shape);
    EXPECT_EQ(back->records[i].shards.at(0).object_id, req.records[i].shards[0].object_id);
    EXPECT_EQ(back->records[i].shards.at(0).place, "place");
  }
  EXPECT_EQ(back->id, 0u);  // not identified
  // An identified commit carries its id; the flag with id 0 is refused.
  protocol::fast_get::CommitRequest identified = req;
  identified.id = 0xfeedf00d12345678ULL;
  std::vector<std::byte> id_bytes;
  protocol::fast_get::encode_into(identified, id_bytes);
  auto with_id = protocol::fast_get::decode_commit(id_bytes);
  ASSERT_OK(with_id);
  EXPECT_EQ(with_id->id, identified.id);
  EXPECT_EQ(with_id->records.size(), 3u);
  EXPECT_EQ(with_id->stage, req.stage);
  std::memset(id_bytes.data() + 24, 0, 8);
  EXPECT_ERROR(protocol::fast_get::decode_commit(id_bytes), Errc::protocol_error,
               "identified as 0");
  protocol::fast_get::CommitRequest odd_device;
  odd_device.stage = {{"x", 8, -2}};
  std::vector<std::byte> odd_bytes;
  protocol::fast_get::encode_into(odd_device, odd_bytes);
  EXPECT_ERROR(protocol::fast_get::decode_commit(odd_bytes), Errc::protocol_error,
               "a stage on device -2");
  auto trailing = bytes;
  trailing.push_back(std::byte{0});
  EXPECT_ERROR(protocol::fast_get::decode_commit(trailing), Errc::protocol_error,
               "where its fields end");
  // The first record's flags follow its encoding: an unknown flag, or an
  // object inline larger than a request may carry, is refused.
  const std::size_t flags_at = 24 + 4 + wire::encode(req.records[0]).size();
  auto unknown = bytes;
  const std::uint32_t two = 2;
  std::memcpy(unknown.data() + flags_at, &two, 4);
  EXPECT_ERROR(protocol::fast_get::decode_commit(unknown), Errc::protocol_error, "unknown flags");
  protocol::fast_get::CommitRequest big;
  big.records = {req.records[1]};
  const std::string too_many(protocol::fast_get::kMaxObjectBytes + 1, 'x');
  big.inlined = {std::string_view(too_many)};
  std::vector<std::byte> big_bytes;
  protocol::fast_get::encode_into(big, big_bytes);
  EXPECT_ERROR(protocol::fast_get::decode_commit(big_bytes), Errc::protocol_error,
               "bytes inline for");
  auto cut_inline = big_bytes;
  cut_inline.resize(cut_inline.size() - too_many.size() + 10);
  EXPECT_ERROR(protocol::fast_get::decode_commit(cut_inline), Errc::protocol_error,
               "bytes inline for");
  // A sharded commit carries its group, layout and members; it has no
  // prefixes, and a group has members (none without one).
  protocol::fast_get::CommitRequest shards;
  shards.records = {req.records[0]};
  shards.sharded = true;
  shards.group = "sd";
  shards.layout = 77;
  shards.members = {"sd", "sd/0", "sd/1"};
  std::vector<std::byte> shard_bytes;
  protocol::fast_get::encode_into(shards, shard_bytes);
  auto shards_back = protocol::fast_get::decode_commit(shard_bytes);
  ASSERT_OK(shards_back);
  EXPECT_TRUE(shards_back->sharded);
  EXPECT_EQ(shards_back->group, "sd");
  EXPECT_EQ(shards_back->layout, 77u);
  EXPECT_EQ(shards_back->members, shards.members);
  EXPECT_FALSE(back->sharded) << "a whole-key commit";
  auto with_prefix = shards;
  with_prefix.prefixes = {"sd"};
  protocol::fast_get::encode_into(with_prefix, shard_bytes);
  EXPECT_ERROR(protocol::fast_get::decode_commit(shard_bytes), Errc::protocol_error,
               "a sharded commit of 1 records under 1 prefixes");
  auto no_members = shards;
  no_members.members.clear();
  protocol::fast_get::encode_into(no_members, shard_bytes);
  EXPECT_ERROR(protocol::fast_get::decode_commit(shard_bytes), Errc::protocol_error,
               "group 'sd' with 0 members");
  auto odd_flags = bytes;
  const std::uint32_t four = 4;
  std::memcpy(odd_flags.data() + 20, &four, 4);
  EXPECT_ERROR(protocol::fast_get::decode_commit(odd_flags), Errc::protocol_error,
               "a commit with unknown flags");
  EXPECT_ERROR(protocol::fast_get::decode_commit({}), Errc::protocol_error, "no header");
  std::vector<std::byte> nothing;
  protocol::fast_get::encode_into(protocol::fast_get::CommitRequest{}, nothing);
  EXPECT_ERROR(protocol::fast_get::decode_commit(nothing), Errc::protocol_error, "asks nothing");
  // Replies: the versions, one per record, and the objects staged; a
  // refusal; and malformed ones.
  auto done = [](std::vector<std::uint64_t> versions, std::size_t staged,
                 std::vector<protocol::fast_get::CommitDone::Placed> placed = {}) {
    protocol::fast_get::CommitDone d;
    d.versions = std::move(versions);
    d.placed = std::move(placed);
    for (std::size_t i = 0; i < staged; ++i) {
      wire::RegionRef r;
      r.region_id = 70 + i;
      r.nbytes = 8;
      r.described = {{"shm", "seg:" + std::to_string(i)}, {"cma", "pid:addr"}};
      d.staged.push_back(r);
    }
    return protocol::fast_get::encode_commit_done(d);
  };
  bool refused = true;
  auto ok = protocol::fast_get::decode_commit_reply(done({4, 5, 6}, 2), 3, 0, 2, &refused);
  ASSERT_OK(ok);
  EXPECT_EQ(ok->versions, (std::vector<std::uint64_t>{4, 5, 6}));
  ASSERT_EQ(ok->staged.size(), 2u);
  EXPECT_EQ(ok->staged[1].region_id, 71u);
  // Every transport's description: the channel's client writes with its own.
  EXPECT_EQ(ok->staged[1].described,
            (std::map<std::string, std::string>{{"shm", "seg:1"}, {"cma", "pid:addr"}}));
  EXPECT_FALSE(refused);
  ASSERT_OK(protocol::fast_get::decode_commit_reply(done({4, 5, 6}, 0), 3, 0, 2, &refused))
      << "no room to stage after a commit";
  EXPECT_ERROR(protocol::fast_get::decode_commit_reply(done({4, 5, 6}, 1), 3, 0, 2, &refused),
               Errc::protocol_error, "1 objects staged of 2");
  auto cut = done({4, 5, 6}, 0);
  cut.pop_back();
  EXPECT_ERROR(protocol::fast_get::decode_commit_reply(cut, 3, 0, 0, &refused),
               Errc::protocol_error, "cut short");
  EXPECT_FALSE(refused);
  EXPECT_ERROR(protocol::fast_get::decode_commit_reply(done({4, 0, 6}, 0), 3, 0, 0, &refused),
               Errc::protocol_error, "version 0");
  // A sharded commit's key still waiting for other shards has none yet.
  auto pending =
      protocol::fast_get::decode_commit_reply(done({4, 0, 6}, 0), 3, 0, 0, &refused, true);
  ASSERT_OK(pending);
  EXPECT_EQ(pending->versions, (std::vector<std::uint64_t>{4, 0, 6}));
  // The objects the volume staged for bytes sent inline, with their places
  // (none for a volume without shm); one per record sent inline.
  auto placed = protocol::fast_get::decode_commit_reply(
      done({4, 5, 6}, 0, {{90, "seg;64"}, {91, ""}}), 3, 2, 0, &refused);
  ASSERT_OK(placed);
  ASSERT_EQ(placed->placed.size(), 2u);
  EXPECT_EQ(placed->placed[0].object_id, 90u);
  EXPECT_EQ(placed->placed[0].place, "seg;64");
  EXPECT_EQ(placed->placed[1].place, "");
  EXPECT_ERROR(protocol::fast_get::decode_commit_reply(done({4, 5, 6}, 0, {{90, "seg;64"}}), 3, 2,
                                                       0, &refused),
               Errc::protocol_error, "placing 1 objects of 2");
  EXPECT_ERROR(
      protocol::fast_get::decode_commit_reply(
          done({4, 5, 6}, 0, {{90, std::string(protocol::fast_get::kMaxPlaceBytes + 1, 'p')}}), 3,
          1, 0, &refused),
      Errc::protocol_error, "a commit's reply field");
  EXPECT_ERROR(
      protocol::fast_get::decode_commit_reply(done({4, 5, 6}, 0, {{0, "seg"}}), 3, 1, 0, &refused),
      Errc::protocol_error, "without id");
  EXPECT_ERROR(
      protocol::fast_get::decode_commit_reply(
          protocol::fast_get::encode_error(Status(Errc::conflict, "no")), 3, 0, 0, &refused),
      Errc::conflict, "no");
  EXPECT_TRUE(refused);
}

// A client that truncates its ring under the volume: the volume's ring
// thread faults on the next access, ends that ring's service (a corrupt
// ring), and the volume serves other rings as before.
TEST_F(FastGetTest, ARingTruncatedUnderTheVolumeEndsThatRingNotTheVolume) {
  const auto id = stage("k", "value");
  verdict(protocol::commit_atom::value, id);
  // Opened while the ring has a name: the volume takes it as it attaches.
  testing::SegmentHandle hostile(ring_->name());
  auto mapped = transports::shm::Segment::open(ring_->name(), true);
  ASSERT_OK(mapped);
  const auto full = static_cast<off_t>((*mapped)->size());
  mapped->reset();
  ASSERT_OK(attach());
  ASSERT_OK(get(id, "k"));  // the small-op service is serving
  const auto survived = transports::shm::PeerMemory::faults_survived();
  hostile.resize(0);
  // The volume's thread touches the ring at least every 10 ms while it waits.
  EXPECT_TRUE(testing::eventually(
      [&] { return transports::shm::PeerMemory::faults_survived() > survived; }));
  // Back to its size (pages of zeros) before this test's own end of the
  // ring, which is not guarded, touches it again.
  hostile.resize(full);
  auto other = Ring::create({});
  ASSERT_OK(other);
  ASSERT_OK(attach(other->get()));
  auto r = get(id, "k", other->get());
  ASSERT_OK(r);
  EXPECT_EQ(r->status, protocol::fast_get::ReplyStatus::ok);
  EXPECT_EQ(text(r->bytes), "value");
  // The truncated ring is no longer served: a request on it goes
  // unanswered (the volume closed its end, which the zeros now hide).
  const auto again = protocol::fast_get::encode(protocol::fast_get::Request{id, "k"});
  ASSERT_OK(ring_->send(8, again.data(), again.size(), in(10s)));
  EXPECT_FALSE(ring_->receive(in(300ms)).ok());
}

TEST_F(FastGetTest, TheRequestCodecRefusesWhatItCannotTrust) {
  auto req = protocol::fast_get::encode(protocol::fast_get::Request{5, "key"});
  ASSERT_OK(protocol::fast_get::decode_request(req));
  auto truncated = req;
  truncated.pop_back();
  EXPECT_EQ(protocol::fast_get::decode_request(truncated).status().code(), Errc::protocol_error);
  auto long_key = req;
  const std::uint32_t huge = 1u << 30;
  std::memcpy(long_key.data() + 4, &huge, 4);
  const auto s = protocol::fast_get::decode_request(long_key).status();
  EXPECT_EQ(s.code(), Errc::protocol_error);
  EXPECT_NE(s.message().find("key length"), std::string::npos) << s.to_string();
  EXPECT_EQ(protocol::fast_get::decode_request({}).status().code(), Errc::protocol_error);
  auto reply =
      protocol::fast_get::encode(static_cast<protocol::fast_get::ReplyStatus>(9), nullptr, 0);
  EXPECT_EQ(protocol::fast_get::decode_reply(reply).status().code(), Errc::protocol_error);
}

TEST_F(FastGetTest, OneThreadServesTheRingsOfEveryClient) {
  const auto id = stage("k", "value");
  verdict(protocol::commit_atom::value, id);
  std::vector<std::unique_ptr<Ring>> rings;
  for (int i = 0; i < 8; ++i) {
    auto ring = Ring::create({});
    ASSERT_OK(ring);
    rings.push_back(std::move(ring).value());
    ASSERT_OK(attach(rings.back().get()));
  }
  // Clients asking at once, each on its own ring.
  std::vector<std::thread> clients;
  std::atomic<int> served{0};
  for (auto& ring : rings) {
    clients.emplace_back([&, r = ring.get()] {
      for (int i = 0; i < 50; ++i) {
        auto reply = get(id, "k", r);
        if (reply.ok() && reply->status == protocol::fast_get::ReplyStatus::ok &&
            text(reply->bytes) == "value")
          served.fetch_add(1);
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(served.load(), 8 * 50);
  EXPECT_EQ(testing::threads_named("ms.small_ops"), 1) << "one serving thread per volume";
  // Clients that close their rings leave the volume serving the others.
  rings.resize(2);
  ASSERT_OK(attach());
  auto r = get(id, "k");
  ASSERT_OK(r);
  EXPECT_EQ(r->status, protocol::fast_get::ReplyStatus::ok);
}

// A controller that takes commits and never answers them; `received`
// counts them.
caf::actor silent_controller(caf::actor_system& sys, std::shared_ptr<std::atomic<int>> received) {
  return sys.spawn([received](caf::event_based_actor* self) -> caf::behavior {
    // A put's commit from a volume in this process (LocalCommit), held
    // unanswered, as an answer would be held from one elsewhere.
    auto held = std::make_shared<std::vector<protocol::LocalCommit>>();
    return {[held, received](protocol::local_commit_atom, protocol::LocalCommit& job) {
      held->push_back(std::move(job));
      received->fetch_add(1);
    }};
  });
}

TEST_F(FastGetTest, APutItsControllerHasNotAnsweredHoldsUpNoOtherClient) {
  const auto id = stage("k", "value");
  verdict(protocol::commit_atom::value, id);
  auto received = std::make_shared<std::atomic<int>>(0);
  auto controller = silent_controller(runtime_->system(), received);
  ASSERT_OK(attach(ring_.get(), controller));
  auto other = Ring::create({});
  ASSERT_OK(other);
  ASSERT_OK(attach(other->get()));
  const auto bytes = inline_put("waiting", DType::uint8, {5}, "bytes", 5);
  ASSERT_OK(ring_->send(9, bytes.data(), bytes.size(), in(10s)));
  ASSERT_TRUE(testing::eventually([&] { return received->load() == 1; }));
  // The put waits on the controller; another client's get does not.
  for (int i = 0; i < 10; ++i) {
    auto r = get(id, "k", other->get());
    ASSERT_OK(r);
    EXPECT_EQ(r->status, protocol::fast_get::ReplyStatus::ok);
  }
  // The controller goes: the waiting put is answered at once, not after
  // the request timeout.
  caf::anon_send_exit(controller, caf::exit_reason::kill);
  controller = nullptr;
  auto m = ring_->receive(in(10s));
  ASSERT_OK(m);
  EXPECT_EQ(m->tag, 9u);
  bool refused = false;
  auto done = protocol::fast_get::decode_commit_reply(m->bytes, 1, 1, 0, &refused);
  EXPECT_EQ(done.status().code(), Errc::unavailable) << done.status().to_string();
}

TEST_F(FastGetTest, AttachingToARingThatIsNotThereFails) {
  auto s = ask<std::string>(*self_, volume_, protocol::ring_attach_atom::value,
                            std::string("meshstore.1-1.ring.none"),
                            static_cast<std::int32_t>(getpid()), caf::actor());
  EXPECT_EQ(s.status().code(), Errc::not_found) << s.status().to_string();
  // Named by another creator than the one that made it.
  s = ask<std::string>(*self_, volume_, protocol::ring_attach_atom::value, ring_->name(),
                       static_cast<std::int32_t>(getpid() + 1), caf::actor());
  EXPECT_EQ(s.status().code(), Errc::unavailable) << s.status().to_string();
}

TEST_F(FastGetTest, AVolumeThatGoesClosesItsRings) {
  const auto id = stage("k", "value");
  verdict(protocol::commit_atom::value, id);
  ASSERT_OK(attach());
  ASSERT_OK(get(id, "k"));
  {
    caf::scoped_actor waiter(runtime_->system());
    waiter->monitor(volume_);
    caf::anon_send_exit(volume_, caf::exit_reason::user_shutdown);
    waiter->receive([](const caf::down_msg&) {});
  }
  volume_ = nullptr;
  const auto req = protocol::fast_get::encode(protocol::fast_get::Request{id, "k"});
  auto s = ring_->send(1, req.data(), req.size(), in(10s));
  auto m = s.ok() ? ring_->receive(in(10s)) : Result<Ring::Message>(s);
  EXPECT_EQ(m.status().code(), Errc::unavailable) << m.status().to_string();
}

// A client killed with SIGKILL after a put over its ring: the volume took
// the ring's name as it attached, so /dev/shm keeps nothing of it. The
// client is a child forked before this process starts any thread.
TEST(FastGetCleanup, AClientKilledAfterAPutLeavesNoSegmentBehind) {
  int named[2], go[2];
  ASSERT_EQ(pipe(named), 0);
  ASSERT_EQ(pipe(go), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(named[0]);
    close(go[1]);
    auto ring = Ring::create({});
    if (!ring.ok()) _exit(2);
    const std::string n = (*ring)->name();
    if (write(named[1], n.data(), n.size()) != static_cast<ssize_t>(n.size())) _exit(4);
    close(named[1]);
    auto bell = transports::shm::Doorbell::open(testing::read_to_end(go[0]));
    if (!bell.ok()) _exit(5);
    (*ring)->use_doorbell(std::move(bell).value());
    const std::vector<std::byte> data(4096);
    const auto bytes = inline_put("k", DType::uint8, {4096}, data.data(), data.size());
    if (!(*ring)->send(9, bytes.data(), bytes.size(), in(10s)).ok()) _exit(6);
    if (!(*ring)->receive(in(10s)).ok()) _exit(7);  // read (then refused: no controller)
    kill(getpid(), SIGKILL);
  }
  close(named[1]);
  close(go[0]);
  const std::string ring_name = testing::read_to_end(named[0]);
  ASSERT_FALSE(ring_name.empty());
  {
    internal::RuntimeOptions ro;
    ro.add_types = protocol::add_actor_types;
    auto runtime = internal::ActorRuntime::create(ro).value();
    volume::VolumeConfig vc;
    vc.volume_id = "volume-0";
    auto volume = volume::spawn_storage_volume(runtime->system(), vc).value();
    std::string bell;
    {
      caf::scoped_actor self{runtime->system()};
      auto attached = ask<std::string>(self, volume, protocol::ring_attach_atom::value, ring_name,
                                       static_cast<std::int32_t>(child), caf::actor());
      ASSERT_OK(attached);
      bell = *attached;
    }
    EXPECT_FALSE(transports::shm::segment_exists(ring_name));
    ASSERT_EQ(write(go[1], bell.data(), bell.size()), static_cast<ssize_t>(bell.size()));
    close(go[1]);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << status;
    caf::anon_send_exit(volume, caf::exit_reason::user_shutdown);
    volume = nullptr;
  }
  EXPECT_TRUE(transports::shm::garbage_collect(true, child).removed.empty());
}

}  // namespace
}  // namespace meshstore::client
