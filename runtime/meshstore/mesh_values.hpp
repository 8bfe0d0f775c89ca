#pragma once

// What crosses an actor mesh besides your own types: Exact<T>, a float or
// double carried bit-exact between processes (exact.hpp); CallContext,
// the message's rank in the view called, for handlers that take it;
// ValueMesh<R>, the shaped replies of ActorMesh::call; ports, typed
// mailboxes an owner opens and passes in messages for members to send to
// (or ActorMesh::send replies to); and what a member's handlers use:
// actor_error, on_ready (a Future awaited without blocking) and on_stop.
// Included by actor_mesh.hpp. Like it, this header exposes CAF on purpose.

#include <caf/all.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "meshstore/exact.hpp"
#include "meshstore/extent.hpp"
#include "meshstore/foreign_thread.hpp"
#include "meshstore/future.hpp"
#include "meshstore/status.hpp"

namespace meshstore {

/// What a handler learns about the call it serves when it takes a
/// CallContext first (Monarch's context().message.rank): the rank of the
/// message within the view it was sent to, and that view's shape. A mesh
/// call (ask, call, call_one, choose, broadcast, stream, accumulate, tell)
/// puts it first by itself when the member's interface takes
/// (CallContext, args...); a member of a view of 2 of a mesh of 8 sees
/// rank 0 or 1 and size() 2, whatever its rank in the whole mesh:
///
///   using worker_actor = caf::typed_actor<
///       caf::replies_to<CallContext, where_atom>::with<std::int32_t>>;
///   [](const CallContext& ctx, where_atom) { return ctx.rank; }
///   auto ranks = grid.slice({{"hosts", 1}}).value().call<std::int32_t>(where_atom::value);
struct CallContext {
  /// The member's index in the view called, row-major: 0 <= rank < size().
  std::int32_t rank = 0;
  /// The view's dimensions and their sizes.
  std::vector<std::string> dims;
  /// The size of each of `dims`, in the same order.
  std::vector<std::int32_t> sizes;

  /// The number of members of the view.
  int size() const {
    int n = 1;
    for (auto s : sizes) n *= s;
    return n;
  }
  /// The member's coordinate in `dim` of the view; -1 when the view has no
  /// such dimension (an index in a slice dropped it).
  int coordinate(const std::string& dim) const {
    int stride = size();
    int rest = rank;
    for (std::size_t d = 0; d < dims.size(); ++d) {
      stride /= sizes[d] > 0 ? sizes[d] : 1;
      const int c = stride > 0 ? rest / stride : 0;
      rest -= c * stride;
      if (dims[d] == dim) return c;
    }
    return -1;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CallContext& c) {
  return f(caf::meta::type_name("meshstore::CallContext"), c.rank, c.dims, c.sizes);
}

namespace internal {

/// Whether `Handle`'s interface takes (CallContext, Ts...): the mesh calls
/// then put the call's context first. Never for an untyped caf::actor.
template <class Handle, class... Ts>
constexpr bool takes_context() {
  if constexpr (std::is_same_v<Handle, caf::actor>) {
    return false;
  } else {
    return caf::response_type<typename Handle::signatures, CallContext, std::decay_t<Ts>...>::valid;
  }
}

/// Whether `Handle`'s members answer (Ts...), with the call's context
/// first where they take it, with exactly one R: what ActorMesh::send
/// delivers to a Port<R>.
template <class Handle, class R, class... Ts>
constexpr bool replies_with() {
  using Sigs = typename Handle::signatures;
  if constexpr (takes_context<Handle, Ts...>()) {
    return std::is_same_v<typename caf::response_type<Sigs, CallContext, std::decay_t<Ts>...>::type,
                          caf::detail::type_list<R>>;
  } else if constexpr (caf::response_type<Sigs, std::decay_t<Ts>...>::valid) {
    return std::is_same_v<typename caf::response_type<Sigs, std::decay_t<Ts>...>::type,
                          caf::detail::type_list<R>>;
  } else {
    return false;
  }
}

}  // namespace internal

/// What ActorMesh::call answers: one Result<R> per member of the view that
/// was called, shaped like it (Monarch's ValueMesh). Member i is rank(i) of
/// the whole mesh; item() finds a member by its coordinates.
///
///   auto sums = grid.call<int>(add_atom::value, 1).get(10s).value();
///   int v = sums.item({{"hosts", 1}, {"gpus", 2}}).value();
///   for (const Result<int>& r : sums) ...
template <class R>
class ValueMesh {
 public:
  ValueMesh() = default;
  /// `values` in the row-major order of `extent` (one per member).
  ValueMesh(Extent extent, std::vector<Result<R>> values)
      : extent_(std::move(extent)), values_(std::move(values)) {}

