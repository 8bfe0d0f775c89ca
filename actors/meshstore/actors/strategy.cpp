#include <unordered_map>

#include "meshstore/actors/strategy_actor.hpp"
#include "meshstore/internal/caf_glue.hpp"

namespace meshstore::actors {
namespace {

using internal::to_caf_error;

struct StrategyState {
  static inline const char* name = "meshstore.strategy";
  StrategyPolicy policy;
  std::vector<wire::VolumeInfo> infos;
  std::unordered_map<std::string, storage_volume_actor> volumes;
};

strategy_actor::behavior_type strategy_impl(strategy_actor::stateful_pointer<StrategyState> self,
                                            StrategyPolicy policy) {
  self->state.policy = std::move(policy);
  return {
      [=](register_volume_atom, const wire::VolumeInfo& info,
          storage_volume_actor v) -> caf::result<caf::ok_atom> {
        auto& st = self->state;
        if (!st.volumes.emplace(info.volume_id, std::move(v)).second) {
          return to_caf_error(Status(Errc::invalid_argument, "strategy: volume '" + info.volume_id +
                                                                 "' is already registered"));
        }
        st.infos.push_back(info);
        return caf::ok_atom::value;
      },
      [=](select_atom,
          const wire::ClientInfo& client) -> caf::result<wire::VolumeInfo, storage_volume_actor> {
        auto& st = self->state;
        auto id = st.policy(client, st.infos);
        if (!id.ok()) return to_caf_error(id.status());
        for (const auto& info : st.infos) {
          if (info.volume_id == *id) return {info, st.volumes.at(*id)};
        }
        return to_caf_error(Status(Errc::unavailable,
                                   "strategy chose volume '" + *id + "', which is not registered"));
      },
  };
}

}  // namespace

StrategyPolicy singleton_policy() {
  return [](const wire::ClientInfo& client,
            const std::vector<wire::VolumeInfo>& volumes) -> Result<std::string> {
    if (volumes.empty()) {
      return Status(Errc::unavailable,
                    "strategy 'singleton': no volume registered yet (client rank " +
                        std::to_string(client.rank) + ")");
    }
    return volumes.front().volume_id;
  };
}

Result<StrategyPolicy> policy_by_name(const std::string& name) {
  if (name == "singleton") return singleton_policy();
  return Status(Errc::invalid_argument, "unknown strategy '" + name + "' (available: singleton)");
}

strategy_actor spawn_strategy(caf::actor_system& sys, StrategyPolicy policy) {
  return sys.spawn(strategy_impl, std::move(policy));
}

}  // namespace meshstore::actors
