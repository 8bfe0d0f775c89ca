#pragma once

// ActorMesh<Handle>: the typed actors of one mesh, with a shape (Extent),
// slices of it, and the call styles: call (every member, each reply or
// error), call_one, choose (the least busy member), stream (each reply as
// it lands), accumulate (a fold), tell (fire and forget), send (the
// replies go to a port), plus ask (one rank) and broadcast (fail fast). Requests go out from the
// calling thread, with the mesh's caller (MeshCaller) as their sender. Made by ProcMesh::spawn
// (proc_mesh.hpp).
//
//   auto workers = mesh.spawn<worker_actor>("workers", worker).value();
//   auto grid = workers.reshape({{"hosts", 2}, {"gpus", 4}}).value();
//   auto host1 = grid.slice("hosts", 1, 2).value();          // 4 members
//   auto gpu2 = grid.slice({{"gpus", 2}}).value();          // {hosts: 2}: an index drops "gpus"
//   auto sums = host1.call<int>(add_atom::value, 1).get(10s); // ValueMesh<int> of 4
//   auto one = grid.choose<int>(add_atom::value, 1);          // least busy
//   host1.tell(reset_atom::value);

#include <algorithm>
#include <caf/actor_companion.hpp>
#include <caf/all.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/extent.hpp"
#include "meshstore/future.hpp"
#include "meshstore/mesh_values.hpp"
#include "meshstore/status.hpp"
#include "meshstore/supervision.hpp"

namespace meshstore {

namespace internal {

/// What a Mesh shares with its ActorMeshes: the members of every mesh it
/// spawned; a companion actor (CAF's actor_companion) that is the sender
/// of every request, sent from the calling thread, and monitors the
/// members it asked (so a rank that dies fails its calls at once); and one
/// long-lived caller actor that runs jobs (a restart's spawns). Closing it
/// (ProcMesh::stop) stops both, drops the member handles and answers every
/// call after that, and every call still waiting, with Errc::shutdown, so
/// an ActorMesh may outlive its mesh without touching a stopped actor
/// system. In the owner's process the caller actor also supervises
/// (supervision.hpp): it monitors every member of a supervised mesh and
/// applies the mesh's Supervision when one dies. Thread-safe.
class MeshCaller : public std::enable_shared_from_this<MeshCaller> {
 public:
  /// Work for the caller actor, run on it with the caller as `self`.
  using Job = std::function<void(caf::event_based_actor* self)>;
  /// Spawns member `rank` again, on the caller actor `self`, and calls
  /// `done` (on the caller) with the new actor, or an empty handle when it
  /// cannot be spawned again (its process is gone, or another process owns
  /// it).
  using Respawn = std::function<void(caf::event_based_actor* self, int rank,
                                     std::function<void(caf::actor)> done)>;
  /// The root handler: true when it handled a failure no mesh took.
  using RootHandler = std::function<bool(const MeshFailure&)>;

  /// A caller on `sys`; `root` takes the failures that propagate.
  static std::shared_ptr<MeshCaller> make(caf::actor_system& sys, RootHandler root);
  ~MeshCaller();
  MeshCaller(const MeshCaller&) = delete;
  MeshCaller& operator=(const MeshCaller&) = delete;