  /// The shape of the view that was called.
  const Extent& extent() const noexcept { return extent_; }
  /// Number of members (one value each).
  int size() const noexcept { return static_cast<int>(values_.size()); }
  /// Member i's value or error (0 <= i < size()).
  const Result<R>& operator[](int i) const { return values_.at(static_cast<std::size_t>(i)); }
  /// The rank, in the whole mesh, of member i.
  int rank(int i) const { return extent_.rank(i); }
  /// Every member's value or error, in member order.
  const std::vector<Result<R>>& values() const noexcept { return values_; }
  /// Iterator to member 0's Result (see values()).
  auto begin() const noexcept { return values_.begin(); }
  /// Iterator past the last member's Result.
  auto end() const noexcept { return values_.end(); }

  /// The value of the member at `coords`, one coordinate for every
  /// dimension by name, in any order; that member's error if it failed.
  /// Errc::invalid_argument for a dimension missing, unknown or named
  /// twice; Errc::out_of_range for a coordinate outside its dimension.
  Result<R> item(const std::vector<std::pair<std::string, int>>& coords) const {
    const auto& dims = extent_.dims();
    std::vector<int> point(dims.size(), -1);
    for (const auto& [name, c] : coords) {
      std::size_t d = 0;
      while (d < dims.size() && dims[d].first != name) ++d;
      if (d == dims.size()) {
        return Status(Errc::invalid_argument, "ValueMesh::item: " + extent_.to_string() +
                                                  " has no dimension '" + name + "'");
      }
      if (point[d] != -1) {
        return Status(Errc::invalid_argument, "ValueMesh::item: '" + name + "' named twice");
      }
      point[d] = c < 0 ? -2 : c;  // -2: index_of refuses it as outside
    }
    for (std::size_t d = 0; d < dims.size(); ++d) {
      if (point[d] == -1) {
        return Status(Errc::invalid_argument, "ValueMesh::item: no coordinate for '" +
                                                  dims[d].first + "' of " + extent_.to_string());
      }
    }
    auto i = extent_.index_of(point);
    if (!i.ok()) return i.status().with_context("ValueMesh::item");
    return values_[static_cast<std::size_t>(*i)];
  }

