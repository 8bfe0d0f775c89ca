// custom_strategy: a user-defined placement strategy. The server hosts four
// volumes (the controller_colocated placement); the custom `select` pairs
// ranks up so ranks 2k and 2k+1 share volume k, e.g. so that pipeline
// neighbours write next to each other. Four ranks connect (here, as four
// stores in one process for brevity), each puts a tensor, and the volumes'
// object counts show where the bytes landed.

#include <cstdio>

#include "meshstore/store.hpp"

using namespace std::chrono_literals;

int main() {
  meshstore::StoreOptions server_options;
  server_options.listen = "127.0.0.1:0";
  server_options.placement.num_volumes = 4;
  server_options.placement.local_rank = -1;  // the server is not a rank
  server_options.placement.custom_strategy.placement = "controller_colocated";
  server_options.placement.custom_strategy.select =
      [](const meshstore::ClientDesc& client,
         const std::vector<meshstore::VolumeDesc>& volumes) -> meshstore::Result<std::string> {
    if (volumes.empty()) return meshstore::Status(meshstore::Errc::unavailable, "no volume yet");
    return volumes[static_cast<std::size_t>(client.rank / 2) % volumes.size()].volume_id;
  };
  auto server = meshstore::Store::embedded(server_options);
  if (!server.ok()) {
    std::fprintf(stderr, "custom_strategy: %s\n", server.status().to_string().c_str());
    return 1;
  }

  std::vector<meshstore::Store> ranks;
  for (int r = 0; r < 4; ++r) {
    meshstore::StoreOptions o;
    o.placement.rank = r;
    o.placement.local_rank = r;
    ranks.push_back(meshstore::Store::connect(server->admin().address(), o).value());
    float v = static_cast<float>(r);
    auto put =
        ranks.back().put("rank" + std::to_string(r), meshstore::TensorView::of(&v, {})).get(30s);
    if (!put.ok()) {
      std::fprintf(stderr, "custom_strategy: %s\n", put.status().to_string().c_str());
      return 1;
    }
  }
  auto stats = server->admin().stats().get(30s);
  if (!stats.ok()) return 1;
  std::printf("ranks 0,1 -> volume-0; ranks 2,3 -> volume-1:\n");
  bool as_expected = true;
  for (const auto& s : *stats) {
    std::printf("  %-10s %llu objects\n", s.volume_id.c_str(),
                static_cast<unsigned long long>(s.objects));
    const unsigned long long want =
        (s.volume_id == "volume-0" || s.volume_id == "volume-1") ? 2 : 0;
    as_expected &= s.objects == want;
  }
  std::printf("custom_strategy: %s\n", as_expected ? "ok" : "unexpected placement");
  return as_expected ? 0 : 1;
}
