#pragma once

// Staged regions: memory a volume sets aside for keys not committed yet,
// mapped for zero-copy writes (StageCall) or given back uncommitted.

#include <vector>

#include "meshstore/actors/client/client_state.hpp"
#include "meshstore/transports/wire/region_ref.hpp"

namespace meshstore::actors::client_detail {

// Gives staged (uncommitted) regions back to their volume for reuse.
void give_back(client_pointer self, const storage_volume_actor& volume,
               const std::vector<wire::RegionRef>& regions,
               const std::vector<wire::RegionRef>& more = {});

// Stages regions at the home volume and maps them writable (zero-copy
// publishing); all or nothing.
void handle_stage(client_pointer self, StageCall call);

// Gives staged regions back uncommitted. A volume this client no longer
// talks to reclaims them itself when the client goes.
void handle_release_staged(client_pointer self, const ReleaseStagedCall& call);

}  // namespace meshstore::actors::client_detail
