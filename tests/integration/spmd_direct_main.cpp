// Under a launcher (meshrun -n 3), the ranks of a Mesh::from_env job
// connect to each other directly, not only to rank 0: each rank's member
// asks every other rank's, and every pair of ranks holds a TCP connection
// of its own (docs/architecture.md, "Direct connections"). The exit code
// is the verdict: a rank exits 0 only once every check passed.

#include <unistd.h>

#include <cstdio>
#include <string>

#include "meshstore/mesh.hpp"
#include "testing/sockets.hpp"

using namespace std::chrono_literals;

namespace {

using add_atom = caf::atom_constant<caf::atom("add")>;
using pid_atom = caf::atom_constant<caf::atom("pid")>;
using relay_atom = caf::atom_constant<caf::atom("relay")>;
using worker_actor = caf::typed_actor<caf::replies_to<add_atom, int>::with<int>,
                                      caf::replies_to<pid_atom>::with<std::int32_t>>;
// Asks another rank's worker, and answers what it said.
using relay_actor = caf::typed_actor<caf::replies_to<relay_atom, worker_actor, int>::with<int>>;

worker_actor::behavior_type worker(worker_actor::pointer, int rank) {
  return {[=](add_atom, int x) { return x + 100 * rank; },
          [](pid_atom) { return static_cast<std::int32_t>(::getpid()); }};
}

relay_actor::behavior_type relay(relay_actor::pointer self, int) {
  return {[=](relay_atom, const worker_actor& to, int x) -> caf::result<int> {
    auto rp = self->make_response_promise<int>();
    self->request(to, 10s, add_atom::value, x)
        .then([rp](int r) mutable { rp.deliver(r); },
              [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
    return rp;
  }};
}

int fail(int rank, const std::string& why) {
  std::fprintf(stderr, "spmd_direct: rank %d: %s\n", rank, why.c_str());
  return 1;
}

}  // namespace

int main() {
  meshstore::MeshOptions o;
  o.request_timeout = 30s;
  o.add_types = [](caf::actor_system_config& cfg) {
    cfg.add_message_type<worker_actor>("spmd_direct::worker_actor");
  };
  auto mesh = meshstore::Mesh::from_env(o);
  if (!mesh.ok()) return fail(-1, mesh.status().to_string());
  const int me = mesh->rank(), world = mesh->world_size();
  auto workers = mesh->spawn<worker_actor>("workers", worker);
  if (!workers.ok()) return fail(me, workers.status().to_string());
  auto relays = mesh->spawn<relay_actor>("relays", relay);
  if (!relays.ok()) return fail(me, relays.status().to_string());
  auto pids = workers->broadcast<std::int32_t>(pid_atom::value).get(30s);
  if (!pids.ok()) return fail(me, pids.status().to_string());
  for (int to = 0; to < world; ++to) {
    if (to == me) continue;
    auto r = relays->ask<int>(me, relay_atom::value, workers->at(to), me).get(30s);
    if (!r.ok())
      return fail(me, "asking rank " + std::to_string(to) + ": " + r.status().to_string());
    if (*r != me + 100 * to) return fail(me, "rank " + std::to_string(to) + " answered wrong");
    // Rank 0 is every rank's first connection; the others connect on join.
    const int a = (*pids)[static_cast<std::size_t>(me)], b = (*pids)[static_cast<std::size_t>(to)];
    if (meshstore::testing::connected_ports(a, b).empty() &&
        meshstore::testing::connected_ports(b, a).empty()) {
      return fail(me, "no connection of its own to rank " + std::to_string(to) +
                          ": their messages go through rank 0");
    }
  }
  // Collective: no rank leaves before every rank has checked.
  if (auto done = mesh->spawn<worker_actor>("done", worker); !done.ok()) {
    return fail(me, done.status().to_string());
  }
  std::printf("spmd_direct: rank %d: ok\n", me);
  return 0;
}
