// The runtime's CAF glue: errors across CAF, and wire structs of any layer
// carried as their Protobuf bytes.

#include "meshstore/internal/caf_glue.hpp"

#include <caf/all.hpp>
#include <string>
#include <vector>

#include "meshstore/internal/actor_runtime.hpp"
#include "testing/test_util.hpp"

// A wire struct of no layer: the glue finds its codec by argument-dependent
// lookup, as it finds each layer's.
namespace meshstore::wire {
namespace {

struct Probe {
  std::string text;
};

std::string encode(const Probe& x) { return "probe:" + x.text; }

Status decode(const std::string& bytes, Probe& x) {
  if (bytes.rfind("probe:", 0) != 0) return Status(Errc::protocol_error, "decode Probe");
  x.text = bytes.substr(6);
  return Status();
}

MESHSTORE_WIRE_INSPECT(Probe)

}  // namespace
}  // namespace meshstore::wire

namespace meshstore {
namespace {

TEST(CafGlue, WireStructsTravelAsTheirEncoding) {
  auto rt = internal::ActorRuntime::create({}).value();
  std::vector<char> buf;
  {
    caf::binary_serializer sink{rt->system(), buf};
    wire::Probe probe{"hello"};
    ASSERT_FALSE(sink(probe));
  }
  wire::Probe back;
  caf::binary_deserializer source{rt->system(), buf};
  ASSERT_FALSE(source(back));
  EXPECT_EQ(back.text, "hello");
}

TEST(CafGlue, AMalformedEncodingFailsTheDeserialization) {
  auto rt = internal::ActorRuntime::create({}).value();
  std::vector<char> buf;
  {
    caf::binary_serializer sink{rt->system(), buf};
    std::string garbage = "not a probe";
    ASSERT_FALSE(sink(garbage));
  }
  wire::Probe back;
  caf::binary_deserializer source{rt->system(), buf};
  EXPECT_ERROR(internal::from_caf_error(source(back), "probe"), Errc::protocol_error,
               "decode Probe");
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

}  // namespace
}  // namespace meshstore