  /// Errc::invalid_argument unless `owner` is empty or names a mesh added
  /// here (what Supervision::owner must be).
  Status check_owner(const std::string& owner) const;
  /// Remembers a spawned mesh's members; answers its id. With `supervise`,
  /// the caller monitors them and applies `sup` when one fails.
  std::size_t add_mesh(std::string name, std::vector<caf::actor> members, bool supervise,
                       Supervision sup, Respawn respawn);
  /// Member `rank` of mesh `id`; an empty handle once closed or stopped.
  caf::actor member(std::size_t id, int rank) const;
  /// Member `rank` of mesh `id` in `out` (empty once closed or stopped),
  /// and false; or, while supervision deals with a member's failure (a
  /// restart or a stop under way), true: what `again()` makes (the call,
  /// its arguments copied only then) runs once it is dealt with.
  bool member_or_hold(std::size_t id, int rank, const std::function<std::function<void()>()>& again,
                      caf::actor& out) const;
  /// Why member() is empty: Errc::shutdown when the mesh is closed,
  /// Errc::unavailable naming the failure when it was stopped after one.
  Status gone(std::size_t id) const;
  /// `s` (a call to member `rank` of mesh `id` that failed), or, when it
  /// is `unavailable` and supervision stopped the mesh, gone()'s reason:
  /// a call in flight when its member was stopped fails as a later call
  /// does, naming the failure, not the stop's exit.
  Status unless_stopped(std::size_t id, int rank, Status s) const;
  /// Rank `rank` left the job in good order (it closed its Mesh): its
  /// members going away is not a failure.
  void departed(int rank);
  /// On the caller actor: the member at `addr` went down for `reason`.
  void member_down(caf::event_based_actor* self, const caf::actor_addr& addr,
                   const caf::error& reason);
  /// Runs `job` on the caller actor, `after` from now (0: at once);
  /// Errc::shutdown once closed.
  Status post(Job job, const std::string& what,
              std::chrono::milliseconds after = std::chrono::milliseconds(0)) const;
  /// Stops the caller and drops every handle; answers the members it held
  /// (restarted ones included: what a mesh whose members live in this
  /// process stops next). Idempotent: empty the second time.
  std::vector<caf::actor> close();
  /// choose(): the rank of `ranks` (of mesh `id`) with the fewest requests
  /// in flight through choose(), counted as one more until release(); ties
  /// go round the members in turn.
  int acquire_least_busy(std::size_t id, const std::vector<int>& ranks);
  /// A choose() request to `rank` of mesh `id` settled.
  void release(std::size_t id, int rank);

  struct Requests;  // what the companion waits on (actor_mesh.cpp)
  /// Runs `send(self, requests)` on the calling thread, under the requests'
  /// lock: it sends requests from `self`, the caller's companion, each
  /// watched (watch_request) and answered through settle_request. The
  /// companion's messages are handled on the thread that delivers them, so
  /// no actor of this process wakes for a call. Answers that came meanwhile
  /// run before it returns. Errc::shutdown once closed.
  Status send(const std::function<void(caf::actor_companion*, Requests*)>& send) const;
  /// Inside send(): monitors `target` (once per target) until the request
  /// is settled (settle_request with the id answered); if the target goes
  /// down first, `fail` gets an unavailable Status, "`prefix`went down
  /// (reason)", and a Status of Errc::shutdown if the caller closes first.
  static std::uint64_t watch_request(Requests* rq, const caf::actor_addr& target,
                                     std::string prefix, std::function<void(const Status&)> fail);
  /// Inside a request's handler: the request of watch `id` has its answer;
  /// `done` runs once the requests' lock is released, unless its target's
  /// death or the caller's close answered it first.
  static void settle_request(Requests* rq, std::uint64_t id, std::function<void()> done);

  /// Inside a job (a spawn's request): watches `target` as watch_request
  /// does, from the caller actor, until settled(id). Sets `id`.
  static void watch(caf::event_based_actor* self, const caf::actor_addr& target,
                    std::function<void(const Status&)> on_down, std::uint64_t& id);
  /// Inside a job: the request of watch `id` has its reply or error.
  static void settled(caf::event_based_actor* self, std::uint64_t id);

