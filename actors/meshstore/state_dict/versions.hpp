#pragma once

// Versions of a state dict under a prefix: the keys "PREFIX/vN", the
// pointer at the latest, publishing and retiring, reading the latest or the
// next one.

#include <caf/all.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "meshstore/future.hpp"
#include "meshstore/state_dict.hpp"
#include "meshstore/state_dict/read_plan.hpp"

namespace meshstore::state_dicts {

// The key of version `v` under `prefix`.
std::string version_key(const std::string& prefix, std::uint64_t v);

// The last steps of a publish, once version `next` is stored: point the
// prefix at it (readers find it from now on), then retire the version that
// fell out of the newest `keep`; its memory stays with the volumes for the
// next version's tensors.
Future<std::uint64_t> point_and_retire(const caf::actor_addr& client, const std::string& prefix,
                                       std::uint64_t next, int keep, const std::string& op);

// The version `prefix` points at (0 when it was never published).
// One object read: a missing pointer is 0.
Future<std::uint64_t> pointer_of(const caf::actor_addr& client, const std::string& prefix,
                                 const std::string& op);

// Reads the version `prefix` points at into `dst`; when that version was
// retired before it could be read, follows the pointer again.
Future<std::uint64_t> read_latest_into(const caf::actor_addr& client, const std::string& prefix,
                                       StateDict* dst, const std::string& op, int tries,
                                       const std::shared_ptr<ManifestCache>& cache);

// Waits for a version newer than `after` under `prefix` and reads it (the
// newest, when several are) into `dst`; answers its number. The wait
// follows version `latest + 1` in slices, so a version published and
// retired between two looks is not waited for in vain.
Future<std::uint64_t> read_next_into(const caf::actor_addr& client, const std::string& prefix,
                                     StateDict* dst, std::uint64_t after, const std::string& op,
                                     std::chrono::steady_clock::time_point deadline,
                                     const std::shared_ptr<ManifestCache>& cache);

}  // namespace meshstore::state_dicts
