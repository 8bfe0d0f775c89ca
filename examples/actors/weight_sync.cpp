// A single-controller weight sync: one program launches three processes,
// stands a store up across them, spawns a trainer mesh on the first and an
// inference-worker mesh on the other two, and drives the steps: the trainer
// publishes its weights (publish_state_dict) and every worker pulls the new
// version into the buffers it already holds (get_next_state_dict_into) and
// checks it. The workers' volumes live in their own processes
// (per_local_rank); the bytes move between processes through the store's
// transports, the control through actor messages.
//
//   build/bin/weight_sync [--steps 3] [--mib 8]

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "meshstore/proc_mesh.hpp"
#include "meshstore/store_mesh.hpp"

using namespace std::chrono_literals;

namespace {

constexpr int kTensors = 4;
int g_mib = 8;  // per tensor; the same in every process (argv is passed on)

using publish_atom = caf::atom_constant<caf::atom("publish")>;
using pull_atom = caf::atom_constant<caf::atom("pull")>;
// The trainer: publishes step N's weights, answers the version.
using trainer_actor = caf::typed_actor<caf::replies_to<publish_atom, int>::with<std::uint64_t>>;
// A worker: pulls the version after `after`, checks it holds step N,
// answers the version it got.
using puller_actor =
    caf::typed_actor<caf::replies_to<pull_atom, std::uint64_t, int>::with<std::uint64_t>>;

// Weights of step `step`: every float is the step.
struct Weights {
  std::vector<std::vector<float>> buffers;
  meshstore::StateDict sd;
  Weights() {
    const auto n = static_cast<std::int64_t>(g_mib) * (1 << 20) / 4;
    for (int t = 0; t < kTensors; ++t) {
      buffers.emplace_back(static_cast<std::size_t>(n), 0.0f);
      auto s =
          sd.insert("layers." + std::to_string(t) + ".weight",
                    meshstore::TensorView(buffers.back().data(), meshstore::DType::float32, {n}));
      if (!s.ok()) {  // a fixed, valid layout: cannot fail
        std::fprintf(stderr, "weight_sync: %s\n", s.to_string().c_str());
        std::abort();
      }
    }
  }
};

// The store's error as the member's answer: the controller sees its code.
caf::error store_error(const meshstore::Status& s) { return meshstore::actor_error(s); }

// Handlers never block on a future (get() on an actor's thread would stall
// it): on_ready runs the rest on the actor once the store answers, and the
// response promise carries the answer back.
trainer_actor::behavior_type trainer(trainer_actor::stateful_pointer<Weights> self, int) {
  return {
      [=](publish_atom, int step) -> caf::result<std::uint64_t> {
        for (auto& b : self->state.buffers) std::fill(b.begin(), b.end(), float(step));
        auto store = meshstore::worker_store();
        if (!store.ok()) return store_error(store.status());
        auto rp = self->make_response_promise<std::uint64_t>();
        meshstore::on_ready(self,
                            (*store)->state_dicts().publish("weights", self->state.sd,
                                                            meshstore::PublishOptions::by_copy()),
                            [rp](const auto& v) mutable {
                              if (v.ok()) {
                                rp.deliver(v->version());
                              } else {
                                rp.deliver(store_error(v.status()));
                              }
                            });
        return rp;
      },
  };
}

// Whether every buffer holds `step` (sampled), as the store's kind of error.
meshstore::Status check_step(const Weights& w, int rank, int step) {
  for (const auto& b : w.buffers) {
    for (std::size_t i = 0; i < b.size(); i += 4099) {
      if (b[i] != float(step)) {
        return meshstore::Status(meshstore::Errc::internal,
                                 "worker " + std::to_string(rank) + ": element " +
                                     std::to_string(i) + " holds " + std::to_string(b[i]) +
                                     ", not step " + std::to_string(step));
      }
    }
  }
  return meshstore::Status();
}

puller_actor::behavior_type puller(puller_actor::stateful_pointer<Weights> self, int rank) {
  return {
      [=](pull_atom, std::uint64_t after, int step) -> caf::result<std::uint64_t> {
        auto store = meshstore::worker_store();
        if (!store.ok()) return store_error(store.status());
        auto rp = self->make_response_promise<std::uint64_t>();
        meshstore::on_ready(
            self, (*store)->state_dicts().get_next_into("weights", self->state.sd, after, 60s),
            [=](const meshstore::Result<std::uint64_t>& v) mutable {
              meshstore::Status s = v.ok() ? check_step(self->state, rank, step) : v.status();
              if (s.ok()) {
                rp.deliver(*v);
              } else {
                rp.deliver(store_error(s));
              }
            },
            90s);
        return rp;
      },
  };
}

meshstore::MeshOptions options() {
  meshstore::MeshOptions o;
  o.request_timeout = 120s;
  o.add_types = [](caf::actor_system_config& cfg) {
    cfg.add_actor_type("trainer", trainer);
    cfg.add_actor_type("puller", puller);
  };
  return o;
}

template <class T>
T must(meshstore::Result<T> r, const char* what) {
  if (!r.ok()) {
    std::fprintf(stderr, "weight_sync: %s: %s\n", what, r.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

int controller(int steps, const std::vector<std::string>& args) {
  meshstore::LaunchSpec spec;
  spec.args = args;  // the workers size their buffers alike
  const auto t0 = std::chrono::steady_clock::now();
  auto procs = must(meshstore::ProcMesh::launch({{"procs", 3}}, spec, options()), "launch");
  meshstore::StoreOptions so;
  so.placement.strategy = "per_local_rank";  // a volume in every process
  auto store = must(meshstore::spawn_store(procs, so), "spawn_store");
  auto trainers =
      must(must(procs.slice("procs", 0, 1), "slice").spawn<trainer_actor>("trainer", "trainer"),
           "spawn trainer");
  auto workers =
      must(must(procs.slice("procs", 1, 3), "slice").spawn<puller_actor>("workers", "puller"),
           "spawn workers");
  std::printf(
      "weight_sync: 3 processes, a store across them, a trainer and 2 workers in %.0f ms\n",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  std::uint64_t seen = 0;
  for (int step = 1; step <= steps; ++step) {
    const auto s0 = std::chrono::steady_clock::now();
    // The workers wait for the next version while the trainer publishes it.
    auto pulled = workers.call<std::uint64_t>(pull_atom::value, seen, step);
    const auto v =
        must(trainers.call_one<std::uint64_t>(publish_atom::value, step).get(120s), "publish");
    auto got = must(pulled.get(120s), "pull");
    for (int i = 0; i < got.size(); ++i) {
      if (!got[i].ok()) {
        std::fprintf(stderr, "weight_sync: worker %d: %s\n", i,
                     got[i].status().to_string().c_str());
        return 1;
      }
      if (*got[i] != v) {
        std::fprintf(stderr, "weight_sync: worker %d got version %llu, not %llu\n", i,
                     static_cast<unsigned long long>(*got[i]), static_cast<unsigned long long>(v));
        return 1;
      }
    }
    seen = v;
    std::printf(
        "step %d: version %llu, %d MiB published and pulled by 2 workers in %.1f ms\n", step,
        static_cast<unsigned long long>(v), kTensors * g_mib,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count());
  }
  procs.stop();  // the workers leave the store first, then it closes
  store.close();
  std::printf("weight_sync: ok\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 3;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--steps" || a == "--mib") && i + 1 < argc) {
      const int v = std::atoi(argv[++i]);
      if (v < 1 || v > 4096) {
        std::fprintf(stderr, "weight_sync: %s wants a number in [1, 4096]\n", a.c_str());
        return 2;
      }
      (a == "--steps" ? steps : g_mib) = v;
      args.push_back(a);
      args.push_back(argv[i]);
    } else {
      std::fprintf(stderr, "usage: weight_sync [--steps N] [--mib MIB_PER_TENSOR]\n");
      return 2;
    }
  }
  if (meshstore::ProcMesh::is_worker()) return meshstore::ProcMesh::serve(options()).ok() ? 0 : 1;
  return controller(steps, args);
}