 private:
  Extent extent_ = Extent::line(0);
  std::vector<Result<R>> values_;
};

/// A Status as the error a member actor answers with: the caller gets the
/// same code and message, prefixed with the member's rank (for example
/// `return meshstore::actor_error(Status(Errc::out_of_capacity, "full"));`
/// from a handler returning caf::result<T>). An ok Status gives no error.
caf::error actor_error(const Status& status);

namespace internal {
using port_atom = caf::atom_constant<caf::atom("m_port")>;
/// A port send's error as a Status ("port: ..."): a receiver that is
/// closed or whose process went away is port_receiver_gone().
Status port_error(const caf::error& e);
/// unavailable: "port: its receiver is gone (closed, or its process went away)".
Status port_receiver_gone();
/// A member's error answered to ActorMesh::send, as the port's recv()
/// gives it: the member's code, "port: a member's call failed: ...".
Status port_reply_error(const caf::error& e);
/// Logs, as a warning, a member's reply to ActorMesh::send that a full
/// port (of `capacity` values) dropped: its sender cannot be told.
void port_reply_dropped(std::size_t capacity);

/// One port send, as a short-lived local actor: it monitors the port while
/// its request is out, so a port that was closed, or whose owner is gone,
/// fails the send at once. (CAF 0.17 answers a request to a dead remote
/// actor only with its timeout; a monitor hears of the death.)
template <class Handle, class T>
caf::behavior port_send_impl(caf::event_based_actor* self, Handle port, T value,
                             std::chrono::milliseconds timeout) {
  return {[=](port_atom) {
    // Shared: the promise is answered from whichever handler comes first.
    auto rp = std::make_shared<caf::response_promise>(self->make_response_promise());
    self->monitor(port);
    self->set_down_handler([=](caf::down_msg&) {
      rp->deliver(caf::make_error(caf::sec::request_receiver_down));
      self->quit();
    });
    self->request(port, timeout, port_atom::value, value)
        .then(
            [=](bool) {
              rp->deliver(true);
              self->quit();
            },
            [=](caf::error& e) {
              rp->deliver(e);
              self->quit();
            });
    return *rp;
  }};
}
}  // namespace internal

/// The sending end of a port: a typed mailbox of T values that its owner
/// opened with PortReceiver<T>::open and passes to others in messages
/// (Monarch's ports). Any actor that holds it, in this process or another,
/// sends to it; the owner receives in arrival order. To pass it between
/// processes, register it in every process (MeshOptions::add_types):
/// `meshstore::add_port_type<int>(cfg, "my::Port<int>")`, with T
/// registered too unless it is one of CAF's own. Drop every copy before
/// its actor system goes (it holds an actor handle). ActorMesh::send
/// delivers members' replies of type T to a port.
template <class T>
class Port {
 public:
  /// (port_atom, T): Port::send's request. A bare T: a member's reply to
  /// ActorMesh::send, sent with the port as its sender.
  using handle_type =
      caf::typed_actor<typename caf::replies_to<internal::port_atom, T>::template with<bool>,
                       caf::reacts_to<T>>;

  Port() = default;
  /// The port whose actor is `handle` (PortReceiver<T>::open makes one).
  explicit Port(handle_type handle) : handle_(std::move(handle)) {}
  /// False for a default-constructed Port.
  bool valid() const noexcept { return static_cast<bool>(handle_); }
  /// The port's actor (for a layer that names it to other processes).
  const handle_type& handle() const noexcept { return handle_; }

  /// From inside an actor (`self`): sends `value`. `done`, if given, runs
  /// on `self` with ok once the port took it, or with why it could not be
  /// delivered: Errc::unavailable when the port was closed or its owner is
  /// gone, Errc::out_of_capacity when its queue is full, Errc::timeout
  /// after `timeout`, Errc::invalid_argument for an empty Port.
  template <class Self>
  void send(Self* self, T value, std::function<void(const Status&)> done = {},
            std::chrono::milliseconds timeout = std::chrono::seconds(30)) const {
    internal::refuse_bare_floats<T>();
    if (!handle_) {
      if (done) done(Status(Errc::invalid_argument, "port: an empty Port"));
      return;
    }
    auto sender =
        self->spawn(internal::port_send_impl<handle_type, T>, handle_, std::move(value), timeout);
    self->request(sender, timeout + std::chrono::seconds(1), internal::port_atom::value)
        .then(
            [done](bool) {
              if (done) done(Status());
            },
            [done](caf::error& e) {
              if (done) done(internal::port_error(e));
            });
  }

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, Port& p) {
    return f(caf::meta::type_name("meshstore::Port"), p.handle_);
  }

 private:
  handle_type handle_;
};

/// Registers Port<T> under `name` for messages between processes; call it
/// in MeshOptions::add_types, the same in every process.
template <class T>
void add_port_type(caf::actor_system_config& cfg, const std::string& name) {
  cfg.add_message_type<Port<T>>(name);
}

/// The owner's end of a port: receives what the holders of port() send,
/// in arrival order. Copies share the port; the last copy to go closes it.
/// Close it, or drop every copy, before its actor system goes: the system
/// waits for an open port's actor (ProcMesh::stop() would wait). Thread-safe.
///
///   auto rx = PortReceiver<int>::open(procs.system()).value();
///   workers.tell(report_atom::value, rx.port());   // members send to it
///   int first = rx.recv().get(10s).value();
///   rx.close();                                    // later sends fail
template <class T>
class PortReceiver {
 public:
  /// Opens a port on `system` (ProcMesh::system(), Mesh::system()) that
  /// holds at most `capacity` values not yet received: a send past it
  /// fails with Errc::out_of_capacity. Errc::invalid_argument for a
  /// capacity of 0.
  static Result<PortReceiver> open(caf::actor_system& system, std::size_t capacity = 1024) {
    internal::refuse_bare_floats<T>();
    if (capacity == 0) return Status(Errc::invalid_argument, "port: capacity must be at least 1");
    auto q = std::make_shared<Queue>();
    q->capacity = capacity;
    typename Port<T>::handle_type handle;
    {
      ForeignThreadGuard guard;  // the owner may open it on any thread
      handle = system.spawn(port_impl, q);
    }
    PortReceiver rx;
    rx.q_ = q;
    rx.port_ = Port<T>(handle);
    // The last copy to go closes the port (a deleter on no pointer).
    rx.closer_ = std::shared_ptr<void>(nullptr, [q](void*) { close_queue(q); });
    {
      std::lock_guard<std::mutex> lock(q->mu);
      q->actor = caf::actor_cast<caf::weak_actor_ptr>(handle);
    }
    return rx;
  }

