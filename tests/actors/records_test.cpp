// The store's wire records: their Protobuf codec and how CAF carries them.
#include "meshstore/protocol/records.hpp"

#include <algorithm>
#include <caf/all.hpp>
#include <memory>
#include <typeinfo>
#include <utility>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/protocol/actor_types.hpp"
#include "meshstore/protocol/wire_glue.hpp"
#include "testing/region_ref.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

wire::KeyRecord sample_record() {
  wire::KeyRecord r;
  r.key = "model.layers.3.mlp.w";
  r.kind = wire::ObjectKind::tensor;
  r.dtype = DType::bfloat16;
  r.shape = {8, 4};
  r.version = 12;
  r.shards.push_back({TensorSlice::make({8, 4}, {0, 0}, {4, 4}).value(), "volume-0", 5, 32});
  r.shards.push_back({TensorSlice::make({8, 4}, {4, 0}, {4, 4}).value(), "volume-1", 9, 32, 2,
                      0xfeedfacecafebeefULL, std::string("shm\0place", 9)});
  r.group = "model";
  r.pending = "waiting for 'model/x'";
  r.group_commit = 10;
  r.group_size = 7;
  r.points_to = 3;
  return r;
}

void expect_same(const wire::KeyRecord& a, const wire::KeyRecord& b) {
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_EQ(a.version, b.version);
  ASSERT_EQ(a.shards.size(), b.shards.size());
  for (std::size_t i = 0; i < a.shards.size(); ++i) {
    EXPECT_EQ(a.shards[i].slice, b.shards[i].slice);
    EXPECT_EQ(a.shards[i].volume_id, b.shards[i].volume_id);
    EXPECT_EQ(a.shards[i].object_id, b.shards[i].object_id);
    EXPECT_EQ(a.shards[i].nbytes, b.shards[i].nbytes);
    EXPECT_EQ(a.shards[i].replicas, b.shards[i].replicas);
    EXPECT_EQ(a.shards[i].checksum, b.shards[i].checksum);
    EXPECT_EQ(a.shards[i].place, b.shards[i].place);
  }
  EXPECT_EQ(a.group, b.group);
  EXPECT_EQ(a.pending, b.pending);
  EXPECT_EQ(a.group_commit, b.group_commit);
  EXPECT_EQ(a.group_size, b.group_size);
  EXPECT_EQ(a.points_to, b.points_to);
  EXPECT_EQ(a.nbytes(), 64u);
}

TEST(Wire, KeyRecordRoundTripsThroughProtobuf) {
  wire::KeyRecord back;
  ASSERT_OK(wire::decode(wire::encode(sample_record()), back));
  expect_same(sample_record(), back);
}

TEST(Wire, OtherStructsRoundTrip) {
  wire::ReadLease lease;
  lease.lease_id = 7;
  lease.regions = {testing::region_ref(1, 100), testing::region_ref(2, 200)};
  lease.data = {"ab", std::string("\0c", 2)};
  lease.revocable = true;
  wire::ReadLease lease_back;
  ASSERT_OK(wire::decode(wire::encode(lease), lease_back));
  EXPECT_EQ(lease_back.lease_id, 7u);
  EXPECT_TRUE(lease_back.revocable);
  ASSERT_EQ(lease_back.regions.size(), 2u);
  EXPECT_EQ(lease_back.regions[1].nbytes, 200u);
  EXPECT_EQ(lease_back.data, lease.data);

  wire::VolumeInfo info{"volume-3", "hostA", 1 << 20, {"rpc"}, 2, "127.0.0.1:4242"};
  wire::VolumeInfo info_back;
  ASSERT_OK(wire::decode(wire::encode(info), info_back));
  EXPECT_EQ(info_back.volume_id, "volume-3");
  EXPECT_EQ(info_back.transports, std::vector<std::string>{"rpc"});
  EXPECT_EQ(info_back.local_rank, 2);
  EXPECT_EQ(info_back.control, "127.0.0.1:4242");  // the hosting process's door
}

TEST(Wire, MalformedBytesAreAProtocolError) {
  wire::KeyRecord r;
  EXPECT_ERROR(wire::decode(std::string("\xff\xff\xff\xff garbage", 12), r), Errc::protocol_error,
               "KeyRecord");
}

TEST(Wire, UnknownDTypeOrBadSliceIsRejected) {
  auto rec = sample_record();
  auto bytes = wire::encode(rec);
  // Corrupt the dtype by re-encoding with an out-of-range value.
  rec.dtype = static_cast<DType>(99);
  wire::KeyRecord back;
  EXPECT_ERROR(wire::decode(wire::encode(rec), back), Errc::protocol_error,
               "unknown dtype value 99");
}

TEST(Wire, CafSerializationGoesThroughProtobuf) {
  auto rt = internal::ActorRuntime::create({}).value();
  auto& sys = rt->system();
  std::vector<char> buf;
  {
    caf::binary_serializer sink{sys, buf};
    auto rec = sample_record();
    ASSERT_FALSE(sink(rec));
  }
  // The serialized form holds the Protobuf encoding as one byte string.
  const auto proto = wire::encode(sample_record());
  EXPECT_NE(std::search(buf.begin(), buf.end(), proto.begin(), proto.end()), buf.end());
  wire::KeyRecord back;
  caf::binary_deserializer source{sys, buf};
  ASSERT_FALSE(source(back));
  expect_same(sample_record(), back);
}

