// RegionRef's codec: the struct to and from its Protobuf twin.

#include "meshstore/transports/wire/region_ref.hpp"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "meshstore/transports/internal/region_ref_proto.hpp"
#include "meshstore/transports/wire/region_ref.pb.h"

namespace meshstore::wire {

void to_proto(const RegionRef& x, pb::RegionRef* p) {
  p->set_region_id(x.region_id);
  p->set_nbytes(x.nbytes);
  p->set_device_plus_one(x.device + 1);
  for (const auto& [name, description] : x.described) (*p->mutable_described())[name] = description;
}

RegionRef from_proto(const pb::RegionRef& p) {
  RegionRef x;
  x.region_id = p.region_id();
  x.nbytes = p.nbytes();
  x.device = p.device_plus_one() - 1;
  x.described.insert(p.described().begin(), p.described().end());
  return x;
}

std::string encode(const RegionRef& x) {
  pb::RegionRef p;
  to_proto(x, &p);
  // Deterministic: the same RegionRef always encodes to the same bytes
  // (`described` is a map, whose order Protobuf leaves open otherwise).
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    p.SerializeToCodedStream(&coded);
  }
  return out;
}

Status decode(const std::string& bytes, RegionRef& x) {
  pb::RegionRef p;
  if (!p.ParseFromString(bytes)) {
    return Status(Errc::protocol_error, "decode RegionRef: not a valid encoding");
  }
  x = from_proto(p);
  return Status();
}

}  // namespace meshstore::wire
