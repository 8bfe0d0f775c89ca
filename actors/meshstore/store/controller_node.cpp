// The process that runs a store's controller (the mesh
// "meshstore.controller", StorePlacement::controller_process): starts the
// controller and strategy, again after its process was started again,
// and hands them to the store's relay directory.

#include <chrono>
#include <utility>
#include <vector>

#include "meshstore/controller/controller.hpp"
#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/protocol/actor_types.hpp"
#include "meshstore/protocol/directory_actor.hpp"
#include "meshstore/store/store_nodes.hpp"

namespace meshstore::store_nodes {
namespace {

struct ControllerNode {
  std::string joined;  // non-empty once joined
  bool starting = false;
  std::vector<caf::typed_response_promise<std::string>> waiting;
  std::vector<caf::actor> made;  // the controller, the strategy, their volumes
};

// Starts the controller, strategy and volumes of `spec` in this process
// once the relay said whether the store had a controller; `done` is told
// the outcome once the relay has them.
void start_control(controller_node_actor::pointer self, int rank, const ControlSpec& spec,
                   std::shared_ptr<ControllerNode> node, std::function<void(Status)> done) {
  auto relay = caf::actor_cast<protocol::relay_directory_actor>(spec.directory);
  const auto timeout = std::chrono::milliseconds(spec.node.request_timeout_ms);
  self->request(relay, timeout, protocol::claim_control_atom::value)
      .then(
          [=](bool had) {
            auto runtime = internal::worker_runtime();
            if (!runtime) {
              return done(rank_error(rank, Errc::unavailable, "ProcMesh::serve is not running"));
            }
            auto& sys = runtime->system();
            controller::ControllerOptions copts;
            copts.replicas = static_cast<std::uint32_t>(spec.replicas);
            copts.repair_share = static_cast<double>(spec.repair_share_ppm) / 1e6;
            copts.rebuild_grace = std::chrono::milliseconds(spec.rebuild_timeout_ms);
            copts.took_over = had;  // started again: the index comes back from the volumes
            auto ctl = controller::spawn_controller(sys, copts);
            auto strategy =
                controller::spawn_strategy(sys, controller::policy_by_name(spec.strategy).value());
            node->made = {caf::actor_cast<caf::actor>(ctl), caf::actor_cast<caf::actor>(strategy)};
            for (auto& a : node->made) self->link_to(a);
            if (had) {
              log::get("store")->warn(
                  "the store's controller starts again in this process; its index comes back "
                  "from the volumes that survived");
            }
            // The volumes that go with the controller (singleton,
            // controller_colocated). Blocks this scheduler thread while
            // they register (a few ms).
            StoreOptions o = node_options(spec.node, rank);
            o.placement.local_rank = -1;
            store::VolumeHost h = node_volume_host(runtime.get(), o, spec.node);
            h.controller = ctl;
            h.strategy = strategy;
            h.strategy_name = spec.strategy;
            h.is_server = true;
            std::vector<caf::actor> volumes;
            auto hosted = store::host_volumes(h, &volumes);
            for (auto& v : volumes) {
              self->link_to(v);
              node->made.push_back(v);
            }
            if (!hosted.ok()) return done(hosted.status().with_context("hosting volumes"));
            self->request(relay, timeout, protocol::set_control_atom::value, ctl, strategy)
                .then([=](caf::ok_atom) { done(Status()); },
                      [=](caf::error& e) { done(internal::from_caf_error(e, "the relay")); });
          },
          [=](caf::error& e) { done(internal::from_caf_error(e, "the relay")); });
}

}  // namespace

controller_node_actor::behavior_type controller_node(controller_node_actor::pointer self, int rank,
                                                     ControlSpec spec) {
  // It joins at once: one that supervision spawned again is asked by no
  // one.
  caf::anon_send(self, controller_join_atom::value);
  auto node = std::make_shared<ControllerNode>();
  // The node's links take the controller down with a node that fails;
  // one that stops normally stops them here.
  auto stop_all = [node] {
    for (auto& a : node->made) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    node->made.clear();
  };
  self->attach_functor([stop_all](const caf::error&) { stop_all(); });
  return {
      [=](controller_join_atom) -> caf::result<std::string> {
        if (!node->joined.empty()) return node->joined;
        auto rp = self->make_response_promise<std::string>();
        node->waiting.push_back(rp);
        if (node->starting) return rp;
        node->starting = true;
        start_control(self, rank, spec, node, [=](Status s) {
          node->starting = false;
          if (s.ok()) {
            node->joined =
                "rank " + std::to_string(rank) + " runs the controller of " + spec.node.address;
          }
          auto waiting = std::exchange(node->waiting, {});
          for (auto& w : waiting) {
            if (s.ok()) {
              w.deliver(node->joined);
            } else {
              w.deliver(internal::to_caf_error(s.with_context("rank " + std::to_string(rank))));
            }
          }
          if (!s.ok()) self->quit(internal::to_caf_error(s));
        });
        return rp;
      },
      [=](controller_stop_atom) {
        stop_all();
        self->quit();
      },
  };
}

}  // namespace meshstore::store_nodes
