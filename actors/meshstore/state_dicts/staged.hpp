#pragma once

// Staged (zero-copy) state dicts: the caller writes its tensors straight
// into the store's memory (StagedStateDict), then commits them.

#include <caf/all.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "meshstore/future.hpp"
#include "meshstore/state_dicts/manifest.hpp"
#include "meshstore/state_dicts/versions.hpp"
#include "meshstore/status.hpp"
#include "meshstore/store.hpp"

namespace meshstore::state_dicts {

// Checks the specs and lays them out as put_state_dict would.
Result<Manifest> plan_staging(const std::string& op, const std::string& key,
                              const std::vector<TensorSpec>& tensors,
                              const StateDictPutOptions& options);

// Allocates the staged state dict of `layout` under `key`: the volume's
// memory when this process can map it, private buffers otherwise. A
// publication with a prefix publishes it there on commit (fenced as
// publish_state_dict is).
Future<StagedStateDict> stage_at(const caf::actor_addr& client, std::string op, std::string key,
                                 Manifest layout, PublishTarget pub);

}  // namespace meshstore::state_dicts
