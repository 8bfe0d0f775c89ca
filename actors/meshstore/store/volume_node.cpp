// A process's volumes of a store spawned on a ProcMesh (the mesh
// "meshstore.volumes"): hosted and registered at join, registered again
// with the controller a ProcMesh starts again.

#include <chrono>
#include <optional>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/protocol/actor_types.hpp"
#include "meshstore/protocol/directory_actor.hpp"
#include "meshstore/protocol/wire_glue.hpp"
#include "meshstore/store/store_nodes.hpp"

namespace meshstore::store_nodes {
namespace {

// A volume node's volumes, as registered, and where they are registered.
struct HostedVolumes {
  std::string joined;  // non-empty once joined
  std::vector<wire::VolumeInfo> infos;
  std::vector<protocol::storage_volume_actor> volumes;
  protocol::controller_actor controller;
  caf::actor_addr gone;  // the controller that went down, until replaced
  // Since when the node rejoins a controller its ProcMesh starts again
  // (relayed stores only); unset while joined.
  std::optional<std::chrono::steady_clock::time_point> down_since;
};

// Registers `hosted`'s volumes with the controller and strategy the
// relay directory hands out now: one bounded attempt.
Status register_again(caf::actor_system& sys, const NodeSpec& spec, HostedVolumes& hosted) {
  store::VolumeHost answer;
  MESHSTORE_RETURN_IF_ERROR(store::ask_directory(
      sys, caf::actor_cast<protocol::directory_actor>(spec.directory),
      std::chrono::milliseconds(250), "the store at " + spec.address, &answer, hosted.gone));
  const auto timeout = std::min(std::chrono::milliseconds(spec.request_timeout_ms),
                                std::chrono::milliseconds(10000));
  for (std::size_t i = 0; i < hosted.volumes.size(); ++i) {
    const auto& info = hosted.infos[i];
    const std::string what = "register volume '" + info.volume_id + "' again";
    MESHSTORE_RETURN_IF_ERROR(store::ask_ok(sys, answer.controller, timeout, what,
                                            protocol::register_volume_atom::value, info,
                                            hosted.volumes[i]));
    MESHSTORE_RETURN_IF_ERROR(store::ask_ok(sys, answer.strategy, timeout, what,
                                            protocol::register_volume_atom::value, info,
                                            hosted.volumes[i]));
  }
  hosted.controller = std::move(answer.controller);
  return Status();
}

// Hosts this process's volumes of `spec`'s store and registers them
// (blocks this scheduler thread while the controller registers them, a
// few ms): what the node says once joined.
Result<std::string> join_volumes(volume_node_actor::pointer self, int rank, const NodeSpec& spec,
                                 HostedVolumes& hosted) {
  auto runtime = internal::worker_runtime();
  if (!runtime) return rank_error(rank, Errc::unavailable, "ProcMesh::serve is not running");
  const StoreOptions o = node_options(spec, rank);
  store::VolumeHost h = node_volume_host(runtime.get(), o, spec);
  h.awaits_failover = spec.relays;
  Status s = store::ask_directory(
      runtime->system(), caf::actor_cast<protocol::directory_actor>(spec.directory),
      std::chrono::milliseconds(spec.request_timeout_ms), "the store at " + spec.address, &h);
  std::vector<caf::actor> made;
  Result<std::vector<protocol::storage_volume_actor>> volumes = s;
  if (s.ok()) volumes = store::host_volumes(h, &made, &hosted.infos);
  if (!volumes.ok()) {
    for (auto& v : made) caf::anon_send_exit(v, caf::exit_reason::user_shutdown);
    return volumes.status().with_context("rank " + std::to_string(rank) + " hosting volumes");
  }
  for (auto& v : made) self->link_to(v);
  hosted.volumes = std::move(volumes).value();
  if (spec.relays) {
    hosted.controller = h.controller;
    self->monitor(h.controller);
  }
  return "rank " + std::to_string(rank) + " hosts " + std::to_string(hosted.volumes.size()) +
         " volume(s) of " + spec.address;
}

}  // namespace

volume_node_actor::behavior_type volume_node(volume_node_actor::pointer self, int rank,
                                             NodeSpec spec) {
  // It joins at once, as a store node does: one that supervision spawned
  // again is asked by no one, and its volumes rejoin the store (empty),
  // once the controller, which may be starting again too, is up.
  caf::anon_send(self, volume_join_atom::value);
  auto hosted = std::make_shared<HostedVolumes>();
  // Under a relay, the controller's death is waited out: the volumes
  // register again with the controller the ProcMesh starts again, which
  // rebuilds its index from them, for up to the reconnect timeout. One
  // stopped in order is the store closing.
  self->set_down_handler([=](caf::down_msg& msg) {
    if (!hosted->controller || msg.source != hosted->controller.address()) return;
    hosted->gone = hosted->controller.address();
    hosted->controller = nullptr;
    if (msg.reason == caf::exit_reason::user_shutdown || msg.reason == caf::exit_reason::normal) {
      return;
    }
    hosted->down_since = std::chrono::steady_clock::now();
    log::get("store")->warn(
        "rank {}: the store's controller went down; its volumes rejoin the "
        "one started again",
        rank);
    self->send(self, volume_rejoin_atom::value);
  });
  return {
      [=](volume_join_atom) -> caf::result<std::string> {
        if (!hosted->joined.empty()) return hosted->joined;
        auto joined = join_volumes(self, rank, spec, *hosted);
        if (!joined.ok()) {
          if (try_again_soon(spec, hosted->down_since, joined.status())) {
            caf::delayed_anon_send(self, std::chrono::milliseconds(20), volume_join_atom::value);
          }
          return internal::to_caf_error(joined.status());
        }
        hosted->down_since.reset();
        hosted->joined = std::move(joined).value();
        return hosted->joined;
      },
      [=](volume_rejoin_atom) {
        if (!hosted->down_since) return;
        auto runtime = internal::worker_runtime();
        if (!runtime) return;
        // Blocks this scheduler thread for one bounded attempt.
        const Status s = register_again(runtime->system(), spec, *hosted);
        auto log = log::get("store");
        const auto waited = std::chrono::steady_clock::now() - *hosted->down_since;
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(waited).count();
        if (s.ok()) {
          hosted->down_since.reset();
          self->monitor(hosted->controller);
          log->info("rank {}: {} volume(s) rejoined the store's controller after {} ms", rank,
                    hosted->volumes.size(), ms);
          return;
        }
        if (ms >= spec.reconnect_timeout_ms) {
          hosted->down_since.reset();
          log->error(
              "rank {}: no controller came back within {} ms ({}); this process's volumes "
              "serve no store",
              rank, spec.reconnect_timeout_ms, s.to_string());
          return;
        }
        self->delayed_send(self, std::chrono::milliseconds(20), volume_rejoin_atom::value);
      },
  };
}

}  // namespace meshstore::store_nodes
