#pragma once

// RegionRef to and from its Protobuf message, for schemas that embed one
// (the store's ReadLease). Internal: the generated headers are not
// installed.

#include "meshstore/transports/wire/region_ref.hpp"

namespace meshstore::wire {

namespace pb {
class RegionRef;
}  // namespace pb

/// Fills `p` from `x`.
void to_proto(const RegionRef& x, pb::RegionRef* p);

/// The RegionRef `p` describes (every field is valid as it comes).
RegionRef from_proto(const pb::RegionRef& p);

}  // namespace meshstore::wire
