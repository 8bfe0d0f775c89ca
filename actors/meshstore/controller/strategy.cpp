#include <algorithm>
#include <map>
#include <unordered_map>

#include "meshstore/controller/controller.hpp"
#include "meshstore/protocol/strategy_actor.hpp"
#include "meshstore/protocol/wire_glue.hpp"

namespace meshstore::controller {
namespace {

using internal::to_caf_error;

struct StrategyState {
  static inline const char* name = "meshstore.strategy";
  StrategyPolicy policy;
  std::vector<wire::VolumeInfo> infos;
  std::unordered_map<std::string, protocol::storage_volume_actor> volumes;
  std::map<caf::actor_addr, std::string> by_addr;  // monitored volumes
};

protocol::strategy_actor::behavior_type strategy_impl(
    protocol::strategy_actor::stateful_pointer<StrategyState> self, StrategyPolicy policy) {
  self->state.policy = std::move(policy);
  // A dead volume leaves the choice: new puts go to a live one or fail clearly.
  self->set_down_handler([=](caf::down_msg& msg) {
    auto& st = self->state;
    auto it = st.by_addr.find(msg.source);
    if (it == st.by_addr.end()) return;
    st.volumes.erase(it->second);
    st.infos.erase(
        std::remove_if(st.infos.begin(), st.infos.end(),
                       [&](const wire::VolumeInfo& v) { return v.volume_id == it->second; }),
        st.infos.end());
    st.by_addr.erase(it);
  });
  return {
      [=](protocol::register_volume_atom, const wire::VolumeInfo& info,
          protocol::storage_volume_actor v) -> caf::result<caf::ok_atom> {
        auto& st = self->state;
        auto known = st.volumes.find(info.volume_id);
        if (known != st.volumes.end() && known->second.address() == v.address()) {
          return caf::ok_atom::value;  // the same volume again (a reconnect's retry)
        }
        if (known != st.volumes.end()) {
          return to_caf_error(Status(Errc::invalid_argument, "strategy: volume '" + info.volume_id +
                                                                 "' is already registered"));
        }
        self->monitor(v);
        st.by_addr[v.address()] = info.volume_id;
        st.volumes.emplace(info.volume_id, std::move(v));
        st.infos.push_back(info);
        return caf::ok_atom::value;
      },
      [=](protocol::select_atom, const wire::ClientInfo& client)
          -> caf::result<wire::VolumeInfo, protocol::storage_volume_actor> {
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

namespace {

std::string listing(const std::vector<wire::VolumeInfo>& volumes) {
  std::string out;
  for (const auto& v : volumes) {
    out += (out.empty() ? "" : ", ") + v.volume_id + "@" + v.host;
    if (v.local_rank >= 0) out += "/lr" + std::to_string(v.local_rank);
  }
  return out.empty() ? "none" : out;
}

Status none_fits(const std::string& strategy, const wire::ClientInfo& c, const std::string& want,
                 const std::vector<wire::VolumeInfo>& volumes) {
  return Status(Errc::unavailable, "strategy '" + strategy + "': no volume " + want +
                                       " for client rank " + std::to_string(c.rank) +
                                       " (registered: " + listing(volumes) + ")");
}

}  // namespace

StrategyPolicy singleton_policy() {
  return [](const wire::ClientInfo& client,
            const std::vector<wire::VolumeInfo>& volumes) -> Result<std::string> {
    if (volumes.empty()) return none_fits("singleton", client, "registered yet", volumes);
    return volumes.front().volume_id;
  };
}

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> names = {"singleton", "controller_colocated", "per_host",
                                                 "per_local_rank"};
  return names;
}

Result<StrategyPolicy> policy_by_name(const std::string& name) {
  if (name == "singleton") return singleton_policy();
  if (name == "controller_colocated") {
    return StrategyPolicy([](const wire::ClientInfo& c,
                             const std::vector<wire::VolumeInfo>& volumes) -> Result<std::string> {
      std::vector<const wire::VolumeInfo*> server;
      for (const auto& v : volumes) {
        if (v.local_rank < 0) server.push_back(&v);
      }
      if (server.empty()) return none_fits("controller_colocated", c, "on the server", volumes);
      return server[static_cast<std::size_t>(c.rank) % server.size()]->volume_id;
    });
  }
  if (name == "per_host") {
    return StrategyPolicy([](const wire::ClientInfo& c,
                             const std::vector<wire::VolumeInfo>& volumes) -> Result<std::string> {
      for (const auto& v : volumes) {
        if (v.host == c.host) return v.volume_id;
      }
      return none_fits("per_host", c, "on host '" + c.host + "'", volumes);
    });
  }
  if (name == "per_local_rank") {
    return StrategyPolicy([](const wire::ClientInfo& c,
                             const std::vector<wire::VolumeInfo>& volumes) -> Result<std::string> {
      if (c.local_rank >= 0) {
        for (const auto& v : volumes) {
          if (v.host == c.host && v.local_rank == c.local_rank) return v.volume_id;
        }
        return none_fits("per_local_rank", c,
                         "on host '" + c.host + "' for local rank " + std::to_string(c.local_rank),
                         volumes);
      }
      // A process that is not one of the ranks (a single controller, a
      // tool) hosts no volume: it writes to its host's volume of the lowest
      // local rank, as a rank of that host would read it.
      const wire::VolumeInfo* lowest = nullptr;
      for (const auto& v : volumes) {
        if (v.host == c.host && v.local_rank >= 0 && (!lowest || v.local_rank < lowest->local_rank))
          lowest = &v;
      }
      if (lowest) return lowest->volume_id;
      return none_fits("per_local_rank", c,
                       "on host '" + c.host +
                           "' (a client without a local rank writes to its "
                           "host's volume of the lowest local rank)",
                       volumes);
    });
  }
  std::string known;
  for (const auto& n : strategy_names()) known += (known.empty() ? "" : ", ") + n;
  return Status(Errc::invalid_argument,
                "unknown strategy '" + name + "' (available: " + known + ")");
}

std::vector<wire::VolumeInfo> volumes_for(const std::string& name, const ProcessRole& role,
                                          int server_volumes) {
  std::vector<wire::VolumeInfo> out;
  auto add = [&](std::string id, int local_rank) {
    wire::VolumeInfo v;
    v.volume_id = std::move(id);
    v.host = role.host;
    v.local_rank = local_rank;
    out.push_back(std::move(v));
  };
  if (name == "singleton" || name == "controller_colocated") {
    if (role.is_server) {
      const int n = name == "singleton" ? 1 : server_volumes;
      for (int i = 0; i < n; ++i) add("volume-" + std::to_string(i), -1);
    }
  } else if (name == "per_host") {
    if (role.local_rank == 0) add("host:" + role.host, 0);
  } else if (name == "per_local_rank") {
    if (role.local_rank >= 0)
      add("host:" + role.host + "/lr" + std::to_string(role.local_rank), role.local_rank);
  }
  return out;
}

protocol::strategy_actor spawn_strategy(caf::actor_system& sys, StrategyPolicy policy) {
  return sys.spawn(strategy_impl, std::move(policy));
}

}  // namespace meshstore::controller
