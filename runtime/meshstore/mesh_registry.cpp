// Rank 0's mesh registry (internal/mesh_registry.hpp): collects each
// mesh's members by rank, keeps the job's named singletons, its
// rendezvous values and the ranks' doors.
#include "meshstore/internal/mesh_registry.hpp"

#include <algorithm>

#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/internal/mesh_runtime.hpp"

namespace meshstore::internal {
namespace {

// Whether ranks [first, first + n) of mesh `name` are free to join.
Status check_slots(const Pending& p, const std::string& name, std::int32_t first, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const auto r = static_cast<std::size_t>(first) + i;
    if (first < 0 || r >= p.slots.size()) {
      return Status(Errc::out_of_range, "mesh '" + name + "': rank " + std::to_string(r) +
                                            " outside a world of " +
                                            std::to_string(p.slots.size()));
    }
    if (p.slots[r]) {
      return Status(Errc::invalid_argument,
                    "mesh '" + name + "': rank " + std::to_string(r) + " joined twice");
    }
  }
  return Status();
}

// Mesh `name` cannot be made: every rank waiting for it gets `err`, and
// so does every later one (the name stays refused).
caf::error refuse_mesh(RegistryState& st, const std::string& name, const Status& why) {
  auto err = to_caf_error(why);
  if (auto it = st.pending.find(name); it != st.pending.end()) {
    for (auto& w : it->second.waiting) w.deliver(err);
    st.pending.erase(it);
  }
  st.failed.emplace(name, err);
  return err;
}

// A rank's members of mesh `name` (ranks first..): answered with every
// rank's once all are in.
caf::result<std::vector<caf::actor>> join_mesh(registry_actor::stateful_pointer<RegistryState> self,
                                               int world, std::chrono::milliseconds timeout,
                                               const std::string& name, std::int32_t first,
                                               const std::vector<caf::actor>& actors,
                                               const std::vector<std::string>& interface) {
  auto& st = self->state;
  if (auto f = st.failed.find(name); f != st.failed.end()) return f->second;
  if (st.complete.count(name) != 0) {
    return to_caf_error(Status(Errc::invalid_argument, "mesh '" + name + "' is already complete"));
  }
  auto [it, fresh] = st.pending.try_emplace(name);
  auto& p = it->second;
  if (fresh) {
    p.slots.resize(static_cast<std::size_t>(world));
    self->delayed_send(self, timeout, mesh_expire_atom::value, name);
  }
  if (p.interface_rank < 0) {
    p.interface = interface;
    p.interface_rank = first;
  } else if (p.interface != interface) {
    return refuse_mesh(
        st, name,
        Status(Errc::invalid_argument, "mesh '" + name + "': rank " + std::to_string(first) +
                                           " spawned it with another actor interface than rank " +
                                           std::to_string(p.interface_rank) + " (" +
                                           interface_text(interface) + " vs " +
                                           interface_text(p.interface) + ")"));
  }
  // Check every slot first: a rejected join leaves nothing behind.
  if (auto s = check_slots(p, name, first, actors.size()); !s.ok()) {
    return to_caf_error(s);
  }
  for (std::size_t i = 0; i < actors.size(); ++i)
    p.slots[static_cast<std::size_t>(first) + i] = actors[i];
  auto rp = self->make_response_promise<std::vector<caf::actor>>();
  p.waiting.push_back(rp);
  if (std::all_of(p.slots.begin(), p.slots.end(),
                  [](const caf::actor& a) { return static_cast<bool>(a); })) {
    auto all = std::move(p.slots);
    for (auto& w : p.waiting) w.deliver(all);
    st.complete.emplace(name, std::move(all));
    st.pending.erase(it);
  }
  return rp;
}

// The named singleton `name`: made here, on rank 0, by its first caller
// (of any rank); the same actor for every later one.
caf::result<caf::actor> single(registry_actor::stateful_pointer<RegistryState> self,
                               const std::shared_ptr<std::vector<caf::actor>>& made,
                               const std::string& name, const std::string& type,
                               const std::vector<std::string>& interface, caf::message& args) {
  auto& st = self->state;
  const std::string ctx = "singleton '" + name + "'";
  if (auto it = st.singles.find(name); it != st.singles.end()) {
    if (it->second.type != type) {
      return to_caf_error(Status(Errc::invalid_argument, ctx + " is of type '" + it->second.type +
                                                             "', not '" + type + "'"));
    }
    if (it->second.interface != interface) {
      return to_caf_error(
          Status(Errc::invalid_argument, ctx + " was spawned with another actor interface"));
    }
    return it->second.actor;
  }
  if (st.pending.count(name) || st.complete.count(name) || st.failed.count(name)) {
    return to_caf_error(Status(Errc::invalid_argument, ctx + ": spawn() made a mesh of that name"));
  }
  auto a = spawn_named(self->context(), type, interface, args, ctx + " on rank 0");
  if (!a.ok()) return to_caf_error(a.status());
  made->push_back(*a);
  st.singles.emplace(name, RegistryState::Single{type, interface, *a});
  return *a;
}

// The rendezvous: `key`'s value, set once; the readers waiting for it
// get it now.
caf::result<bool> set_value(registry_actor::stateful_pointer<RegistryState> self,
                            const std::string& key, const std::string& text,
                            const caf::actor& actor) {
  const std::pair<std::string, caf::actor> value{text, actor};
  auto& st = self->state;
  if (!st.values.emplace(key, value).second) {
    return to_caf_error(Status(Errc::invalid_argument, "rendezvous: '" + key + "' is set already"));
  }
  if (auto it = st.value_waiters.find(key); it != st.value_waiters.end()) {
    for (auto& w : it->second) w.deliver(value.first, value.second);
    st.value_waiters.erase(it);
  }
  return true;
}

// A rank that could not make its member of `name`: every rank's spawn of
// it fails now, naming that rank and why, instead of waiting for it until
// the timeout; the name stays refused.
void fail_mesh(registry_actor::stateful_pointer<RegistryState> self, const std::string& name,
               std::int32_t rank, const caf::error& why) {
  auto& st = self->state;
  if (st.complete.count(name) || st.failed.count(name)) return;
  const auto reason = from_caf_error(why, "");
  refuse_mesh(st, name,
              Status(reason.code(), "mesh '" + name + "': rank " + std::to_string(rank) +
                                        " could not spawn its member: " + reason.message()));
}

}  // namespace

