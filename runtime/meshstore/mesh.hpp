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
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
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
  /// Registers your own message types, so they cross processes:
  /// `[](caf::actor_system_config& cfg) { cfg.add_message_type<Point>("my::Point"); }`
  /// (each with an `inspect` overload). Every rank must register the same
  /// types under the same names. A type not registered travels within a
  /// process only; sent to another rank, the call fails.
  std::function<void(caf::actor_system_config&)> add_types;
};

namespace internal {

/// What a Mesh shares with its ActorMeshes: the members of every mesh it
/// spawned, and one long-lived caller actor that sends every request and
/// monitors the members it asked (so a rank that dies fails its calls at
/// once). Mesh::close() closes it: the caller stops, the member handles are
/// dropped, and every call after that answers Errc::shutdown, so an
/// ActorMesh may outlive its Mesh without touching a stopped actor system.
/// Thread-safe.
class MeshCaller {
 public:
  /// Work for the caller actor, run on it with the caller as `self`.
  using Job = std::function<void(caf::event_based_actor* self)>;

  explicit MeshCaller(caf::actor_system& sys);
  ~MeshCaller();
  MeshCaller(const MeshCaller&) = delete;
  MeshCaller& operator=(const MeshCaller&) = delete;

  /// Remembers a spawned mesh's members; answers its id.
  std::size_t add_mesh(std::vector<caf::actor> members);
  /// Member `rank` of mesh `id`; an empty handle once closed.
  caf::actor member(std::size_t id, int rank) const;
  /// Runs `job` on the caller actor; Errc::shutdown once closed.
  Status post(Job job, const std::string& what) const;
  /// Stops the caller and drops every handle. Idempotent.
  void close();

  /// Inside a job: monitors `target` (once per target) until settled(id);
  /// if it goes down first, `on_down` gets an unavailable Status ("went
  /// down (reason)"). Sets `id`.
  static void watch(caf::event_based_actor* self, const caf::actor_addr& target,
                    std::function<void(const Status&)> on_down, std::uint64_t& id);
  /// Inside a job: the request of watch `id` has its reply or error.
  static void settled(caf::event_based_actor* self, std::uint64_t id);

 private:
  mutable std::mutex mu_;  // guards caller_, meshes_
  caf::actor caller_;
  std::vector<std::vector<caf::actor>> meshes_;
};

/// One place converting a rank's caf::error for meshes (defined in mesh.cpp).
Status mesh_rank_error(int rank, const caf::error& e);

}  // namespace internal

/// The actors of one spawn() across all ranks, by rank. Copyable and
/// cheap; it may outlive the Mesh it came from: after Mesh::close() every
/// call answers Errc::shutdown. Thread-safe for concurrent use.
template <class Handle>
class ActorMesh {
 public:
  ActorMesh() = default;
  ActorMesh(std::shared_ptr<internal::MeshCaller> caller, std::size_t id, int size,
            std::chrono::milliseconds timeout)
      : caller_(std::move(caller)), id_(id), size_(size), timeout_(timeout) {}

  /// Number of ranks.
  int size() const noexcept { return size_; }
  /// The actor of `rank` (0 <= rank < size()); an empty handle when `rank`
  /// is out of range or the mesh is closed.
  Handle at(int rank) const {
    if (!caller_ || rank < 0 || rank >= size_) return Handle();
    return caf::actor_cast<Handle>(caller_->member(id_, rank));
  }

  /// Sends (xs...) to the actor of `rank`; its reply (of type R) or error,
  /// with the rank named, arrives in the future. The mesh's one caller
  /// actor sends it (no actor per request).
  template <class R, class... Ts>
  Future<R> ask(int rank, Ts... xs) const {
    if (rank < 0 || rank >= size()) {
      return make_error_future<R>(Status(
          Errc::out_of_range,
          "mesh: rank " + std::to_string(rank) + " outside [0, " + std::to_string(size()) + ")"));
    }
    if (!caller_) return make_error_future<R>(Status(Errc::shutdown, "mesh: an empty ActorMesh"));
    auto p = std::make_shared<Promise<R>>();
    auto fut = p->future();
    auto caller = caller_;
    const std::size_t id = id_;
    const auto timeout = timeout_;
    auto job = [=](caf::event_based_actor* self) {
      auto target = caf::actor_cast<Handle>(caller->member(id, rank));
      if (!target) {
        p->set_error(Status(Errc::shutdown, "rank " + std::to_string(rank) + ": mesh closed"));
        return;
      }
      auto done = std::make_shared<bool>(false);
      auto watch_id = std::make_shared<std::uint64_t>(0);
      internal::MeshCaller::watch(
          self, target.address(),
          [=](const Status& down) {
            if (*done) return;
            *done = true;
            p->set_error(
                Status(down.code(), "rank " + std::to_string(rank) + " " + down.message()));
          },
          *watch_id);
      self->request(target, timeout, xs...)
          .then(
              [=](R r) {
                internal::MeshCaller::settled(self, *watch_id);
                if (*done) return;
                *done = true;
                p->set_value(std::move(r));
              },
              [=](caf::error& e) {
                internal::MeshCaller::settled(self, *watch_id);
                if (*done) return;
                *done = true;
                p->set_error(internal::mesh_rank_error(rank, e));
              });
    };
    if (auto s = caller_->post(job, "rank " + std::to_string(rank)); !s.ok()) {
      return make_error_future<R>(s);
    }
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
  std::shared_ptr<internal::MeshCaller> caller_;
  std::size_t id_ = 0;
  int size_ = 0;
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
  /// is empty or already used here, or if ranks spawned `name` with
  /// different actor interfaces (naming both); Errc::timeout naming the
  /// ranks still missing after the request timeout.
  template <class Handle, class F, class... Ts>
  Result<ActorMesh<Handle>> spawn(const std::string& name, F fun, Ts&&... xs) {
    using Spawned = decltype(std::declval<caf::actor_system&>().spawn(fun, 0, xs...));
    static_assert(std::is_same<Spawned, Handle>::value || std::is_same<Handle, caf::actor>::value,
                  "Mesh::spawn<Handle>: `fun` makes an actor of another type than Handle");
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
    // Every rank's members must have this interface: a rank that spawned
    // `name` with another Handle is refused, not cast.
    const auto sigs = system().message_types<Handle>();
    auto all = join(name, std::move(mine), std::vector<std::string>(sigs.begin(), sigs.end()));
    if (!all.ok()) return all.status();
    const int n = static_cast<int>(all->size());
    auto c = caller();
    if (!c) return Status(Errc::shutdown, "Mesh::spawn '" + name + "': the mesh is closed");
    const std::size_t id = c->add_mesh(std::move(all).value());
    return ActorMesh<Handle>(std::move(c), id, n, timeout());
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
  // The caller shared with this mesh's ActorMeshes; null once closed.
  std::shared_ptr<internal::MeshCaller> caller() const;
  // Registers this rank's actors of mesh `name`; answers every rank's.
  Result<std::vector<caf::actor>> join(const std::string& name, std::vector<caf::actor> mine,
                                       std::vector<std::string> interface);
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshstore
