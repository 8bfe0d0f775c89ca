#pragma once

// Actor meshes: one actor per rank, spawned collectively, addressed by rank,
// and messaged all at once with the replies gathered into one future. This
// header exposes CAF on purpose: a mesh's actors are the user's own CAF
// actors (typed behaviours).
//
//   auto mesh = meshstore::Mesh::from_env().value();      // under meshrun
//   // adder_impl(adder_actor::pointer self, int rank) -> adder_actor::behavior_type
//   auto adders = mesh.spawn<adder_actor>("adders", adder_impl).value();
//   auto sums = adders.broadcast<int>(add_atom::value, 1).get(10s);   // one reply per rank

#include <caf/all.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "meshstore/foreign_thread.hpp"
#include "meshstore/future.hpp"
#include "meshstore/launch_env.hpp"
#include "meshstore/result.hpp"

namespace meshstore {

namespace internal {
class ActorRuntime;
}  // namespace internal

/// How a mesh is joined.
struct MeshOptions {
  /// Deadline of registry requests and of each rank's reply to broadcast().
  std::chrono::milliseconds request_timeout{30000};
  /// Mesh::from_env: keep retrying rank 0's registry this long.
  std::chrono::milliseconds connect_timeout{30000};
  /// Actor scheduler threads; 0 = max(2, hardware threads), at most 8.
  int scheduler_threads = 0;
};

/// The actors of one spawn() across all ranks, by rank. Copyable; a handle
/// to remote actors, so keep it no longer than the Mesh it came from.
/// Thread-safe for concurrent use.
template <class Handle>
class ActorMesh {
 public:
  ActorMesh() = default;
  ActorMesh(caf::actor_system* sys, std::vector<Handle> actors, std::chrono::milliseconds timeout)
      : sys_(sys), actors_(std::move(actors)), timeout_(timeout) {}

  /// Number of ranks.
  int size() const noexcept { return static_cast<int>(actors_.size()); }
  /// The actor of `rank` (0 <= rank < size()).
  const Handle& at(int rank) const { return actors_.at(static_cast<std::size_t>(rank)); }

  /// Sends (xs...) to the actor of `rank`; its reply (of type R) or error,
  /// with the rank named, arrives in the future.
  template <class R, class... Ts>
  Future<R> ask(int rank, Ts... xs) const {
    if (rank < 0 || rank >= size()) {
      return make_error_future<R>(Status(
          Errc::out_of_range,
          "mesh: rank " + std::to_string(rank) + " outside [0, " + std::to_string(size()) + ")"));
    }
    auto p = std::make_shared<Promise<R>>();
    auto fut = p->future();
    auto target = at(rank);
    const auto timeout = timeout_;
    ForeignThreadGuard guard;  // ask() may be called from any thread
    sys_->spawn([=](caf::event_based_actor* self) {
      self->monitor(target);
      self->set_down_handler([=](caf::down_msg& m) {
        p->set_error(Status(Errc::unavailable, "rank " + std::to_string(rank) + " went down (" +
                                                   caf::to_string(m.reason) + ")"));
        self->quit();
      });
      self->request(target, timeout, xs...)
          .then(
              [=](R r) {
                p->set_value(std::move(r));
                self->quit();
              },
              [=](caf::error& e) {
                p->set_error(mesh_error(rank, e));
                self->quit();
              });
    });
    return fut;
  }

  /// Sends (xs...) to every rank's actor and gathers the replies (each of
  /// type R) in rank order. Fails with the first error, naming its rank.
  template <class R, class... Ts>
  Future<std::vector<R>> broadcast(Ts... xs) const {
    std::vector<Future<R>> replies;
    for (int r = 0; r < size(); ++r) replies.push_back(ask<R>(r, xs...));
    return gather(std::move(replies));
  }

 private:
  static Status mesh_error(int rank, const caf::error& e);
  caf::actor_system* sys_ = nullptr;
  std::vector<Handle> actors_;
  std::chrono::milliseconds timeout_{30000};
};

/// The ranks of a launched job as an actor runtime: every rank runs one
/// Mesh; spawn() is collective. Move-only; close() (or the destructor)
/// stops this rank's actors and its actor system.
/// Thread-safe: spawn() may be called from any thread (ranks must call the
/// spawns of one mesh in the same order).
class Mesh {
 public:
  /// Joins the job described by the launch environment (LaunchEnv): rank 0
  /// publishes the mesh registry on MASTER_ADDR at MESHSTORE_MESH_PORT
  /// (default MASTER_PORT + 2), the others connect with retry.
  static Result<Mesh> from_env(MeshOptions options = {});
  /// All `world_size` ranks in this process: spawn() makes every rank's
  /// actor here. For tests and single-process use.
  static Result<Mesh> local(int world_size, MeshOptions options = {});

  Mesh(Mesh&&) noexcept;
  Mesh& operator=(Mesh&&) noexcept;
  ~Mesh();

  int rank() const noexcept;
  int world_size() const noexcept;
  /// This rank's actor system (to spawn more of your own actors).
  caf::actor_system& system();

  /// Collective: spawns `fun(self, rank, xs...)` as this rank's member of mesh
  /// `name` (every rank of a local mesh, here), registers it, and waits
  /// until every rank has done the same. Errc::invalid_argument if `name`
  /// is empty or already used here; Errc::timeout naming the ranks still
  /// missing after the request timeout.
  template <class Handle, class F, class... Ts>
  Result<ActorMesh<Handle>> spawn(const std::string& name, F fun, Ts&&... xs) {
    // Checked before any actor exists: an open mesh, a fresh name.
    if (auto s = reserve(name); !s.ok()) return s;
    std::vector<caf::actor> mine;
    const int copies = is_local() ? world_size() : 1;
    {
      ForeignThreadGuard guard;  // spawn() may be called from any thread
      for (int i = 0; i < copies; ++i) {
        const int member_rank = is_local() ? i : rank();
        mine.push_back(caf::actor_cast<caf::actor>(system().spawn(fun, member_rank, xs...)));
      }
    }
    auto all = join(name, std::move(mine));
    if (!all.ok()) return all.status();
    std::vector<Handle> typed;
    for (auto& a : *all) typed.push_back(caf::actor_cast<Handle>(a));
    return ActorMesh<Handle>(&system(), std::move(typed), timeout());
  }

  /// Stops this rank's actors and actor system. Idempotent.
  void close();

 private:
  struct Impl;
  explicit Mesh(std::unique_ptr<Impl> impl);
  bool is_local() const noexcept;
  // Errc::shutdown when closed or moved from; Errc::invalid_argument for an
  // empty or already used name; else records the name.
  Status reserve(const std::string& name);
  std::chrono::milliseconds timeout() const noexcept;
  // Registers this rank's actors of mesh `name`; answers every rank's.
  Result<std::vector<caf::actor>> join(const std::string& name, std::vector<caf::actor> mine);
  std::unique_ptr<Impl> impl_;
};

namespace internal {
/// One place converting a rank's caf::error for meshes (defined in mesh.cpp).
Status mesh_rank_error(int rank, const caf::error& e);
}  // namespace internal

template <class Handle>
Status ActorMesh<Handle>::mesh_error(int rank, const caf::error& e) {
  return internal::mesh_rank_error(rank, e);
}

}  // namespace meshstore