 private:
  MeshCaller() = default;
  // A supervised mesh.
  struct Supervised {
    std::string name;
    bool supervise = false;
    Supervision sup;
    Respawn respawn;
    std::vector<std::chrono::steady_clock::time_point> restarts;
    std::string stopped;        // why, once stopped
    std::ptrdiff_t owner = -1;  // the owning mesh's id; -1 = the root
  };
  // member_down's steps. Which supervised mesh and rank the member at
  // `addr` is (false: none, a rank that departed, or the caller closing).
  bool find_failed(const caf::actor_addr& addr, std::size_t& id, int& rank, Supervised& mesh) const;
  // FailurePolicy::restart: spawned again while the window's budget lasts,
  // else the mesh stops.
  void restart(caf::event_based_actor* self, std::size_t id, const MeshFailure& f,
               const Supervision& sup, const Respawn& respawn);
  // FailurePolicy::propagate: up the ownership tree to the root handler;
  // a failure no one takes ends the process.
  void propagate(std::size_t id, const MeshFailure& f);
  // The failure of `rank` of mesh `id` is dealt with: the calls held for
  // the mesh go again.
  void release_held(std::size_t id, int rank);
  // close()'s first step: no request goes out any more, and those waiting
  // answer Errc::shutdown; the companion, for close() to stop (null when
  // closed before).
  caf::strong_actor_ptr close_requests();
  // Stops mesh `id` and every mesh it owns.
  void stop_mesh(std::size_t id, const MeshFailure& f);
  void stop_mesh_locked(std::size_t id, const std::string& why);

  std::shared_ptr<Requests> requests_;  // set once by make()
  mutable std::mutex mu_;               // guards everything below
  caf::actor caller_;
  RootHandler root_;
  std::vector<std::vector<caf::actor>> meshes_;
  std::vector<Supervised> supervised_;  // by mesh id
  std::vector<std::vector<int>> busy_;  // choose() requests in flight, by mesh and rank
  std::vector<std::size_t> turn_;       // choose(): where the next tie-break starts, by mesh
  std::vector<int> departed_;           // ranks that left in good order
  // Calls held for a failed member, by mesh and rank, until release().
  mutable std::map<std::size_t, std::vector<std::function<void()>>> held_;
};

/// One place converting a rank's caf::error for meshes.
Status mesh_rank_error(int rank, const caf::error& e);

/// Inside MeshCaller::send: sends (xs...) to `dest` as a request from the
/// companion `self` (which has no request() of its own: this is CAF's
/// requester mixin's, with its compile-time checks against a typed `dest`);
/// `ok` gets the reply, `error` CAF's error (a timeout after `timeout`).
template <class Handle, class Ok, class Error, class... Ts>
void companion_request(caf::actor_companion* self, const Handle& dest,
                       std::chrono::milliseconds timeout, Ok ok, Error error, const Ts&... xs) {
  using token = caf::detail::type_list<
      typename caf::detail::implicit_conversions<typename std::decay<Ts>::type>::type...>;
  static_assert(caf::response_type_unbox<caf::signatures_of_t<Handle>, token>::valid,
                "receiver does not accept given message");
  using Output = caf::response_type_t<
      typename Handle::signatures,
      typename caf::detail::implicit_conversions<typename std::decay<Ts>::type>::type...>;
  caf::detail::type_checker<Output, Ok>::check();
  const auto id = self->new_request_id(caf::message_priority::normal);
  self->add_multiplexed_response_handler(id.response_id(),
                                         caf::behavior{std::move(ok), std::move(error)});
  caf::detail::profiled_send(self, self->ctrl(), dest, id, {}, nullptr, xs...);
  self->request_response_timeout(caf::duration{timeout}, id);
}

}  // namespace internal

/// The actors of one spawn(), shaped by an Extent (one dimension "ranks"
/// as spawned; reshape() and slice() give other views). Member `i` of a
/// view is extent().rank(i) of the whole mesh, and errors name that rank.
/// Copyable and cheap; it may outlive the Mesh it came from: after
/// Mesh::close() every call answers Errc::shutdown. Thread-safe.
template <class Handle>
class ActorMesh {
 public:
  ActorMesh() = default;
  /// The view `extent` of mesh `id` of `caller`, whose calls time out after
  /// `timeout`. Internal: get one from a spawn() or from a view of another.
  ActorMesh(std::shared_ptr<internal::MeshCaller> caller, std::size_t id, Extent extent,
            std::chrono::milliseconds timeout)
      : caller_(std::move(caller)), id_(id), extent_(std::move(extent)), timeout_(timeout) {}

