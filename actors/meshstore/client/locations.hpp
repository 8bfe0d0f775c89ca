#pragma once

// The client's cache of key locations: filled by the controller's answers
// and this client's own commits, dropped for keys that change.

#include <functional>
#include <string>
#include <vector>

#include "meshstore/client/client_state.hpp"
#include "meshstore/protocol/records.hpp"
#include "meshstore/status.hpp"

namespace meshstore::client {

// Drops the cached locations of every key starting with one of `prefixes`
// (a state dict's keys, about to be replaced or retired).
void forget_locations_under(ClientState& st, const std::vector<std::string>& prefixes);

// Takes the controller's answer of a locate: the records found are cached,
// the keys not found forgotten.
void cache_located(ClientState& st, const std::vector<wire::KeyRecord>& records);

// Calls `k` with the records of `keys`: from the cache when allowed and
// complete, else from the controller.
void locate(client_pointer self, const std::vector<std::string>& keys, bool use_cache,
            std::function<void(Result<std::vector<wire::KeyRecord>>)> k);

}  // namespace meshstore::client
