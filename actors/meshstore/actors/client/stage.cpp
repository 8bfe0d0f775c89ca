// Staged regions: staged and mapped for zero-copy writes, or given back.

#include "meshstore/actors/client/stage.hpp"

#include <memory>
#include <string>
#include <utility>

#include "meshstore/actors/client/ask.hpp"
#include "meshstore/actors/client/connections.hpp"

namespace meshstore::actors::client_detail {

using internal::from_caf_error;

void give_back(client_pointer self, const storage_volume_actor& volume,
               const std::vector<wire::RegionRef>& regions,
               const std::vector<wire::RegionRef>& more) {
  std::vector<std::uint64_t> ids;
  for (const auto& r : regions) ids.push_back(r.region_id);
  for (const auto& r : more) ids.push_back(r.region_id);
  if (!ids.empty()) self->send(volume, release_atom::value, ids);
}

void handle_stage(client_pointer self, StageCall call) {
  const std::string what = describe(call.op, call.keys);
  auto promise = call.promise;
  auto c = std::make_shared<StageCall>(std::move(call));
  with_home_volume(self, [=](const ConnResult& conn_or) {
    if (!conn_or.ok()) {
      promise->set_error(conn_or.status().with_context(what));
      return;
    }
    auto conn = *conn_or;
    if (!conn->transport->capabilities().maps_memory) {
      promise->set_error(Status(Errc::unsupported,
                                what + ": volume '" + conn->info.volume_id + "' is reached over " +
                                    std::string(conn->transport->name()) +
                                    ", which cannot map its memory into this process"));
      return;
    }
    std::vector<wire::StageRequest> reqs;
    for (std::size_t i = 0; i < c->keys.size(); ++i) {
      wire::StageRequest r;
      r.key = c->keys[i];
      r.nbytes = c->nbytes[i];
      reqs.push_back(std::move(r));
    }
    ask(self, conn->handle, stage_atom::value, reqs)
        .then(
            [=](const std::vector<wire::RegionRef>& regions) {
              StagedRegions out;
              out.volume_id = conn->info.volume_id;
              out.regions = regions;
              if (regions.size() != reqs.size()) {
                give_back(self, conn->handle, regions);
                promise->set_error(Status(Errc::protocol_error,
                                          what + ": volume staged " +
                                              std::to_string(regions.size()) + " objects for " +
                                              std::to_string(reqs.size()) + " keys"));
                return;
              }
              for (const auto& r : regions) {
                auto mem = conn->transport->map_writable(r);
                if (!mem.ok()) {
                  give_back(self, conn->handle, regions);
                  promise->set_error(mem.status().with_context(what));
                  return;
                }
                out.memory.push_back(std::move(mem).value());
              }
              promise->set_value(std::move(out));
            },
            [=](caf::error& e) {
              promise->set_error(
                  from_caf_error(e, what + ": stage at volume '" + conn->info.volume_id + "'"));
            });
  });
}

void handle_release_staged(client_pointer self, const ReleaseStagedCall& call) {
  auto it = self->state.conns.find(call.staged.volume_id);
  if (it != self->state.conns.end() && it->second) {
    give_back(self, it->second->handle, call.staged.regions);
  }
}

}  // namespace meshstore::actors::client_detail