  /// The sending end, to pass in messages.
  Port<T> port() const { return port_; }

  /// The next value, in arrival order: at once if one is waiting. After
  /// close(), the values that arrived before it, then Errc::shutdown. A
  /// member whose call through ActorMesh::send failed gives its error in
  /// its place ("port: a member's call failed: ...").
  Future<T> recv() const {
    if (!q_) return make_error_future<T>(Status(Errc::shutdown, "port: an empty PortReceiver"));
    std::lock_guard<std::mutex> lock(q_->mu);
    if (!q_->values.empty()) {
      Result<T> v = std::move(q_->values.front());
      q_->values.pop_front();
      if (!v.ok()) return make_error_future<T>(v.status());
      return make_ready_future<T>(std::move(v).value());
    }
    if (q_->closed) return make_error_future<T>(Status(Errc::shutdown, "port: closed"));
    q_->waiting.push_back(std::make_shared<Promise<T>>());
    return q_->waiting.back()->future();
  }

  /// Closes the port: later sends fail with Errc::unavailable, and
  /// recv()s waiting answer Errc::shutdown. Idempotent.
  void close() const {
    if (q_) close_queue(q_);
  }

 private:
  struct Queue {
    std::mutex mu;
    std::deque<Result<T>> values;  // a value, or a member's error (ActorMesh::send)
    std::deque<std::shared_ptr<Promise<T>>> waiting;
    std::size_t capacity = 0;
    bool closed = false;
    caf::weak_actor_ptr actor;  // weak: a handle must not outlive its system
    Status push(Result<T> v) {
      std::unique_lock<std::mutex> lock(mu);
      if (!waiting.empty()) {
        auto p = std::move(waiting.front());
        waiting.pop_front();
        lock.unlock();
        p->set(std::move(v));
        return Status();
      }
      if (values.size() >= capacity) {
        return Status(Errc::out_of_capacity,
                      "port: full (" + std::to_string(capacity) + " values not received)");
      }
      values.push_back(std::move(v));
      return Status();
    }
    // Closed: the waiting recv()s fail; answers the port's actor, for the
    // owner to stop (once: later calls answer none).
    caf::weak_actor_ptr close() {
      std::deque<std::shared_ptr<Promise<T>>> doomed;
      caf::weak_actor_ptr was;
      {
        std::lock_guard<std::mutex> lock(mu);
        closed = true;
        doomed.swap(waiting);
        std::swap(was, actor);
      }
      for (auto& p : doomed) p->set_error(Status(Errc::shutdown, "port: closed"));
      return was;
    }
  };

  static void close_queue(const std::shared_ptr<Queue>& q) {
    if (auto strong = caf::actor_cast<caf::actor>(q->close())) {
      caf::anon_send_exit(strong, caf::exit_reason::user_shutdown);
    }
  }

  static typename Port<T>::handle_type::behavior_type port_impl(
      typename Port<T>::handle_type::pointer self, std::shared_ptr<Queue> q) {
    // Its system stopping closes it too.
    self->attach_functor([q](const caf::error&) { q->close(); });
    // A member's error answered to ActorMesh::send arrives as an error
    // message (CAF's default handler would stop the port).
    self->set_error_handler([q](caf::error& e) { reply(*q, internal::port_reply_error(e)); });
    return {[q](internal::port_atom, T v) -> caf::result<bool> {
              auto s = q->push(std::move(v));
              if (!s.ok()) return actor_error(s);
              return true;
            },
            [q](T v) { reply(*q, std::move(v)); }};
  }
  // A member's reply to ActorMesh::send: it has no one to tell of a full
  // port, so the drop is logged.
  static void reply(Queue& q, Result<T> v) {
    if (!q.push(std::move(v)).ok()) internal::port_reply_dropped(q.capacity);
  }

