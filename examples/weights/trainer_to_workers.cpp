// trainer_to_workers: weight sync, the job a trainer and its inference
// workers run every step. Rank 0 (the trainer) holds the store and
// publishes a synthetic state dict with the exact names and shapes of a
// Qwen3 checkpoint in bf16 every step; every other rank (a worker) pulls
// each version into the buffers it already holds (no allocation) and
// checks it. Run it under meshrun (or torchrun, mpirun, srun):
//
//   build/bin/meshrun -n 3 -- build/bin/trainer_to_workers --model qwen3-0.6b --steps 5
//
// Models: qwen3-0.6b (1.2 GB), qwen3-1.7b (3.4 GB), qwen3-4b-8layers
// (2.4 GB). Workers wait for each version with get_next_state_dict_into,
// which streams it while the trainer still puts it. The trainer publishes
// with Store::publish in the mode the store picks (--publish auto, the
// default: direct here, where the workers copy each tensor straight out of
// the trainer's own buffers, and the trainer reclaims them before it writes
// the next step), or as asked (--publish direct, copy). With --publish
// in-place the trainer writes each version straight into the store's shared
// memory (stage_publish) and commits it: no copy in at all. The trainer prints one
// line per step: its publish, and the end-to-end time from its first byte
// to the slowest worker's last, in seconds, GB/s and x memcpy of the same
// bytes measured in the same run. Workers on the trainer's host read
// through shared memory, others over tcp.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "meshstore/launch_env.hpp"
#include "meshstore/store.hpp"
#include "qwen3_shapes.hpp"

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string model = "qwen3-0.6b";
  int steps = 5;
  std::int64_t stride = 4099;                                       // elements between checked ones
  bool in_place = false;                                            // --publish in-place
  meshstore::PublishMode mode = meshstore::PublishMode::automatic;  // --publish auto|direct|copy
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "trainer_to_workers: %s\n"
               "usage: trainer_to_workers [--model qwen3-0.6b|qwen3-1.7b|qwen3-4b-8layers]\n"
               "                          [--steps N] [--check-stride N]\n"
               "                          [--publish auto|direct|copy|in-place]\n",
               why.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--model") {
      a.model = next();
    } else if (arg == "--steps") {
      a.steps = std::atoi(next().c_str());
    } else if (arg == "--check-stride") {
      a.stride = std::atoll(next().c_str());
    } else if (arg == "--publish") {
      const std::string mode = next();
      if (mode == "in-place") {
        a.in_place = true;
      } else if (mode == "auto" || mode == "direct" || mode == "copy") {
        a.mode = mode == "auto"     ? meshstore::PublishMode::automatic
                 : mode == "direct" ? meshstore::PublishMode::direct
                                    : meshstore::PublishMode::copy;
      } else {
        usage("--publish is auto, direct, copy or in-place");
      }
    } else {
      usage("unknown argument '" + arg + "'");
    }
  }
  if (a.steps < 1) usage("--steps must be at least 1");
  if (a.stride < 1) usage("--check-stride must be at least 1");
  return a;
}

