// mesh_broadcast: an actor mesh across the ranks of a launched job.
//
//   build/bin/meshrun -n 3 -- build/bin/mesh_broadcast
//
// Every rank joins the job as one process mesh (ProcMesh::from_env) and
// spawns its member of the "workers" mesh from a function (each rank makes
// its own: nothing to register): a typed actor that squares numbers and
// reports its rank.
// Rank 0 broadcasts to all members and gathers the replies into one future,
// addresses one rank alone, then releases everyone.

#include <cstdio>
#include <memory>

#include "meshstore/proc_mesh.hpp"

using namespace std::chrono_literals;

using square_atom = caf::atom_constant<caf::atom("square")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
using worker_actor = caf::typed_actor<caf::replies_to<square_atom, int>::with<int>,
                                      caf::replies_to<release_atom>::with<int>>;

// A worker answers square requests with x * x + rank (so replies show who
// answered) and, on release, completes `released` so its rank can leave.
worker_actor::behavior_type worker(worker_actor::pointer, int rank,
                                   std::shared_ptr<meshstore::Promise<void>> released) {
  return {
      [=](square_atom, int x) { return x * x + rank * 1000; },
      [=](release_atom) {
        released->set_value();
        return rank;
      },
  };
}

int main() {
  auto mesh = meshstore::ProcMesh::from_env();
  if (!mesh.ok()) {
    std::fprintf(stderr, "mesh_broadcast: %s\n", mesh.status().to_string().c_str());
    return 1;
  }
  const int rank = mesh->rank(), world = mesh->size();
  auto released = std::make_shared<meshstore::Promise<void>>();
  auto done = released->future();
  auto workers = mesh->spawn<worker_actor>("workers", worker, released);
  if (!workers.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, workers.status().to_string().c_str());
    return 1;
  }
  if (rank == 0) {
    auto squares = workers->broadcast<int>(square_atom::value, 7).get(30s);
    if (!squares.ok()) {
      std::fprintf(stderr, "rank 0: broadcast: %s\n", squares.status().to_string().c_str());
      return 1;
    }
    std::printf("rank 0: broadcast square(7) ->");
    for (int r = 0; r < world; ++r) {
      std::printf(" %d", (*squares)[r]);
      if ((*squares)[r] != 49 + r * 1000) return 1;
    }
    std::printf("\n");
    auto last = workers->ask<int>(world - 1, square_atom::value, 3).get(30s);
    if (!last.ok() || *last != 9 + (world - 1) * 1000) return 1;
    std::printf("rank 0: rank %d alone: square(3) -> %d\n", world - 1, *last);
    // Everyone may leave: the replies show each rank got the message.
    auto left = workers->broadcast<int>(release_atom::value).get(30s);
    if (!left.ok()) return 1;
  }
  if (!done.get(60s).ok()) {
    std::fprintf(stderr, "rank %d: never released\n", rank);
    return 1;
  }
  std::printf("rank %d of %d: ok\n", rank, world);
  return 0;
}
