#pragma once

// CAF glue for the runtime: how wire structs travel inside CAF messages and
// the one place that converts between caf::error and Status. Internal: CAF
// headers stay out of the public API.

#include <caf/all.hpp>
#include <string>
#include <string_view>
#include <type_traits>

#include "meshstore/status.hpp"
#include "meshstore/wire/control.hpp"

namespace meshstore::internal {

/// The caf::error category atom of meshstore errors.
constexpr caf::atom_value kErrorCategory = caf::atom("meshstore");

/// A Status as a caf::error (category kErrorCategory, the Errc as the code,
/// the message as context). An ok Status becomes an empty error.
caf::error to_caf_error(const Status& s);

/// A caf::error as a Status, its message prefixed by `context`. meshstore
/// errors keep their code;
/// CAF's own system errors map to the closest Errc (request_timeout ->
/// timeout, request_receiver_down -> unavailable, ...) with `context` and
/// CAF's rendering in the message.
Status from_caf_error(const caf::error& e, std::string_view context);

/// Encodes a wire struct as its Protobuf bytes when CAF serializes it (only
/// across processes) and decodes it on the way in; a malformed encoding
/// fails the deserialization with a meshstore protocol_error.
template <class Inspector, class T>
typename Inspector::result_type inspect_as_proto(Inspector& f, T& x, const char* name) {
  std::string bytes;
  if constexpr (Inspector::reads_state) {
    bytes = wire::encode(x);
    return f(caf::meta::type_name(name), bytes);
  } else {
    return f(caf::meta::type_name(name), bytes, caf::meta::load_callback([&]() -> caf::error {
               return to_caf_error(wire::decode(bytes, x));
             }));
  }
}

}  // namespace meshstore::internal

namespace meshstore::wire {

#define MESHSTORE_WIRE_INSPECT(T)                                                 \
  template <class Inspector>                                                      \
  typename Inspector::result_type inspect(Inspector& f, T& x) {                   \
    return ::meshstore::internal::inspect_as_proto(f, x, "meshstore::wire::" #T); \
  }
MESHSTORE_WIRE_INSPECT(KeyRecord)
MESHSTORE_WIRE_INSPECT(StageRequest)
MESHSTORE_WIRE_INSPECT(RegionRef)
MESHSTORE_WIRE_INSPECT(ReadLease)
MESHSTORE_WIRE_INSPECT(RemoveReply)
MESHSTORE_WIRE_INSPECT(VolumeInfo)
MESHSTORE_WIRE_INSPECT(VolumeStat)
MESHSTORE_WIRE_INSPECT(ClientInfo)
#undef MESHSTORE_WIRE_INSPECT

}  // namespace meshstore::wire
