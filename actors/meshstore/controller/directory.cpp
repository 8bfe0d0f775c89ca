#include <utility>

#include "meshstore/controller/controller.hpp"
#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/protocol/directory_actor.hpp"
#include "meshstore/version.hpp"

namespace meshstore::controller {
namespace {

// A hello from a client of `version`: refused when it cannot talk to this
// store.
Status check_version(const std::string& version) {
  if (versions_compatible(version, meshstore::version())) return Status();
  return Status(Errc::protocol_error,
                "meshstore " + version + " cannot talk to a store running " + meshstore::version());
}

struct DirectoryState {
  static inline const char* name = "meshstore.directory";
};

protocol::directory_actor::behavior_type directory_impl(
    protocol::directory_actor::stateful_pointer<DirectoryState> self,
    protocol::controller_actor controller, protocol::strategy_actor strategy,
    std::string strategy_name) {
  return {
      [=](protocol::hello_atom, const std::string& version)
          -> caf::result<protocol::controller_actor, protocol::strategy_actor, std::string> {
        if (auto s = check_version(version); !s.ok()) return internal::to_caf_error(s);
        return {controller, strategy, strategy_name};
      },
  };
}

struct RelayState {
  static inline const char* name = "meshstore.relay_directory";
  protocol::controller_actor controller;
  protocol::strategy_actor strategy;
  bool claimed = false;  // a controller was started for this store
};

protocol::relay_directory_actor::behavior_type relay_impl(
    protocol::relay_directory_actor::stateful_pointer<RelayState> self, std::string strategy_name) {
  self->set_down_handler([=](caf::down_msg& msg) {
    auto& st = self->state;
    if (st.controller && msg.source == st.controller.address()) {
      log::get("store")->warn(
          "the store's controller went down ({}): clients wait for the one its ProcMesh starts "
          "again",
          self->system().render(msg.reason));
      st.controller = nullptr;
      st.strategy = nullptr;
    }
  });
  return {
      [=](protocol::hello_atom, const std::string& version)
          -> caf::result<protocol::controller_actor, protocol::strategy_actor, std::string> {
        if (auto s = check_version(version); !s.ok()) return internal::to_caf_error(s);
        auto& st = self->state;
        if (!st.controller) {
          return internal::to_caf_error(
              Status(Errc::unavailable, st.claimed ? "the store's controller is starting again "
                                                     "(a failover is under way)"
                                                   : "the store's controller is not up yet"));
        }
        return {st.controller, st.strategy, strategy_name};
      },
      [=](protocol::claim_control_atom) { return std::exchange(self->state.claimed, true); },
      [=](protocol::set_control_atom, protocol::controller_actor& c, protocol::strategy_actor& s) {
        auto& st = self->state;
        if (st.controller) self->demonitor(st.controller.address());
        self->monitor(c);
        st.controller = std::move(c);
        st.strategy = std::move(s);
        st.claimed = true;
        return caf::ok_atom::value;
      },
  };
}

}  // namespace

protocol::relay_directory_actor spawn_relay_directory(caf::actor_system& sys,
                                                      std::string strategy_name) {
  return sys.spawn(relay_impl, std::move(strategy_name));
}

protocol::directory_actor spawn_directory(caf::actor_system& sys,
                                          protocol::controller_actor controller,
                                          protocol::strategy_actor strategy,
                                          std::string strategy_name) {
  return sys.spawn(directory_impl, std::move(controller), std::move(strategy),
                   std::move(strategy_name));
}

bool versions_compatible(const std::string& a, const std::string& b) {
  auto major_minor = [](const std::string& v) { return v.substr(0, v.rfind('.')); };
  return !a.empty() && major_minor(a) == major_minor(b);
}

}  // namespace meshstore::controller
