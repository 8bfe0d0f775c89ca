// Spawning actor meshes on a ProcMesh's processes: each member by type
// name in its process, gathered all or nothing, restarted in place under
// supervision; and get_or_spawn's named singletons.
#include <atomic>
#include <mutex>

#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/internal/mesh_runtime.hpp"
#include "meshstore/internal/proc_shared.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/proc_mesh.hpp"

namespace meshstore {
namespace {

using namespace internal::proc;

// Inside a job on a caller actor: sends (xs...) to `target` (serving
// `rank`) and calls `finish` once with its reply (R) or an error naming
// the rank: CAF's (mesh_rank_error), or the target's death as the
// caller's monitor sees it (`down_prefix` + "went down (reason)"), at once
// rather than after the timeout.
template <class R, class Handle, class F, class... Ts>
void watched_request(caf::event_based_actor* self, const Handle& target, int rank,
                     std::chrono::milliseconds timeout, const std::string& down_prefix, F finish,
                     const Ts&... xs) {
  auto done = std::make_shared<bool>(false);
  auto watch_id = std::make_shared<std::uint64_t>(0);
  internal::MeshCaller::watch(
      self, target.address(),
      [=](const Status& down) {
        if (*done) return;
        *done = true;
        finish(Status(down.code(), down_prefix + down.message()));
      },
      *watch_id);
  self->request(target, timeout, xs...)
      .then(
          [=](R r) {
            internal::MeshCaller::settled(self, *watch_id);
            if (*done) return;
            *done = true;
            finish(std::move(r));
          },
          [=](caf::error& e) {
            internal::MeshCaller::settled(self, *watch_id);
            if (*done) return;
            *done = true;
            finish(internal::mesh_rank_error(rank, e));
          });
}

// On a mesh's caller: asks `proc` (the process of member `rank`) to spawn
// it; `done` gets the actor or an error naming the rank, at once when the
// process goes away meanwhile (a request to a dead remote actor would only
// time out).
void spawn_on(caf::event_based_actor* self, const proc_actor& proc, int rank,
              std::chrono::milliseconds timeout, const std::string& mesh, const std::string& type,
              const std::vector<std::string>& interface, const caf::message& args,
              std::function<void(Result<caf::actor>)> done) {
  const std::string who = "rank " + std::to_string(rank);
  if (!proc) return done(Status(Errc::unavailable, who + ": its process is gone"));
  watched_request<caf::actor>(self, proc, rank, timeout, who + ": its process ", std::move(done),
                              proc_spawn_atom::value, mesh, type, interface, args);
}

// Waits for every member's spawn. On a failure, the members made are
// stopped and the first failure is the answer.
Result<std::vector<caf::actor>> gather_members(std::vector<Future<caf::actor>> replies,
                                               std::chrono::milliseconds timeout) {
  auto all = when_all(std::move(replies)).get(timeout);
  std::vector<caf::actor> members;
  Status failed;
  if (!all.ok()) {
    failed = all.status();
  } else {
    for (auto& r : *all) {
      if (r.ok()) {
        members.push_back(*r);
      } else if (failed.ok()) {
        failed = r.status();
      }
    }
  }
  if (failed.ok()) return members;
  for (auto& a : members) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  return failed;
}

// Where supervision respawns members: the processes of a mesh's members,
// as they are when the restart runs (a worker started again joins anew).
struct Homes {
  std::shared_ptr<Joining> joining;
  std::vector<int> ranks;  // member -> process rank
  std::weak_ptr<internal::MeshCaller> caller;
  bool relaunches = false;  // LaunchSpec::max_relaunches > 0
  std::chrono::milliseconds join_timeout{0};

  // Member `m`'s process now, and how often it has joined.
  std::pair<proc_actor, std::uint64_t> now(int m) const {
    const auto r = static_cast<std::size_t>(ranks[static_cast<std::size_t>(m)]);
    std::lock_guard<std::mutex> lock(joining->mu);
    return {joining->procs[r], joining->joins[r]};
  }