  std::shared_ptr<Queue> q_;
  Port<T> port_;
  std::shared_ptr<void> closer_;
};

namespace internal {
using ready_wait_atom = caf::atom_constant<caf::atom("m_rwait")>;
using ready_done_atom = caf::atom_constant<caf::atom("m_rdone")>;

/// on_ready's go-between: answers the actor's wait once the future's
/// callback said done, in either order, or quits after `timeout`.
struct ReadyWaiterState {
  bool done = false;
  caf::response_promise waiting;  // pending() once the wait came first
};
caf::behavior ready_waiter(caf::stateful_actor<ReadyWaiterState>* self,
                           std::chrono::milliseconds timeout);
}  // namespace internal

/// From inside an actor (`self`): runs `k(const Result<T>&)` on `self`
/// once `future` completes, without blocking the actor's thread (get()
/// must not be called there). After `timeout`, `k` gets Errc::timeout and
/// the future's late result is dropped. Use it to call the store, or any
/// Future, from a handler:
///
///   [=](pull_atom) -> caf::result<bool> {
///     auto rp = self->make_response_promise<bool>();
///     on_ready(self, store->get_into("w", t), [rp](const Result<void>& r) mutable {
///       if (r.ok()) {
///         rp.deliver(true);
///       } else {
///         rp.deliver(actor_error(r.status()));
///       }
///     });
///     return rp;
///   }
template <class Self, class T, class F>
void on_ready(Self* self, Future<T> future, F k,
              std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  // The result goes in `slot` before the go-between hears of it, so it is
  // there when `k` runs on `self` (the messages order the two).
  auto slot = std::make_shared<Result<T>>(Status(Errc::internal, "on_ready: no result"));
  auto waiter = self->spawn(internal::ready_waiter, timeout);
  self->request(waiter, timeout + std::chrono::seconds(1), internal::ready_wait_atom::value)
      .then([slot, k](bool) mutable { k(*slot); },
            [k](caf::error& e) mutable {
              k(Result<T>(Status(Errc::timeout, "on_ready: no result within the timeout (" +
                                                    caf::to_string(e) + ")")));
            });
  // Weak: a future that never completes must not keep an actor (and so its
  // system) alive.
  future.on_complete([slot, w = caf::actor_cast<caf::weak_actor_ptr>(waiter)](const Result<T>& r) {
    *slot = r;
    if (auto to = caf::actor_cast<caf::actor>(w))
      caf::anon_send(to, internal::ready_done_atom::value);
  });
}

namespace internal {
/// on_stop's hook, run with the actor's exit reason as a Status; an
/// exception it throws is logged.
void run_stop_hook(const std::function<void(const Status&)>& hook, const caf::error& reason);
}  // namespace internal

/// Runs `hook(why)` once when the actor `self` stops, whatever stops it:
/// it quit or failed, supervision stopped its mesh, or its process or
/// runtime is stopping (ProcMesh::stop, Mesh::close). `why` is ok for a
/// normal stop or a shutdown, the error otherwise. Monarch's __cleanup__:
/// release what the actor holds outside its state (files, devices,
/// connections). It runs on the thread that terminates the actor, after
/// its last message. In a ProcMesh worker, MeshOptions::stop_timeout
/// bounds the hooks when the process stops: past it, the process exits.
///
///   worker_actor::behavior_type worker(worker_actor::pointer self, int rank) {
///     meshstore::on_stop(self, [rank](const meshstore::Status& why) { release(rank); });
///     return {...};
///   }
template <class Self>
void on_stop(Self* self, std::function<void(const Status&)> hook) {
  self->attach_functor([hook = std::move(hook)](const caf::error& reason) {
    internal::run_stop_hook(hook, reason);
  });
}

}  // namespace meshstore
