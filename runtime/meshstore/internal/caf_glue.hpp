#pragma once

// CAF glue for the runtime: how a layer's wire structs travel inside CAF
// messages (inspect_as_proto, MESHSTORE_WIRE_INSPECT) and the one place that
// converts between caf::error and Status. The runtime has no wire structs of
// its own: each layer declares the inspect overloads of its structs in its
// own glue header (transports/internal/wire_glue.hpp,
// protocol/wire_glue.hpp). Internal: CAF headers stay out of the
// public API.

#include <caf/all.hpp>
#include <string>
#include <string_view>
#include <type_traits>

#include "meshstore/status.hpp"

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

/// Whether `e` is a meshstore error that says the request was refused
/// (nothing done), rather than one whose outcome is unknown (timeout,
/// unavailable, CAF's own errors).
inline bool refused(const caf::error& e) {
  return e.category() == kErrorCategory && e.code() != static_cast<std::uint8_t>(Errc::timeout) &&
         e.code() != static_cast<std::uint8_t>(Errc::unavailable);
}

/// Encodes a wire struct as its Protobuf bytes when CAF serializes it (only
/// across processes) and decodes it on the way in; a malformed encoding
/// fails the deserialization with a meshstore protocol_error. The struct's
/// namespace provides `std::string encode(const T&)` and
/// `Status decode(const std::string&, T&)`, found by argument-dependent
/// lookup where the inspect overload is instantiated.
template <class Inspector, class T>
typename Inspector::result_type inspect_as_proto(Inspector& f, T& x, const char* name) {
  std::string bytes;
  if constexpr (Inspector::reads_state) {
    bytes = encode(x);
    return f(caf::meta::type_name(name), bytes);
  } else {
    return f(caf::meta::type_name(name), bytes, caf::meta::load_callback([&]() -> caf::error {
               return to_caf_error(decode(bytes, x));
             }));
  }
}

}  // namespace meshstore::internal

/// Defines the CAF inspect overload of the wire struct `T`, which travels as
/// its Protobuf bytes under the type name "meshstore::wire::T". Use it in
/// namespace meshstore::wire, in the glue header of the layer that owns `T`.
#define MESHSTORE_WIRE_INSPECT(T)                                                 \
  template <class Inspector>                                                      \
  typename Inspector::result_type inspect(Inspector& f, T& x) {                   \
    return ::meshstore::internal::inspect_as_proto(f, x, "meshstore::wire::" #T); \
  }
