#include "meshstore/controller/controller.hpp"
#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/protocol/directory_actor.hpp"
#include "meshstore/version.hpp"

namespace meshstore::controller {
namespace {

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
        if (!versions_compatible(version, meshstore::version())) {
          return internal::to_caf_error(Status(
              Errc::protocol_error,
              "meshstore " + version + " cannot talk to a store running " + meshstore::version()));
        }
        return {controller, strategy, strategy_name};
      },
  };
}

}  // namespace

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