// A list of records (a locate's answer, a volume's records for a rebuild)
// crosses as one KeyRecordList encoding, and comes back whole; bytes that
// are no list are a protocol error naming it.
TEST(Wire, AListOfRecordsTravelsAsOneEncoding) {
  auto rt = internal::ActorRuntime::create({}).value();
  auto& sys = rt->system();
  std::vector<wire::KeyRecord> list{sample_record(), sample_record(), wire::KeyRecord{}};
  list[1].key = "second";
  std::vector<char> buf;
  {
    caf::binary_serializer sink{sys, buf};
    ASSERT_FALSE(sink(list));
  }
  const auto proto = wire::encode(list);
  EXPECT_NE(std::search(buf.begin(), buf.end(), proto.begin(), proto.end()), buf.end());
  std::vector<wire::KeyRecord> back;
  caf::binary_deserializer source{sys, buf};
  ASSERT_FALSE(source(back));
  ASSERT_EQ(back.size(), 3u);
  expect_same(list[0], back[0]);
  EXPECT_EQ(back[1].key, "second");
  EXPECT_FALSE(back[2].found());

  std::vector<wire::KeyRecord> empty{sample_record()};
  ASSERT_OK(wire::decode(wire::encode(std::vector<wire::KeyRecord>{}), empty));
  EXPECT_TRUE(empty.empty());  // decoding replaces what was there
  EXPECT_ERROR(wire::decode(std::string("\xff\xff\xff\xff garbage", 12), back),
               Errc::protocol_error, "KeyRecordList");
}

// A volume's records for a rebuild (HeldRecords) are encoded straight from
// the records it keeps, shared, not copied: they cross as the same
// KeyRecordList, and the receiver owns what it decoded. In the sender's
// own actor system (nothing serialized) take() copies the kept ones.
TEST(Wire, HeldRecordsAreEncodedFromTheKeptRecordsAndDecodedIntoOwnedOnes) {
  auto rt = internal::ActorRuntime::create({}).value();
  auto& sys = rt->system();
  auto kept = std::make_shared<const wire::KeyRecord>(sample_record());
  wire::HeldRecords held;
  held.kept = {kept, kept};
  wire::KeyRecord second = sample_record();
  second.key = "second";
  held.records = {second};
  EXPECT_EQ(held.size(), 3u);
  EXPECT_EQ(wire::encode(held), wire::encode(std::vector<wire::KeyRecord>{*kept, *kept, second}));
  std::vector<char> buf;
  {
    caf::binary_serializer sink{sys, buf};
    ASSERT_FALSE(sink(held));
  }
  wire::HeldRecords back;
  back.kept = {kept};  // decoding replaces what was there
  caf::binary_deserializer source{sys, buf};
  ASSERT_FALSE(source(back));
  EXPECT_TRUE(back.kept.empty());
  auto records = std::move(back).take();
  ASSERT_EQ(records.size(), 3u);
  expect_same(*kept, records[0]);
  expect_same(*kept, records[1]);
  EXPECT_EQ(records[2].key, "second");
  EXPECT_EQ(kept.use_count(), 3);  // the sender's stay its own
  auto copies = std::move(held).take();
  ASSERT_EQ(copies.size(), 3u);
  EXPECT_EQ(copies[0].key, kept->key);
  EXPECT_EQ(copies[2].key, "second");
  EXPECT_EQ(wire::encode(copies[0]), wire::encode(*kept));
  EXPECT_ERROR(wire::decode(std::string("\xff\xff\xff\xff garbage", 12), back),
               Errc::protocol_error, "KeyRecordList");
}

TEST(Wire, ActorTypesRegisterEveryWireStructUnderItsStableName) {
  internal::RuntimeOptions ro;
  ro.add_types = protocol::add_actor_types;
  auto rt = internal::ActorRuntime::create(ro).value();
  auto& types = rt->system().types();
  const std::pair<const std::type_info*, const char*> expected[] = {
      {&typeid(wire::KeyRecord), "meshstore::wire::KeyRecord"},
      {&typeid(wire::StageRequest), "meshstore::wire::StageRequest"},
      {&typeid(wire::RegionRef), "meshstore::wire::RegionRef"},
      {&typeid(wire::ReadLease), "meshstore::wire::ReadLease"},
      {&typeid(wire::RemoveReply), "meshstore::wire::RemoveReply"},
      {&typeid(wire::VolumeInfo), "meshstore::wire::VolumeInfo"},
      {&typeid(wire::VolumeStat), "meshstore::wire::VolumeStat"},
      {&typeid(wire::ClientInfo), "meshstore::wire::ClientInfo"},
      {&typeid(wire::HeldRecords), "meshstore::wire::HeldRecords"},
      {&typeid(std::vector<wire::KeyRecord>), "meshstore::wire::KeyRecordList"}};
  for (const auto& [type, name] : expected) {
    EXPECT_EQ(types.portable_name(0, type), name);
    EXPECT_NE(types.make_value(name), nullptr) << name;
  }
  // What a receiving process builds from the name serializes as Protobuf.
  auto value = types.make_value("meshstore::wire::KeyRecord");
  ASSERT_NE(value, nullptr);
  *static_cast<wire::KeyRecord*>(value->get_mutable()) = sample_record();
  std::vector<char> buf;
  caf::binary_serializer sink{rt->system(), buf};
  ASSERT_FALSE(value->save(sink));
  const auto proto = wire::encode(sample_record());
  EXPECT_NE(std::search(buf.begin(), buf.end(), proto.begin(), proto.end()), buf.end());
}

}  // namespace
}  // namespace meshstore
