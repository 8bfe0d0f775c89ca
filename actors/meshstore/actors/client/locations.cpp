// The client's cache of key locations.

#include "meshstore/actors/client/locations.hpp"

#include <utility>

#include "meshstore/actors/client/ask.hpp"

namespace meshstore::actors::client_detail {

using internal::from_caf_error;

void forget_locations_under(ClientState& st, const std::vector<std::string>& prefixes) {
  for (const auto& p : prefixes) {
    for (auto it = st.locations.begin(); it != st.locations.end();) {
      it = it->first.compare(0, p.size(), p) == 0 ? st.locations.erase(it) : std::next(it);
    }
  }
}

void cache_committed(client_pointer self, std::vector<wire::KeyRecord> records,
                     const std::vector<std::uint64_t>& versions) {
  auto& st = self->state;
  if (st.locations.size() + records.size() > st.cfg.max_cached_locations) st.locations.clear();
  for (std::size_t i = 0; i < records.size() && i < versions.size(); ++i) {
    records[i].version = versions[i];
    st.locations[records[i].key] = std::move(records[i]);
  }
}

void locate(client_pointer self, const std::vector<std::string>& keys, bool use_cache,
            std::function<void(Result<std::vector<wire::KeyRecord>>)> k) {
  auto& st = self->state;
  if (use_cache) {
    std::vector<wire::KeyRecord> cached;
    for (const auto& key : keys) {
      auto it = st.locations.find(key);
      if (it == st.locations.end()) break;
      cached.push_back(it->second);
    }
    if (cached.size() == keys.size()) return k(std::move(cached));
  }
  ask(self, st.controller, locate_atom::value, keys)
      .then(
          [=](std::vector<wire::KeyRecord>& records) {
            auto& st = self->state;
            if (st.locations.size() + records.size() > st.cfg.max_cached_locations)
              st.locations.clear();
            for (const auto& r : records) {
              if (r.found()) {
                st.locations[r.key] = r;
              } else {
                st.locations.erase(r.key);
              }
            }
            k(std::move(records));
          },
          [=](caf::error& e) { k(from_caf_error(e, "locate at controller")); });
}

}  // namespace meshstore::actors::client_detail
