#pragma once
// A wire::RegionRef spelled out for a test, with the descriptions its
// transports' servers would give: shm's (a segment) and one-sided ones (an
// address and a key) when asked for.
#include <cstdint>
#include <string>

#include "meshstore/transports/one_sided.hpp"
#include "meshstore/transports/shm/shm_transport.hpp"
#include "meshstore/transports/wire/region_ref.hpp"

namespace meshstore::testing {

inline wire::RegionRef region_ref(std::uint64_t id, std::uint64_t nbytes) {
  wire::RegionRef r;
  r.region_id = id;
  r.nbytes = nbytes;
  return r;
}

/// A region the shm server placed in `segment` at `offset`.
inline wire::RegionRef shm_region_ref(std::uint64_t id, std::uint64_t nbytes, std::string segment,
                                      std::uint64_t offset = 0) {
  auto r = region_ref(id, nbytes);
  r.described["shm"] = transports::shm::describe(segment, offset);
  return r;
}

/// A region a one-sided transport (`transport`: "cma" or "rdma") described
/// with its address and registration key.
inline wire::RegionRef one_sided_region_ref(std::uint64_t id, std::uint64_t nbytes,
                                            const std::string& transport, std::uint64_t address,
                                            std::uint64_t key = 0) {
  auto r = region_ref(id, nbytes);
  r.described[transport] = transports::one_sided::describe(address, key);
  return r;
}

}  // namespace meshstore::testing
