// RegionRef's codec: the struct to and from its Protobuf twin.

#include "meshstore/transports/wire/region_ref.hpp"

#include "meshstore/transports/internal/region_ref_proto.hpp"
#include "meshstore/transports/wire/region_ref.pb.h"

namespace meshstore::wire {

void to_proto(const RegionRef& x, pb::RegionRef* p) {
  p->set_region_id(x.region_id);
  p->set_nbytes(x.nbytes);
  p->set_segment(x.segment);
  p->set_segment_offset(x.segment_offset);
  p->set_address(x.address);
  p->set_rkey(x.rkey);
  p->set_ipc_handle(x.ipc_handle);
  p->set_device_plus_one(x.device + 1);
}

RegionRef from_proto(const pb::RegionRef& p) {
  return RegionRef{p.region_id(), p.nbytes(), p.segment(),    p.segment_offset(),
                   p.address(),   p.rkey(),   p.ipc_handle(), p.device_plus_one() - 1};
}

std::string encode(const RegionRef& x) {
  pb::RegionRef p;
  to_proto(x, &p);
  std::string out;
  p.SerializeToString(&out);
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