  // On the caller: `then` gets member `m`'s process once it has joined
  // more than `seen` times (at once if it has), or an empty handle when it
  // will not come back (it exited for good, the mesh stopped, or
  // join_timeout passed).
  void when_back(caf::event_based_actor* self, int m, std::uint64_t seen,
                 std::function<void(caf::event_based_actor*, proc_actor)> then) const {
    const auto r = static_cast<std::size_t>(ranks[static_cast<std::size_t>(m)]);
    auto once = std::make_shared<std::atomic<bool>>(false);
    auto fire = [caller = caller, once, then](proc_actor p) {
      if (once->exchange(true)) return;
      if (auto c = caller.lock()) {
        (void)c->post([then, p](caf::event_based_actor* self) { then(self, p); }, "restart");
      }
    };
    proc_actor back;
    bool settled = false;  // back, or never coming back
    {
      std::lock_guard<std::mutex> lock(joining->mu);
      if (joining->joins[r] > seen && joining->procs[r]) {
        back = joining->procs[r];
        settled = true;
      } else if (joining->stopping || (!joining->coming_back[r] && !joining->exited[r].empty())) {
        settled = true;
      } else {
        joining->waiters[r].push_back(fire);
      }
    }
    if (settled) return then(self, back);  // outside the lock: `then` may stop the mesh
    if (auto c = caller.lock()) {
      (void)c->post([fire](caf::event_based_actor*) { fire(proc_actor()); }, "restart",
                    join_timeout);
    }
  }
};

// How supervision restarts member `rank` of a mesh: spawned again in its
// process, with the same arguments; when that process is gone and may be
// started again (LaunchSpec::max_relaunches), in the new one once it joins.
internal::MeshCaller::Respawn restarter(Homes homes, std::string name, std::string type,
                                        std::vector<std::string> interface,
                                        std::function<caf::message(int)> args,
                                        std::chrono::milliseconds timeout) {
  return [homes = std::move(homes), name = std::move(name), type = std::move(type),
          interface = std::move(interface), args = std::move(args),
          timeout](caf::event_based_actor* self, int rank, std::function<void(caf::actor)> done) {
    auto give_up = [done, name, rank](const Status& why) {
      log::get("proc")->warn("mesh '{}': cannot restart rank {}: {}", name, rank, why.to_string());
      done(caf::actor());
    };
    auto finish = [done, give_up](Result<caf::actor> a) {
      if (!a.ok()) return give_up(a.status());
      done(std::move(a).value());
    };
    const auto now = homes.now(rank);
    const std::uint64_t seen = now.second;
    const auto msg = args(rank);
    spawn_on(self, now.first, rank, timeout, name, type, interface, msg, [=](Result<caf::actor> a) {
      if (a.ok() || !homes.relaunches) return finish(std::move(a));
      // Its process is gone: wait for the one started in its place.
      homes.when_back(self, rank, seen, [=](caf::event_based_actor* self, proc_actor fresh) {
        if (!fresh) {
          return give_up(Status(Errc::unavailable, "its process did not come back"));
        }
        spawn_on(self, fresh, rank, timeout, name, type, interface, msg, finish);
      });
    });
  };
}

// Makes a member of the registered type `type` in this process, with
// (its rank, the spawn's arguments): what spawn() by name does under
// local() and from_env.
internal::MemberMaker named_maker(
    const std::string& mesh, std::string type,
    std::function<std::vector<std::string>(caf::actor_system&)> interface_of,
    std::function<caf::message(int)> args) {
  const std::string ctx = "ProcMesh::spawn '" + mesh + "', rank ";
  return [type = std::move(type), interface_of = std::move(interface_of), args = std::move(args),
          ctx](caf::execution_unit* host, int rank) -> Result<caf::actor> {
    auto msg = args(rank);
    return internal::spawn_named(host, type, interface_of(host->system()), msg,
                                 ctx + std::to_string(rank));
  };
}

}  // namespace

Result<Extent> ProcMesh::member_shape() const {
  return extent_.dims().empty() ? Extent::line(1).slice({{"ranks", 0}})
                                : Extent::make(extent_.dims());
}

Result<ProcMesh::Spawned> ProcMesh::spawn_members(
    Supervision supervision, const std::string& name, const std::string& type,
    std::function<std::vector<std::string>(caf::actor_system&)> interface_of,
    std::function<caf::message(int)> args) {
  if (!shared_) return Status(Errc::shutdown, "ProcMesh::spawn: an empty ProcMesh");
  if (name.empty()) return Status(Errc::invalid_argument, "ProcMesh::spawn: mesh name is empty");
  if (type.empty()) {
    return Status(Errc::invalid_argument, "ProcMesh::spawn '" + name + "': actor type is empty");
  }
  if (!shared_->joining) {
    // local() or from_env: the members are made in this process.
    return spawn_made(std::move(supervision), name, interface_of,
                      named_maker(name, type, interface_of, std::move(args)));
  }
  std::vector<proc_actor> procs;
  std::shared_ptr<internal::MeshCaller> caller;
  std::vector<std::string> interface;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (shared_->stopped) {
      return Status(Errc::shutdown, "ProcMesh::spawn '" + name + "': the processes were stopped");
    }
    if (auto s = shared_->caller->check_owner(supervision.owner); !s.ok()) {
      return s.with_context("ProcMesh::spawn '" + name + "'");
    }
    if (!shared_->names.insert(name).second) {
      return Status(Errc::invalid_argument,
                    "ProcMesh::spawn: mesh '" + name + "' was already spawned here");
    }
    caller = shared_->caller;
    interface = interface_of(shared_->runtime->system());
    std::lock_guard<std::mutex> jl(shared_->joining->mu);
    for (int r : extent_.ranks())
      procs.push_back(shared_->joining->procs[static_cast<std::size_t>(r)]);
  }
  const auto timeout = shared_->options.request_timeout;
  const int n = size();
  // Every process spawns its member at once, from the mesh's caller.
  std::vector<Future<caf::actor>> replies;
  for (int i = 0; i < n; ++i) {
    auto p = std::make_shared<Promise<caf::actor>>();
    replies.push_back(p->future());
    auto proc = procs[static_cast<std::size_t>(i)];
    auto msg = args(i);
    auto posted = caller->post(
        [=](caf::event_based_actor* self) {
          spawn_on(self, proc, i, timeout, name, type, interface, msg,
                   [p](Result<caf::actor> a) { p->set(std::move(a)); });
        },
        "spawn");
    if (!posted.ok()) p->set_error(posted);
  }
  auto members = gather_members(std::move(replies), timeout + std::chrono::seconds(5));
  if (!members.ok()) {
    // Nothing half-spawned stays: the name is free again.
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->names.erase(name);
    return Status(members.status().code(),
                  "ProcMesh::spawn '" + name + "': " + members.status().message());
  }
  Homes homes;
  homes.joining = shared_->joining;
  homes.ranks = extent_.ranks();
  homes.caller = caller;
  homes.relaunches = shared_->spec.max_relaunches > 0;
  homes.join_timeout = shared_->spec.join_timeout;
  auto respawn = restarter(std::move(homes), name, type, interface, args, timeout);
  auto shape = member_shape();
  if (!shape.ok()) return shape.status();
  Spawned out;
  out.id = caller->add_mesh(name, std::move(members).value(), true, std::move(supervision),
                            std::move(respawn));
  out.caller = std::move(caller);
  out.extent = std::move(shape).value();
  out.timeout = timeout;
  return out;
}