double secs(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The bf16 bit pattern of tensor `t` at step `step`: any bits will do, as
// long as every (step, tensor) pair differs.
std::uint16_t pattern(int step, std::size_t t) {
  return static_cast<std::uint16_t>((step * 2654435761u + t * 40503u) & 0xffffu);
}

// Waits (bounded, polling the key space with backoff) until `n` keys lie under `prefix`.
meshstore::Status wait_count(meshstore::Store& store, const std::string& prefix, std::size_t n) {
  const auto deadline = Clock::now() + 300s;
  auto backoff = 200us;
  for (;;) {
    auto keys = store.keys(prefix).get(30s);
    if (!keys.ok()) return keys.status();
    if (keys->size() >= n) return meshstore::Status();
    if (Clock::now() > deadline) {
      return meshstore::Status(meshstore::Errc::timeout, "waited 300 s for " + std::to_string(n) +
                                                             " keys under '" + prefix + "'");
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min<std::chrono::microseconds>(backoff * 2, 20ms);
  }
}

// This boot's id: steady-clock times compare only within one boot.
std::string boot_id() {
  std::string id;
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buf[64] = {0};
    if (std::fgets(buf, sizeof(buf), f)) id = buf;
    std::fclose(f);
  }
  while (!id.empty() && id.back() == '\n') id.pop_back();
  return id;
}

long long steady_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

int fail(int rank, const std::string& what, const meshstore::Status& s) {
  std::fprintf(stderr, "rank %d: %s: %s\n", rank, what.c_str(), s.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  qwen3::Config config;
  if (!qwen3::find(args.model, config)) usage("unknown model '" + args.model + "'");
  auto env = meshstore::LaunchEnv::from_env();
  if (!env.ok()) return fail(-1, "launch environment", env.status());
  const int rank = env->rank, world = env->world_size;
  if (world < 2) {
    std::fprintf(stderr,
                 "trainer_to_workers: needs a trainer and at least one worker (-n 2 or more)\n");
    return 2;
  }
  auto store = meshstore::Store::from_env();
  if (!store.ok()) return fail(rank, "Store::from_env", store.status());

  // Every rank holds the whole state dict in its own buffers.
  const auto shapes = qwen3::tensors(config);
  std::vector<std::vector<std::uint16_t>> buffers;
  meshstore::StateDict sd;
  std::uint64_t total = 0;
  for (const auto& [name, shape] : shapes) {
    buffers.emplace_back(static_cast<std::size_t>(qwen3::numel(shape)));
    auto s = sd.insert(
        name, meshstore::TensorView(buffers.back().data(), meshstore::DType::bfloat16, shape));
    if (!s.ok()) return fail(rank, "state dict", s);
    total += buffers.back().size() * 2;
  }
  const double gb = static_cast<double>(total) / 1e9;

  if (rank == 0) {
    std::printf("trainer: %s, %zu tensors, %.2f GB in bf16, %d worker(s), %d steps\n",
                config.name.c_str(), shapes.size(), gb, world - 1, args.steps);
    // memcpy of the same bytes, measured in this run: the yardstick.
    std::vector<std::vector<std::uint16_t>> scratch;
    for (const auto& b : buffers) scratch.emplace_back(b.size());
    auto t0 = Clock::now();
    for (std::size_t t = 0; t < buffers.size(); ++t) {
      std::memcpy(scratch[t].data(), buffers[t].data(), buffers[t].size() * 2);
    }
    t0 = Clock::now();
    for (std::size_t t = 0; t < buffers.size(); ++t) {
      std::memcpy(scratch[t].data(), buffers[t].data(), buffers[t].size() * 2);
    }
    const double memcpy_s = secs(t0);
    scratch.clear();
    std::printf("memcpy of the same bytes: %.3f s (%.2f GB/s)\n", memcpy_s, gb / memcpy_s);
    std::vector<meshstore::TensorSpec> specs;
    for (const auto& [name, shape] : shapes) {
      specs.push_back({name, meshstore::DType::bfloat16, shape});
    }
    const std::string here = boot_id();
    meshstore::PublishOptions po;
    po.mode = args.mode;
    meshstore::Publication last;  // the version whose buffers may still be lent
    for (int step = 1; step <= args.steps; ++step) {
      meshstore::Result<std::uint64_t> v = std::uint64_t{0};
      double put_s = 0, reclaim_s = 0;
      std::string how = "in place";
      if (args.in_place) {
        // The update step writes straight into the store's memory.
        auto staged = store->state_dicts().stage_publish("weights", specs).get(600s);
        if (!staged.ok()) return fail(rank, "stage step " + std::to_string(step), staged.status());
        const auto& entries = staged->state_dict().entries();
        for (std::size_t t = 0; t < entries.size(); ++t) {
          auto* p = static_cast<std::uint16_t*>(entries[t].view.data());
          std::fill(p, p + entries[t].view.numel(), pattern(step, t));
        }
        t0 = Clock::now();
        v = staged->commit().get(600s);
      } else {
        // The optimizer step writes the buffers: take them back first (a
        // direct version is read straight out of them until then).
        t0 = Clock::now();
        if (last.version() != 0) {
          if (auto s = last.reclaim().get(600s); !s.ok()) {
            return fail(rank, "reclaim step " + std::to_string(step - 1), s.status());
          }
        }
        reclaim_s = secs(t0);
        for (std::size_t t = 0; t < buffers.size(); ++t) {
          std::fill(buffers[t].begin(), buffers[t].end(), pattern(step, t));
        }
        t0 = Clock::now();
        auto pub = store->state_dicts().publish("weights", sd, po).get(600s);
        if (pub.ok()) {
          last = *pub;
          v = pub->version();
          how = meshstore::publish_mode_name(pub->mode());
        } else {
          v = pub.status();
        }
      }
      put_s = secs(t0);
      if (!v.ok()) return fail(rank, "publish step " + std::to_string(step), v.status());
      const std::string acks = "ack/" + std::to_string(step) + "/";
      if (auto s = wait_count(*store, acks, static_cast<std::size_t>(world - 1)); !s.ok()) {
        return fail(rank, "waiting for the workers", s);
      }
      // Each ack holds when the worker's last byte arrived and its boot id.
      double e2e = 0;
      bool same_host = true;
      for (int w = 1; w < world; ++w) {
        auto text = store->get_object(acks + std::to_string(w)).get(30s);
        if (!text.ok()) return fail(rank, "reading an ack", text.status());
        char boot[64] = {0};
        long long end_ns = 0;
        if (std::sscanf(text->c_str(), "%lld %63s", &end_ns, boot) != 2 || here != boot) {
          same_host = false;
          continue;
        }
        e2e = std::max(e2e, static_cast<double>(end_ns - steady_ns(t0)) / 1e9);
      }
      char e2e_text[96] = "end to end n/a (workers on other hosts)";
      if (same_host) {
        std::snprintf(e2e_text, sizeof(e2e_text), "end to end %.3f s %.2f GB/s (%.2f x memcpy)",
                      e2e, gb / e2e, memcpy_s / e2e);
      }
      char put_text[96];
      if (args.in_place) {
        std::snprintf(put_text, sizeof(put_text), "commit %.2f ms", put_s * 1e3);
      } else {
        std::snprintf(put_text, sizeof(put_text), "publish (%s) %.3f s, reclaim %.2f ms",
                      how.c_str(), put_s, reclaim_s * 1e3);
      }
      std::printf("step %d/%d: version %llu %s | %s | checked\n", step, args.steps,
                  static_cast<unsigned long long>(*v), put_text, e2e_text);
      std::fflush(stdout);
    }
    // The workers are done once they acked the last step; wait for their exit notes.
    if (auto s = wait_count(*store, "done/", static_cast<std::size_t>(world - 1)); !s.ok()) {
      return fail(rank, "waiting for the workers to finish", s);
    }
    std::printf("trainer_to_workers: ok\n");
    return 0;
  }

  // A worker: wait for each version and pull it in place (streamed while
  // the trainer still puts it), then check it.
  const std::string here = boot_id();
  for (int step = 1; step <= args.steps; ++step) {
    auto v = store->state_dicts()
                 .get_next_into("weights", sd, static_cast<std::uint64_t>(step - 1), 300s)
                 .get(600s);
    const long long end_ns = steady_ns(Clock::now());
    if (!v.ok()) return fail(rank, "get step " + std::to_string(step), v.status());
    const int version = static_cast<int>(*v);
    for (std::size_t t = 0; t < buffers.size(); ++t) {
      const auto want = pattern(version, t);
      const auto& b = buffers[t];
      for (std::size_t i = 0; i < b.size(); i += static_cast<std::size_t>(args.stride)) {
        if (b[i] != want || b.back() != want) {
          std::fprintf(stderr, "rank %d: step %d: '%s' holds the wrong bytes at %zu\n", rank, step,
                       shapes[t].first.c_str(), i);
          return 1;
        }
      }
    }
    char text[96];
    std::snprintf(text, sizeof(text), "%lld %s", end_ns, here.c_str());
    auto ack = store->put_object("ack/" + std::to_string(step) + "/" + std::to_string(rank), text)
                   .get(30s);
    if (!ack.ok()) return fail(rank, "ack", ack.status());
  }
  auto done = store->put_object("done/" + std::to_string(rank), "").get(30s);
  if (!done.ok()) return fail(rank, "done", done.status());
  return 0;
}