registry_actor::behavior_type registry_impl(registry_actor::stateful_pointer<RegistryState> self,
                                            int world, std::chrono::milliseconds timeout,
                                            std::weak_ptr<MeshCaller> owner) {
  // The singletons go with the registry (with the mesh, on rank 0). Not
  // through self->state: it is gone when attached functors run.
  auto made = std::make_shared<std::vector<caf::actor>>();
  self->attach_functor([made] {
    for (auto& a : *made) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  });
  return {
      [=](mesh_join_atom, const std::string& name, std::int32_t first,
          const std::vector<caf::actor>& actors, const std::vector<std::string>& interface) {
        return join_mesh(self, world, timeout, name, first, actors, interface);
      },
      [=](mesh_expire_atom, const std::string& name) {
        auto it = self->state.pending.find(name);
        if (it == self->state.pending.end()) return;
        std::string missing;
        for (std::size_t r = 0; r < it->second.slots.size(); ++r) {
          if (!it->second.slots[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
        auto err = to_caf_error(Status(
            Errc::timeout, "mesh '" + name + "': ranks " + missing + " did not join in time"));
        for (auto& w : it->second.waiting) w.deliver(err);
        self->state.pending.erase(it);
      },
      // A rank closing its Mesh in good order: its members going away next
      // is not a failure for the owner's supervision.
      [=](mesh_leave_atom, std::int32_t rank) {
        self->state.doors.erase(rank);
        if (auto c = owner.lock()) c->departed(rank);
        return true;
      },
      // A rank > 0 of a launched job names its door and learns those of
      // the ranks before it, which it connects to (one at a time here: of
      // any two ranks, the later learns the earlier's door).
      [=](mesh_door_atom, std::int32_t rank, const std::string& door) {
        std::vector<std::string> before;
        for (const auto& [r, d] : self->state.doors) {
          if (r != rank) before.push_back(d);
        }
        if (!door.empty()) self->state.doors[rank] = door;
        return before;
      },
      [=](mesh_single_atom, const std::string& name, const std::string& type,
          const std::vector<std::string>& interface,
          caf::message& args) { return single(self, made, name, type, interface, args); },
      [=](mesh_set_atom, const std::string& key, const std::string& text, const caf::actor& actor) {
        return set_value(self, key, text, actor);
      },
      [=](mesh_fail_atom, const std::string& name, std::int32_t rank, const caf::error& why) {
        fail_mesh(self, name, rank, why);
      },
      // Answered once the key is set; the reader's own timeout bounds it.
      [=](mesh_value_atom, const std::string& key) -> caf::result<std::string, caf::actor> {
        auto& st = self->state;
        if (auto it = st.values.find(key); it != st.values.end()) {
          return {it->second.first, it->second.second};
        }
        auto rp = self->make_response_promise<std::string, caf::actor>();
        st.value_waiters[key].push_back(rp);
        return rp;
      },
  };
}

}  // namespace meshstore::internal
