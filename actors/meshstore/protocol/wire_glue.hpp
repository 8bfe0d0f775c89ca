#pragma once

// CAF glue for the store's wire records: how each travels inside CAF
// messages (as its Protobuf bytes, see caf_glue.hpp), RegionRef included
// (through the transport layer's glue). Include it, not caf_glue.hpp alone,
// in every file that sends or handles the store's messages, so CAF
// serializes them the same way everywhere. Internal: CAF stays out of the
// public headers.

#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/protocol/records.hpp"
#include "meshstore/transports/internal/wire_glue.hpp"

namespace meshstore::wire {

MESHSTORE_WIRE_INSPECT(KeyRecord)
MESHSTORE_WIRE_INSPECT(StageRequest)
MESHSTORE_WIRE_INSPECT(ReadLease)
MESHSTORE_WIRE_INSPECT(RemoveReply)
MESHSTORE_WIRE_INSPECT(VolumeInfo)
MESHSTORE_WIRE_INSPECT(VolumeStat)
MESHSTORE_WIRE_INSPECT(ClientInfo)
MESHSTORE_WIRE_INSPECT(HeldRecords)

/// A list of key records travels as one KeyRecordList encoding, not as a
/// CAF list of per-record encodings.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, std::vector<KeyRecord>& x) {
  return ::meshstore::internal::inspect_as_proto(f, x, "meshstore::wire::KeyRecordList");
}

}  // namespace meshstore::wire