  /// Number of members of this view.
  int size() const noexcept { return extent_.size(); }
  /// The shape of this view.
  const Extent& extent() const noexcept { return extent_; }
  /// The actor of member `i` (0 <= i < size()); an empty handle when `i` is
  /// out of range or the mesh is closed.
  Handle at(int i) const {
    if (!caller_ || i < 0 || i >= size()) return Handle();
    return caf::actor_cast<Handle>(caller_->member(id_, extent_.rank(i)));
  }

  /// The same members under other dimensions of the same total size.
  Result<ActorMesh> reshape(std::vector<std::pair<std::string, int>> dims) const {
    auto e = extent_.reshape(std::move(dims));
    if (!e.ok()) return e.status();
    return ActorMesh(caller_, id_, std::move(e).value(), timeout_);
  }
  /// The members with begin <= coordinate(dim) < end.
  Result<ActorMesh> slice(const std::string& dim, int begin, int end) const {
    auto e = extent_.slice(dim, begin, end);
    if (!e.ok()) return e.status();
    return ActorMesh(caller_, id_, std::move(e).value(), timeout_);
  }
  /// Several dimensions in one call: an index drops its dimension, a range
  /// {begin, end} keeps it (extent.hpp's Select), as in
  /// `grid.slice({{"hosts", 1}, {"gpus", {0, 2}}})`.
  Result<ActorMesh> slice(const std::vector<std::pair<std::string, Select>>& selects) const {
    auto e = extent_.slice(selects);
    if (!e.ok()) return e.status();
    return ActorMesh(caller_, id_, std::move(e).value(), timeout_);
  }
  /// The member at `point` (a coordinate per dimension), as a mesh of one.
  Result<ActorMesh> at_point(const std::vector<int>& point) const {
    auto i = extent_.index_of(point);
    if (!i.ok()) return i.status();
    auto e = extent_.reshape({{"ranks", size()}});
    if (!e.ok()) return e.status();
    auto one = e->slice("ranks", *i, *i + 1);
    if (!one.ok()) return one.status();
    return ActorMesh(caller_, id_, std::move(one).value(), timeout_);
  }

  /// Sends (xs...) to member `i`; its reply (of type R) or error, naming
  /// its rank, arrives in the future.
  template <class R, class... Ts>
  Future<R> ask(int i, Ts... xs) const {
    if (i < 0 || i >= size()) {
      return make_error_future<R>(Status(
          Errc::out_of_range,
          "mesh: rank " + std::to_string(i) + " outside [0, " + std::to_string(size()) + ")"));
    }
    return request<R>(i, nullptr, std::move(xs)...);
  }

  /// Every member replies: a ValueMesh of this view's shape, each member a
  /// value or an error naming its rank. Never fails as a whole (but for a
  /// closed mesh, whose members each answer shutdown).
  template <class R, class... Ts>
  Future<ValueMesh<R>> call(Ts... xs) const {
    return when_all(requests<R>(xs...)).then([extent = extent_](const std::vector<Result<R>>& rs) {
      return ValueMesh<R>(extent, rs);
    });
  }

  /// Sends (xs...) to every member and gathers the replies in member order.
  /// Fails with the first error, naming its rank.
  template <class R, class... Ts>
  Future<std::vector<R>> broadcast(Ts... xs) const {
    return gather(requests<R>(xs...));
  }

