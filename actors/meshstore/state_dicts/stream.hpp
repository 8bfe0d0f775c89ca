#pragma once

// Streamed reads of a state dict: copying its entries while its writer
// still fills them.

#include <caf/all.hpp>
#include <chrono>
#include <string>

#include "meshstore/future.hpp"
#include "meshstore/state_dict.hpp"
#include "meshstore/state_dicts/read_plan.hpp"

namespace meshstore::state_dicts {

// Waits up to `wait` for `key` to be written or committed and reads it into
// `dst`: streamed while its writer fills it, or as usual once committed.
// `cast` (ReadOptions::cast): a destination that converts some entry waits
// for the commit and reads then, converting.
Future<void> stream_into(const caf::actor_addr& client, const std::string& key, StateDict* dst,
                         const std::string& op, std::chrono::milliseconds wait,
                         const CacheSlot& slot, bool cast = false);

}  // namespace meshstore::state_dicts
