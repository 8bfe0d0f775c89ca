#pragma once

// The shm transport: a volume keeps its regions in POSIX shared-memory
// segments (shm_segment.hpp) and clients on the same host map them, so a put
// is one memcpy into the segment and a get_into one memcpy out of it. The
// volume's CPU does nothing per byte. Serves only clients with the same host
// identity (host_identity.hpp) and user id; selection skips it otherwise,
// and forcing it there is an error.

#include <cstdint>
#include <string>
#include <string_view>

#include "meshstore/transports/registry.hpp"

namespace meshstore::transports::shm {

/// The shm transport's factory (name "shm", highest priority on one host).
TransportFactory shm_factory();

/// How the shm server describes a region (its entry in RegionRef::described):
/// the segment holding it and where it starts inside.
std::string describe(std::string_view segment, std::uint64_t offset);

}  // namespace meshstore::transports::shm