Result<ProcMesh::Spawned> ProcMesh::singleton(
    const std::string& name, const std::string& type,
    std::function<std::vector<std::string>(caf::actor_system&)> interface_of,
    std::function<caf::message(int)> args) {
  const std::string ctx = "ProcMesh::get_or_spawn '" + name + "'";
  if (!shared_) return Status(Errc::shutdown, "ProcMesh::get_or_spawn: an empty ProcMesh");
  if (size() == 0) return Status(Errc::invalid_argument, ctx + ": the view has no process");
  // One first spawn per name: a second caller waits here, then finds it.
  std::lock_guard<std::mutex> once(shared_->singleton_mu);
  std::shared_ptr<internal::ActorRuntime> runtime;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (shared_->stopped) return Status(Errc::shutdown, ctx + ": the processes were stopped");
    runtime = shared_->runtime;
  }
  const auto interface = interface_of(runtime->system());
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (auto it = shared_->singletons.find(name); it != shared_->singletons.end()) {
      if (it->second.type != type) {
        return Status(Errc::invalid_argument, ctx + ": it is a singleton of type '" +
                                                  it->second.type + "', not '" + type + "'");
      }
      if (it->second.interface != interface) {
        return Status(Errc::invalid_argument,
                      ctx + ": it was spawned with another actor interface");
      }
      return it->second.spawned;
    }
    if (shared_->names.count(name)) {
      return Status(Errc::invalid_argument, ctx + ": spawn() made a mesh of that name");
    }
  }
  if (!shared_->joining && !shared_->local) {
    // from_env: rank 0's registry makes it, for every rank.
    auto made = singleton_spmd(name, type, interface, args);
    if (!made.ok()) return Status(made.status().code(), ctx + ": " + made.status().message());
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->names.insert(name);
    shared_->singletons[name] = Shared::Singleton{type, interface, *made};
    return made;
  }
  // The first process of this view, as a point.
  std::vector<std::pair<std::string, Select>> first;
  for (const auto& dim : extent_.dims()) first.emplace_back(dim.first, 0);
  auto point = first.empty() ? Result<Extent>(extent_) : extent_.slice(first);
  if (!point.ok()) return point.status().with_context(ctx);
  ProcMesh one(shared_, std::move(point).value());
  auto made = one.spawn_members(default_supervision(), name, type, std::move(interface_of),
                                std::move(args));
  if (!made.ok()) return made.status();
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->singletons[name] = Shared::Singleton{type, interface, *made};
  return made;
}

}  // namespace meshstore