  /// The reply of the only member of a mesh of one (a point, or a slice of
  /// one); Errc::invalid_argument for a mesh of another size.
  template <class R, class... Ts>
  Future<R> call_one(Ts... xs) const {
    if (size() != 1) {
      return make_error_future<R>(
          Status(Errc::invalid_argument, "call_one: the mesh " + extent_.to_string() + " has " +
                                             std::to_string(size()) + " members, not 1"));
    }
    return ask<R>(0, std::move(xs)...);
  }

  /// Sends (xs...) to one member: the one with the fewest requests in
  /// flight through choose() (load balancing across callers of this mesh);
  /// among equals, the members take turns.
  template <class R, class... Ts>
  Future<R> choose(Ts... xs) const {
    if (size() == 0) {
      return make_error_future<R>(Status(Errc::invalid_argument, "choose: the mesh is empty"));
    }
    if (!caller_) return make_error_future<R>(Status(Errc::shutdown, "mesh: an empty ActorMesh"));
    const std::vector<int> ranks = extent_.ranks();
    const int rank = caller_->acquire_least_busy(id_, ranks);
    const int i = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin());
    auto caller = caller_;
    const std::size_t id = id_;
    return request<R>(
        i, [caller, id, rank] { caller->release(id, rank); }, std::move(xs)...);
  }

  /// Sends (xs...) to every member and calls `on_reply(rank, Result<R>)` for
  /// each reply as it lands (one call at a time); the future completes once
  /// every member answered, with the first error or success.
  template <class R, class F, class... Ts>
  Future<void> stream(F on_reply, Ts... xs) const {
    auto replies = requests<R>(xs...);
    auto mu = std::make_shared<std::mutex>();
    auto fn = std::make_shared<F>(std::move(on_reply));
    std::vector<Future<void>> seen;
    for (int i = 0; i < size(); ++i) {
      auto p = std::make_shared<Promise<void>>();
      seen.push_back(p->future());
      const int rank = extent_.rank(i);
      replies[static_cast<std::size_t>(i)].on_complete([=](const Result<R>& r) {
        {
          std::lock_guard<std::mutex> lock(*mu);
          (*fn)(rank, r);
        }
        if (r.ok()) {
          p->set_value();
        } else {
          p->set_error(r.status());
        }
      });
    }
    return when_all(std::move(seen)).then([](const std::vector<Result<void>>& rs) -> Result<void> {
      for (const auto& r : rs) {
        if (!r.ok()) return r.status();
      }
      return Result<void>();
    });
  }

  /// Folds every member's reply into `init` in member order, once all have
  /// answered: fold(A, R) -> A. Fails with the first error, naming its rank.
  template <class R, class A, class F, class... Ts>
  Future<A> accumulate(A init, F fold, Ts... xs) const {
    return gather(requests<R>(xs...))
        .then([init = std::move(init), fold](const std::vector<R>& rs) {
          A acc = init;
          for (const auto& r : rs) acc = fold(std::move(acc), r);
          return acc;
        });
  }

  /// Sends (xs...) to every member without waiting for replies (in order,
  /// from the mesh's caller). Errc::shutdown when the mesh is closed, and
  /// Errc::unavailable naming the failure once supervision stopped it (a
  /// stop still on its way as tell() is called drops the message).
  template <class... Ts>
  Status tell(Ts... xs) const {
    internal::refuse_bare_floats<Ts...>();
    return tell_all(nullptr, xs...);
  }

