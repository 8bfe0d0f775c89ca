// The client's cache of key locations.

#include "meshstore/client/locations.hpp"

#include <utility>

#include "meshstore/client/ask.hpp"

namespace meshstore::client {

using internal::from_caf_error;

void forget_locations_under(ClientState& st, const std::vector<std::string>& prefixes) {
  for (const auto& p : prefixes) st.locations->erase_under(p);
}

void cache_located(ClientState& st, const std::vector<wire::KeyRecord>& records) {
  for (const auto& r : records) {
    if (r.found()) {
      st.locations->put(r);
    } else {
      st.locations->erase(r.key);
    }
  }
}

void locate(client_pointer self, const std::vector<std::string>& keys, bool use_cache,
            std::function<void(Result<std::vector<wire::KeyRecord>>)> k) {
  auto& st = self->state;
  if (use_cache) {
    std::vector<wire::KeyRecord> cached;
    for (const auto& key : keys) {
      auto r = st.locations->find(key);
      if (!r) break;
      cached.push_back(std::move(*r));
    }
    if (cached.size() == keys.size()) return k(std::move(cached));
  }
  ask(self, st.controller, protocol::locate_atom::value, keys)
      .then(
          [=](std::vector<wire::KeyRecord>& records) {
            cache_located(self->state, records);
            k(std::move(records));
          },
          [=](caf::error& e) { k(from_caf_error(e, "locate at controller")); });
}

}  // namespace meshstore::client
