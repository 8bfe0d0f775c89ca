// The transport layer's wire struct: RegionRef's Protobuf codec and how CAF
// carries it.

#include "meshstore/transports/wire/region_ref.hpp"

#include <algorithm>
#include <caf/all.hpp>
#include <string>
#include <vector>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/transports/internal/wire_glue.hpp"
#include "testing/region_ref.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

wire::RegionRef device_region() {
  auto r = testing::region_ref(7, 4096, "/meshstore-seg", 512, 0x7f0012340000ULL, 99);
  r.ipc_handle = std::string("\0\x01ipc", 5);
  r.device = 1;
  return r;
}

void expect_same(const wire::RegionRef& a, const wire::RegionRef& b) {
  EXPECT_EQ(a.region_id, b.region_id);
  EXPECT_EQ(a.nbytes, b.nbytes);
  EXPECT_EQ(a.segment, b.segment);
  EXPECT_EQ(a.segment_offset, b.segment_offset);
  EXPECT_EQ(a.address, b.address);
  EXPECT_EQ(a.rkey, b.rkey);
  EXPECT_EQ(a.ipc_handle, b.ipc_handle);
  EXPECT_EQ(a.device, b.device);
}

TEST(RegionRefWire, EveryFieldRoundTripsThroughProtobuf) {
  wire::RegionRef back;
  ASSERT_OK(wire::decode(wire::encode(device_region()), back));
  expect_same(device_region(), back);

  wire::RegionRef host_back;
  ASSERT_OK(wire::decode(wire::encode(testing::region_ref(1, 100)), host_back));
  EXPECT_EQ(host_back.device, -1);
}

TEST(RegionRefWire, MalformedBytesAreAProtocolError) {
  wire::RegionRef r;
  EXPECT_ERROR(wire::decode(std::string("\xff\xff\xff\xff garbage", 12), r), Errc::protocol_error,
               "RegionRef");
}

TEST(RegionRefWire, CafSerializationGoesThroughProtobuf) {
  auto rt = internal::ActorRuntime::create({}).value();
  std::vector<char> buf;
  {
    caf::binary_serializer sink{rt->system(), buf};
    auto region = device_region();
    ASSERT_FALSE(sink(region));
  }
  const auto proto = wire::encode(device_region());
  EXPECT_NE(std::search(buf.begin(), buf.end(), proto.begin(), proto.end()), buf.end());
  wire::RegionRef back;
  caf::binary_deserializer source{rt->system(), buf};
  ASSERT_FALSE(source(back));
  expect_same(device_region(), back);
}

}  // namespace
}  // namespace meshstore