  /// Monarch's send with a port: sends (xs...) to every member of this view
  /// without waiting, and each member's reply goes to `port` (in whichever
  /// process holds its PortReceiver), not to the caller; a member's error
  /// arrives there in its place, as recv()'s error. The members' reply to
  /// (xs...) must be exactly one R (checked at compile time). To send to
  /// one member, send on a slice or at_point(). Answers as tell() does, and
  /// Errc::invalid_argument for an empty Port. A member that dies before
  /// it replies sends nothing (wait on recv() with a timeout), and a reply
  /// that finds the port full or closed is dropped (logged when full).
  ///
  ///   auto rx = PortReceiver<int>::open(procs.system()).value();
  ///   workers.send(rx.port(), add_atom::value, 1);     // each member's sum
  ///   for (int i = 0; i < workers.size(); ++i) sums.push_back(rx.recv().get(10s).value());
  template <class R, class... Ts>
  Status send(const Port<R>& port, Ts... xs) const {
    static_assert(!std::is_same_v<Handle, caf::actor>, "send with a port needs a typed mesh");
    static_assert(internal::replies_with<Handle, R, Ts...>(),
                  "send: the members do not answer this message with exactly the port's type");
    internal::refuse_bare_floats<R, Ts...>();
    if (!port.valid()) return Status(Errc::invalid_argument, "send: an empty Port");
    return tell_all(port.handle(), xs...);
  }

