#pragma once

// The rpc transport: payload bytes inside CAF messages, in chunks of at most
// TransportConfig::rpc_chunk_bytes (64 MiB by default; CAF corrupts a message
// of 4 GiB or more, so a chunk never comes near it). Works wherever CAF's
// network layer reaches: the universal fallback and the small-payload path.

#include <caf/all.hpp>
#include <vector>

#include "meshstore/transports/registry.hpp"

namespace meshstore::transports::rpc {

using write_atom = caf::atom_constant<caf::atom("rpc_write")>;
using read_atom = caf::atom_constant<caf::atom("rpc_read")>;

/// The volume-side endpoint: writes a chunk into a region, or reads one out.
using rpc_endpoint_actor =
    caf::typed_actor<caf::replies_to<write_atom, std::uint64_t /*region*/, std::uint64_t /*offset*/,
                                     std::vector<char>>::with<caf::ok_atom>,
                     caf::replies_to<read_atom, std::uint64_t /*region*/, std::uint64_t /*offset*/,
                                     std::uint64_t /*length*/>::with<std::vector<char>>>;

/// The rpc transport's factory (name "rpc", lowest priority: the fallback).
TransportFactory rpc_factory();

}  // namespace meshstore::transports::rpc
