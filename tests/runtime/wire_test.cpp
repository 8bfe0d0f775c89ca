#include <algorithm>
#include <caf/all.hpp>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/wire/control.hpp"
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
                      0xfeedfacecafebeefULL});
  r.group = "model";
  r.pending = "waiting for 'model/x'";
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
  }
  EXPECT_EQ(a.group, b.group);
  EXPECT_EQ(a.pending, b.pending);
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
  wire::ReadLease lease_back;
  ASSERT_OK(wire::decode(wire::encode(lease), lease_back));
  EXPECT_EQ(lease_back.lease_id, 7u);
  ASSERT_EQ(lease_back.regions.size(), 2u);
  EXPECT_EQ(lease_back.regions[1].nbytes, 200u);
  EXPECT_EQ(lease_back.data, lease.data);

  wire::VolumeInfo info{"volume-3", "hostA", 1 << 20, {"rpc"}};
  wire::VolumeInfo info_back;
  ASSERT_OK(wire::decode(wire::encode(info), info_back));
  EXPECT_EQ(info_back.volume_id, "volume-3");
  EXPECT_EQ(info_back.transports, std::vector<std::string>{"rpc"});
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

TEST(Errors, MeshstoreErrorsSurviveTheCafRoundTrip) {
  Status s(Errc::dtype_mismatch, "stored bfloat16, destination float32");
  auto back = internal::from_caf_error(internal::to_caf_error(s), "get_into 'w'");
  EXPECT_ERROR(back, Errc::dtype_mismatch, "get_into 'w': stored bfloat16");
  EXPECT_OK(internal::from_caf_error(internal::to_caf_error(Status()), "x"));
}

TEST(Errors, CafSystemErrorsMapToMeshstoreCodes) {
  EXPECT_ERROR(internal::from_caf_error(caf::make_error(caf::sec::request_timeout), "locate"),
               Errc::timeout, "locate");
  EXPECT_ERROR(internal::from_caf_error(caf::make_error(caf::sec::request_receiver_down), "stage"),
               Errc::unavailable, "stage");
}

TEST(Logging, LevelsParseAndApply) {
  EXPECT_ERROR(log::parse_level("loud"), Errc::invalid_argument, "loud");
  EXPECT_ERROR(log::set_level("loud"), Errc::invalid_argument, "");
  const auto before = log::current_level();
  ASSERT_OK(log::set_level("debug"));
  EXPECT_EQ(log::get("test")->level(), spdlog::level::debug);
  ASSERT_OK(log::set_level(before));
  EXPECT_EQ(log::get("test")->name(), "meshstore.test");
}

}  // namespace
}  // namespace meshstore
