#pragma once
// A wire::RegionRef spelled out for a test, every other field at its
// default (aggregate initialisation would leave -Wmissing-field-initializers
// warnings at each use).
#include <cstdint>
#include <string>

#include "meshstore/transports/wire/region_ref.hpp"

namespace meshstore::testing {

inline wire::RegionRef region_ref(std::uint64_t id, std::uint64_t nbytes, std::string segment = {},
                                  std::uint64_t segment_offset = 0, std::uint64_t address = 0,
                                  std::uint64_t rkey = 0) {
  wire::RegionRef r;
  r.region_id = id;
  r.nbytes = nbytes;
  r.segment = std::move(segment);
  r.segment_offset = segment_offset;
  r.address = address;
  r.rkey = rkey;
  return r;
}

}  // namespace meshstore::testing
