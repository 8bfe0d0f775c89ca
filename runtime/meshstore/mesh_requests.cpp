// A mesh caller's requests (actor_mesh.hpp, MeshCaller::send): sent from
// the calling thread with a companion actor (CAF's actor_companion) as
// their sender; the companion's replies, timeouts and down messages are
// handled on the thread that delivers them, and the answers run once the
// requests' lock is released. docs/internals/runtime.md, "Meshes:
// requests from the calling thread".
#include "meshstore/internal/mesh_requests.hpp"

#include <caf/scoped_execution_unit.hpp>
#include <deque>
#include <map>
#include <mutex>
#include <set>

#include "meshstore/actor_mesh.hpp"

namespace meshstore::internal {

// What a caller's companion received, and the requests it waits on. The
// companion's messages are handled (activate) under `mu`, one at a time,
// on whichever thread delivers them; a request's answer runs after `mu` is
// released, so that it may call the mesh again.
struct MeshCaller::Requests {
  explicit Requests(caf::actor_system& sys) : unit(&sys) {}
  // The companion; null once closed.
  caf::actor_companion* self() const {
    return companion ? static_cast<caf::actor_companion*>(
                           caf::actor_cast<caf::abstract_actor*>(companion))
                     : nullptr;
  }

  std::mutex mu;  // requests go out, and messages are handled, under it
  caf::strong_actor_ptr companion;
  caf::scoped_execution_unit unit;  // the context messages are handled in
  bool closed = false;
  std::uint64_t next = 1;
  struct Waiting {
    caf::actor_addr target;
    std::string prefix;  // names the member in its errors
    std::function<void(const Status&)> fail;
  };
  std::map<std::uint64_t, Waiting> waiting;
  std::set<caf::actor_addr> monitored;
  std::vector<std::function<void()>> ready;  // answers, to run once `mu` is released

  std::mutex queue_mu;  // guards `queue`
  std::deque<caf::mailbox_element_ptr> queue;
};

namespace {

using Requests = MeshCaller::Requests;

// The requests whose lock this thread holds, if any: a message that
// reaches their companion meanwhile (a request to a dead local actor is
// answered inside the send) is queued, and handled once the lock goes.
thread_local const Requests* t_holding = nullptr;
// The requests whose companion handed this thread a message: the
// companion cannot be stopped from here (its enqueue holds its lock).
thread_local const Requests* t_delivering = nullptr;

// Handles what the companion received, then runs the answers it made.
void drain(Requests& rq) {
  for (;;) {
    std::deque<caf::mailbox_element_ptr> batch;
    std::vector<std::function<void()>> ready;
    {
      std::lock_guard<std::mutex> lock(rq.mu);
      {
        std::lock_guard<std::mutex> q(rq.queue_mu);
        batch.swap(rq.queue);
      }
      auto* self = rq.self();
      const auto* outer = std::exchange(t_holding, &rq);
      for (auto& m : batch) {
        if (self != nullptr && !rq.closed) self->activate(&rq.unit, *m);
      }
      t_holding = outer;
      ready.swap(rq.ready);
    }
    for (auto& f : ready) f();
    if (batch.empty()) return;
  }
}

// The companion's enqueue, on the thread that sends to it.
void received(const std::shared_ptr<Requests>& rq, caf::mailbox_element_ptr m) {
  {
    std::lock_guard<std::mutex> q(rq->queue_mu);
    rq->queue.push_back(std::move(m));
  }
  if (t_holding == rq.get()) return;  // handled once this thread's send is out
  const auto* outer = std::exchange(t_delivering, rq.get());
  drain(*rq);
  t_delivering = outer;
}

// A watched target went down: its requests fail now (under `mu`).
void target_down(Requests& rq, const caf::down_msg& m) {
  rq.monitored.erase(m.source);
  const std::string why = "went down (" + caf::to_string(m.reason) + ")";
  for (auto it = rq.waiting.begin(); it != rq.waiting.end();) {
    if (it->second.target != m.source) {
      ++it;
      continue;
    }
    rq.ready.push_back(
        [w = std::move(it->second), why] { w.fail(Status(Errc::unavailable, w.prefix + why)); });
    it = rq.waiting.erase(it);
  }
}

}  // namespace

std::shared_ptr<MeshCaller::Requests> make_requests(caf::actor_system& sys) {
  auto rq = std::make_shared<Requests>(sys);
  {
    ForeignThreadGuard guard;  // the mesh may be made on any thread
    rq->companion = caf::actor_cast<caf::strong_actor_ptr>(sys.spawn<caf::actor_companion>());
  }
  auto* self = rq->self();
  Requests* raw = rq.get();  // the companion's handlers run only inside drain()
  self->set_down_handler([raw](caf::down_msg& m) { target_down(*raw, m); });
  self->set_default_handler(caf::drop);
  // A behavior keeps it alive between requests (an actor with none ends
  // once its last awaited reply came). It takes no message of its own.
  self->become([](caf::ok_atom) {});
  // Until close(): the companion and its handler keep each other.
  self->on_enqueue([rq](caf::mailbox_element_ptr m) { received(rq, std::move(m)); });
  return rq;
}

bool delivering_here(const MeshCaller::Requests& rq) { return t_delivering == &rq; }

Status MeshCaller::send(const std::function<void(caf::actor_companion*, Requests*)>& send) const {
  auto& rq = *requests_;
  {
    std::lock_guard<std::mutex> lock(rq.mu);
    if (rq.closed) return Status(Errc::shutdown, "mesh: the mesh is closed");
    const auto* outer = std::exchange(t_holding, &rq);
    send(rq.self(), &rq);
    t_holding = outer;
  }
  drain(rq);
  return Status();
}

std::uint64_t MeshCaller::watch_request(Requests* rq, const caf::actor_addr& target,
                                        std::string prefix,
                                        std::function<void(const Status&)> fail) {
  const auto id = rq->next++;
  rq->waiting.emplace(id, Requests::Waiting{target, std::move(prefix), std::move(fail)});
  if (rq->monitored.insert(target).second) rq->self()->monitor(target);
  return id;
}

void MeshCaller::settle_request(Requests* rq, std::uint64_t id, std::function<void()> done) {
  if (rq->waiting.erase(id) != 0) rq->ready.push_back(std::move(done));
}

void stop_companion(const caf::strong_actor_ptr& companion) {
  static_cast<caf::actor_companion*>(caf::actor_cast<caf::abstract_actor*>(companion))
      ->cleanup(caf::exit_reason::user_shutdown, nullptr);
}

caf::strong_actor_ptr MeshCaller::close_requests() {
  std::vector<std::function<void()>> ready;
  caf::strong_actor_ptr companion;
  {
    std::lock_guard<std::mutex> lock(requests_->mu);
    if (requests_->closed) return nullptr;
    requests_->closed = true;
    for (auto& [id, w] : requests_->waiting) {
      ready.push_back([w = std::move(w)] {
        w.fail(Status(Errc::shutdown, w.prefix + "had not answered when the mesh was closed"));
      });
    }
    requests_->waiting.clear();
    companion = std::move(requests_->companion);
  }
  for (auto& f : ready) f();
  return companion;
}

}  // namespace meshstore::internal