 private:
  // tell() and send(): (xs...) to every member, from `from` (a port's
  // handle, which gets the replies) or anonymously (nullptr).
  template <class From, class... Ts>
  Status tell_all(const From& from, const Ts&... xs) const {
    if (!caller_) return Status(Errc::shutdown, "mesh: an empty ActorMesh");
    const std::vector<int> ranks = extent_.ranks();
    if (!ranks.empty() && !caller_->member(id_, ranks.front())) return caller_->gone(id_);
    CallContext view;  // built only for members that take it
    if constexpr (internal::takes_context<Handle, Ts...>()) view = view_context();
    // From this thread, as requests go: a tell and a later call of this
    // thread reach a member in that order.
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      tell_member(ranks[i], in_view(view, i), from, xs...);
    }
    return Status();
  }

  // Sends (xs...) to every member; the futures in member order.
  template <class R, class... Ts>
  std::vector<Future<R>> requests(const Ts&... xs) const {
    internal::refuse_bare_floats<R, Ts...>();
    std::vector<Future<R>> out;
    out.reserve(static_cast<std::size_t>(size()));
    if (!caller_) {
      for (int i = 0; i < size(); ++i) {
        out.push_back(make_error_future<R>(Status(Errc::shutdown, "mesh: an empty ActorMesh")));
      }
      return out;
    }
    const std::vector<int> ranks = extent_.ranks();
    CallContext view;  // built only for members that take it
    if constexpr (internal::takes_context<Handle, Ts...>()) view = view_context();
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      auto p = std::make_shared<Promise<R>>();
      out.push_back(p->future());
      send_member<R>(
          ranks[i], in_view(view, i), [p](Result<R> r) { p->set(std::move(r)); }, xs...);
    }
    return out;
  }

  // Sends (xs...) to member `i` of this view from this thread; `settled`
  // (may be null) runs once the request has its answer.
  template <class R, class... Ts>
  Future<R> request(int i, std::function<void()> settled, Ts... xs) const {
    internal::refuse_bare_floats<R, Ts...>();
    if (!caller_) return make_error_future<R>(Status(Errc::shutdown, "mesh: an empty ActorMesh"));
    CallContext ctx;  // built only for a member that takes it
    if constexpr (internal::takes_context<Handle, Ts...>()) {
      ctx = in_view(view_context(), static_cast<std::size_t>(i));
    }
    auto p = std::make_shared<Promise<R>>();
    auto fut = p->future();
    send_member<R>(
        extent_.rank(i), ctx,
        [p, settled](Result<R> r) {
          if (settled) settled();
          p->set(std::move(r));
        },
        xs...);
    return fut;
  }

  // Sends (xs...) to `rank` of the mesh from this thread, or once a failure
  // is dealt with (member_or_hold); `finish` gets the answer.
  template <class R, class F, class... Ts>
  void send_member(int rank, const CallContext& ctx, F finish, const Ts&... xs) const {
    auto again = [&]() -> std::function<void()> {
      return [mesh = *this, rank, ctx, finish, xs...] {
        mesh.template send_member<R>(rank, ctx, finish, xs...);
      };
    };
    caf::actor member;
    if (caller_->member_or_hold(id_, rank, again, member)) return;
    const auto target = caf::actor_cast<Handle>(member);
    auto s = caller_->send([&](caf::actor_companion* self, internal::MeshCaller::Requests* rq) {
      send_one<R>(self, rq, target, rank, timeout_, finish, ctx, xs...);
    });
    if (!s.ok()) finish(s);
  }

  // tell_all() to `rank` of the mesh, as send_member sends.
  template <class From, class... Ts>
  void tell_member(int rank, const CallContext& ctx, const From& from, const Ts&... xs) const {
    auto again = [&]() -> std::function<void()> {
      return [mesh = *this, rank, ctx, from, xs...] { mesh.tell_member(rank, ctx, from, xs...); };
    };
    caf::actor member;
    if (caller_->member_or_hold(id_, rank, again, member)) return;
    const auto target = caf::actor_cast<Handle>(member);
    if (!target) return;
    if constexpr (std::is_same_v<From, std::nullptr_t>) {
      // Anonymous: a member's answer goes nowhere.
      if constexpr (internal::takes_context<Handle, Ts...>()) {
        caf::anon_send(target, ctx, xs...);
      } else {
        caf::anon_send(target, xs...);
      }
    } else if constexpr (internal::takes_context<Handle, Ts...>()) {
      // From the port: the member's answer (or error) goes to it.
      caf::send_as(from, target, ctx, xs...);
    } else {
      caf::send_as(from, target, xs...);
    }
  }

  // Inside MeshCaller::send: one request to `target`, `rank` of this mesh,
  // watched so that a member that dies answers at once; `finish` gets the
  // reply or an error naming the rank (no `target`: why the mesh has none).
  // `ctx` goes first when the member's handler takes it.
  template <class R, class F, class... Ts>
  void send_one(caf::actor_companion* self, internal::MeshCaller::Requests* rq,
                const Handle& target, int rank, std::chrono::milliseconds timeout, F finish,
                const CallContext& ctx, const Ts&... xs) const {
    if (!target) {
      const Status why = caller_->gone(id_);
      finish(Status(why.code(), "rank " + std::to_string(rank) + ": " + why.message()));
      return;
    }
    using Caller = internal::MeshCaller;
    auto fin = std::make_shared<F>(std::move(finish));
    auto failed = [fin, caller = caller_, mesh = id_, rank](const Status& s) {
      (*fin)(caller->unless_stopped(mesh, rank, s));
    };
    const auto id =
        Caller::watch_request(rq, target.address(), "rank " + std::to_string(rank) + " ", failed);
    auto ok = [rq, id, fin](R r) {
      Caller::settle_request(rq, id, [fin, r = std::move(r)]() mutable { (*fin)(std::move(r)); });
    };
    auto error = [rq, id, failed, rank](caf::error& e) {
      Caller::settle_request(rq, id,
                             [failed, s = internal::mesh_rank_error(rank, e)] { failed(s); });
    };
    if constexpr (internal::takes_context<Handle, Ts...>()) {
      internal::companion_request(self, target, timeout, ok, error, ctx, xs...);
    } else {
      internal::companion_request(self, target, timeout, ok, error, xs...);
    }
  }

  // The context of this view's members (CallContext), rank 0.
  CallContext view_context() const {
    CallContext c;
    for (const auto& [name, n] : extent_.dims()) {
      c.dims.push_back(name);
      c.sizes.push_back(n);
    }
    return c;
  }
  static CallContext in_view(CallContext c, std::size_t i) {
    c.rank = static_cast<std::int32_t>(i);
    return c;
  }

  std::shared_ptr<internal::MeshCaller> caller_;
  std::size_t id_ = 0;
  Extent extent_ = Extent::line(0);
  std::chrono::milliseconds timeout_{30000};
};

}  // namespace meshstore
