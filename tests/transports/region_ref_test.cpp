// The transport layer's wire struct: RegionRef's Protobuf codec and how CAF
// carries it.

#include "meshstore/transports/wire/region_ref.hpp"

#include <algorithm>
#include <caf/all.hpp>
#include <string>
#include <vector>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/transports/internal/wire_glue.hpp"
#include "meshstore/transports/one_sided.hpp"
#include "meshstore/transports/region_description.hpp"
#include "testing/region_ref.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

wire::RegionRef device_region() {
  auto r = testing::shm_region_ref(7, 4096, "/meshstore-seg", 512);
  r.described["rdma"] = transports::one_sided::describe(0x7f0012340000ULL, 99);
  r.described["cuda-ipc"] = std::string("\0\x01ipc", 5);  // any bytes, NULs included
  r.described["a-transport-added-later"] = "its own format";
  r.device = 1;
  return r;
}

void expect_same(const wire::RegionRef& a, const wire::RegionRef& b) {
  EXPECT_EQ(a.region_id, b.region_id);
  EXPECT_EQ(a.nbytes, b.nbytes);
  EXPECT_EQ(a.described, b.described);
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

// A transport's description, written and read back field by field; what a
// peer could garble is refused with the region and the transport named.
TEST(RegionDescription, FieldsRoundTripAndGarbleIsRefused) {
  auto r = testing::region_ref(5, 64);
  r.described["x"] = transports::DescriptionWriter()
                         .u64(0)
                         .u64(~0ULL)
                         .bytes("")
                         .bytes(std::string_view("seg\0ment", 8))
                         .take();
  transports::DescriptionReader d(r, "x", "x read");
  ASSERT_TRUE(d.present());
  EXPECT_EQ(*d.u64(), 0u);
  EXPECT_EQ(*d.u64(), ~0ULL);
  EXPECT_EQ(*d.bytes(), "");
  EXPECT_EQ(*d.bytes(), std::string("seg\0ment", 8));
  EXPECT_OK(d.finish());
  EXPECT_ERROR(d.u64(), Errc::protocol_error, "x read of region 5: the volume's x description");

  transports::DescriptionReader missing(r, "y", "y read");
  EXPECT_FALSE(missing.present());
  EXPECT_ERROR(missing.u64(), Errc::protocol_error, "y description is missing");

  r.described["x"] = transports::DescriptionWriter().u64(1000).take() + "abc";  // 1000 promised
  transports::DescriptionReader past_end(r, "x", "x read");
  EXPECT_ERROR(past_end.bytes(), Errc::protocol_error, "names a field of 1000 bytes past its end");
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
