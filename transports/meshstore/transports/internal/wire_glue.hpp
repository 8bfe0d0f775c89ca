#pragma once

// CAF glue for the transport layer's wire struct: how a RegionRef travels
// inside CAF messages (as its Protobuf bytes, see caf_glue.hpp). Include it,
// not caf_glue.hpp alone, in every file that sends or handles a RegionRef,
// so CAF serializes it the same way everywhere. Internal: CAF stays out of
// the public headers.

#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/transports/wire/region_ref.hpp"

namespace meshstore::wire {

MESHSTORE_WIRE_INSPECT(RegionRef)

}  // namespace meshstore::wire
