// Micro figures of the runtime's hot pieces (Google Benchmark): future
// plumbing, strided copies against memcpy of the same bytes, the store's
// wire codec, how long a message takes to reach an actor whose scheduler
// worker has gone idle and what the workers' idle polling costs, and a
// state dict's planning on the caller's thread (put and read of 1,000
// tensors of 4 KiB, against a memcpy of their bytes). Run with
// --benchmark_min_time=0.01 for a smoke pass.

#include <benchmark/benchmark.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <cstring>
#include <ctime>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "meshstore/future.hpp"
#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/protocol/fast_get.hpp"
#include "meshstore/protocol/records.hpp"
#include "meshstore/state_dict.hpp"
#include "meshstore/state_dicts/client_calls.hpp"
#include "meshstore/state_dicts/put_plan.hpp"
#include "meshstore/state_dicts/read_plan.hpp"
#include "meshstore/tensor.hpp"
#include "meshstore/transports/shm/ring.hpp"
#include "meshstore/volume/state.hpp"

namespace {

using namespace meshstore;

void BM_PromiseSetThenGet(benchmark::State& state) {
  for (auto _ : state) {
    Promise<int> p;
    auto f = p.future();
    p.set_value(1);
    benchmark::DoNotOptimize(f.get().value());
  }
}
BENCHMARK(BM_PromiseSetThenGet);

void BM_ThenChainOfFour(benchmark::State& state) {
  for (auto _ : state) {
    Promise<int> p;
    auto f = p.future()
                 .then([](const int& x) { return x + 1; })
                 .then([](const int& x) { return x + 1; })
                 .then([](const int& x) { return x + 1; })
                 .then([](const int& x) { return x + 1; });
    p.set_value(0);
    benchmark::DoNotOptimize(f.get().value());
  }
}
BENCHMARK(BM_ThenChainOfFour);

void BM_Memcpy(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<char> a(n, 1), b(n, 0);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_Memcpy)->Arg(16 << 20);

// Half the columns of a 4096-row float32 matrix: rows of contiguous runs.
void BM_PackColumns(benchmark::State& state) {
  const std::int64_t rows = 4096, cols = 2048;
  std::vector<float> a(rows * cols, 1.0f), b(rows * cols / 2);
  auto view = TensorView::of(a.data(), {rows, cols}).narrow(1, 0, cols / 2).value();
  for (auto _ : state) {
    pack_to(view, b.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * b.size() * sizeof(float)));
}
BENCHMARK(BM_PackColumns);

void BM_EncodeDecodeKeyRecord(benchmark::State& state) {
  wire::KeyRecord r;
  r.key = "model.layers.17.self_attn.q_proj.weight";
  r.dtype = DType::bfloat16;
  r.shape = {4096, 4096};
  r.version = 3;
  r.shards.push_back({TensorSlice::full(r.shape), "volume-0", 42, 4096ull * 4096 * 2});
  for (auto _ : state) {
    wire::KeyRecord back;
    benchmark::DoNotOptimize(wire::decode(wire::encode(r), back));
  }
}
BENCHMARK(BM_EncodeDecodeKeyRecord);

// A small put's commit request over a channel (4 KiB inline, one record)
// through the codec both ends run: the client's encode, the volume's
// decode and check, the reply's encode and the client's decode. What a
// small put costs in CPU beyond its round trip.
void BM_InlineCommitCodec4KiB(benchmark::State& state) {
  namespace fg = protocol::fast_get;
  std::vector<std::byte> bytes(4096, std::byte{7});
  wire::KeyRecord r;
  r.key = "weights/step";
  r.dtype = DType::uint8;
  r.shape = {4096};
  r.expect_version = 12;
  r.shards.push_back({TensorSlice::full(r.shape), "volume-0", 0, 4096});
  std::vector<std::byte> request, reply;
  for (auto _ : state) {
    fg::CommitRequest req;
    req.records.push_back(r);
    req.inlined.emplace_back(
        std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    fg::encode_into(req, request);
    auto decoded = fg::decode_commit(request);
    benchmark::DoNotOptimize(volume::check_commit(*decoded, "volume-0"));
    std::string owned(*decoded->inlined.front());  // the volume's copy
    benchmark::DoNotOptimize(owned.data());
    fg::CommitDone done;
    done.versions = {13};
    done.placed.push_back({99, "meshstore.1-2.seg;4096"});
    reply = fg::encode_commit_done(done);
    bool refused = false;
    benchmark::DoNotOptimize(fg::decode_commit_reply(reply, 1, 1, 0, &refused));
  }
}
BENCHMARK(BM_InlineCommitCodec4KiB);

// The store's actor runtime (internal::ActorRuntime, its scheduler
// settings), with 2 threads as on the reference VM; null, and the
// benchmark skipped with the reason, when it cannot start.
std::unique_ptr<internal::ActorRuntime> store_runtime(benchmark::State& state) {
  internal::RuntimeOptions options;
  options.scheduler_threads = 2;
  auto runtime = internal::ActorRuntime::create(options);
  if (!runtime.ok()) {
    state.SkipWithError(runtime.status().to_string().c_str());
    return nullptr;
  }
  return std::move(runtime).value();
}

// A message from a thread outside the actor system to an actor, timed
// until the actor's handler runs (the sender spins on a flag the handler
// sets, so only the scheduler's hand-off is timed, not the sender's own
// wake-up). range(0) is the pause before each message, in microseconds: 0
// sends back to back (a worker is still spinning: its
// internal::scheduler_polls() aggressive polls), longer pauses let the workers go to sleep (the
// runtime sets work-stealing.moderate-poll-attempts to 0: no 50 us polling phase), so the message
// pays for waking one. The scheduler's configuration is the store's (internal::ActorRuntime, 2
// threads as on the reference VM).
void BM_ActorWake(benchmark::State& state) {
  auto runtime = store_runtime(state);
  if (!runtime) return;
  std::atomic<std::int64_t> handled{0};
  {
    auto actor = runtime->system().spawn([&handled](caf::event_based_actor*) -> caf::behavior {
      return {[&handled](std::int64_t) {
        handled.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                      std::memory_order_release);
      }};
    });
    const auto pause = std::chrono::microseconds(state.range(0));
    for (auto _ : state) {
      if (pause.count() > 0) std::this_thread::sleep_for(pause);
      handled.store(0, std::memory_order_relaxed);
      const auto t0 = std::chrono::steady_clock::now();
      caf::anon_send(actor, std::int64_t{1});
      std::int64_t at = 0;
      while ((at = handled.load(std::memory_order_acquire)) == 0) {
      }
      state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::duration(at) -
                                                           t0.time_since_epoch())
                                 .count());
    }
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  }
}
BENCHMARK(BM_ActorWake)
    ->Arg(0)
    ->Arg(200)
    ->Arg(2000)
    ->Arg(20000)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// What an idle scheduler's polling costs (internal::scheduler_polls(),
// MESHSTORE_SCHEDULER_POLLS): the process's CPU time from one message to an
// actor until, 20 ms later, every worker has gone back to sleep; the
// counter "cpu_us" is that CPU time per message (the handler itself takes
// well under a microsecond). Wall time per iteration is the 20 ms pause.
void BM_IdleSchedulerCpu(benchmark::State& state) {
  auto runtime = store_runtime(state);
  if (!runtime) return;
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
  };
  double cpu = 0;
  {
    auto actor = runtime->system().spawn(
        [](caf::event_based_actor*) -> caf::behavior { return {[](std::int64_t) {}}; });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the spawn's own polling
    for (auto _ : state) {
      const double c0 = cpu_now();
      caf::anon_send(actor, std::int64_t{1});
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      cpu += cpu_now() - c0;
    }
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  }
  state.counters["cpu_us"] = cpu / static_cast<double>(state.iterations());
}
BENCHMARK(BM_IdleSchedulerCpu)->Iterations(50)->Unit(benchmark::kMillisecond);

// A request and its reply through the shared-memory ring (issue 26's fast
// path) between this process and a child that echoes: range(0) bytes each
// way; range(1) the receivers' spin in microseconds before they sleep on
// the futex (0: every message wakes a sleeping peer). The figure to hold
// next to a bare CAF request across processes (store_bench --scenario
// small's round trip, about 190 us on the reference VM).
void BM_RingRoundTrip(benchmark::State& state) {
  using transports::shm::Ring;
  Ring::Options o;
  o.slot_bytes = 8192;
  o.spin = std::chrono::microseconds(state.range(1));
  auto client = Ring::create(o);
  if (!client.ok()) {
    state.SkipWithError(client.status().to_string().c_str());
    return;
  }
  const std::string name = (*client)->name();
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child == 0) {
    auto server = Ring::attach(name, parent, o.spin);
    if (!server.ok()) _exit(2);
    for (;;) {
      auto m = (*server)->receive(std::chrono::steady_clock::now() + std::chrono::hours(1));
      if (!m.ok()) _exit(0);  // the client closed its end
      if (!(*server)
               ->send(m->tag, m->bytes.data(), m->bytes.size(),
                      std::chrono::steady_clock::now() + std::chrono::seconds(10))
               .ok()) {
        _exit(3);
      }
    }
  }
  std::vector<std::byte> bytes(static_cast<std::size_t>(state.range(0)), std::byte{7});
  const auto deadline = [] { return std::chrono::steady_clock::now() + std::chrono::seconds(10); };
  for (auto _ : state) {
    if (!(*client)->send(1, bytes.data(), bytes.size(), deadline()).ok()) {
      state.SkipWithError("send failed");
      break;
    }
    auto reply = (*client)->receive(deadline());
    if (!reply.ok()) {
      state.SkipWithError(reply.status().to_string().c_str());
      break;
    }
    benchmark::DoNotOptimize(reply->bytes.data());
  }
  client->reset();  // the child sees the client gone and exits
  waitpid(child, nullptr, 0);
}
BENCHMARK(BM_RingRoundTrip)
    ->Args({64, 50})
    ->Args({4096, 50})
    ->Args({4096, 0})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

// 1,000 bfloat16 tensors of 4 KiB, named as a model's are, and a state dict
// of views over them.
struct SmallModel {
  std::vector<std::vector<std::uint16_t>> buffers;
  StateDict sd;
  SmallModel() {
    buffers.resize(1000, std::vector<std::uint16_t>(2048, 0x3f80));
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      (void)sd.insert("model.layers." + std::to_string(i / 10) + ".w" + std::to_string(i % 10),
                      TensorView(buffers[i].data(), DType::bfloat16, {2048}));
    }
  }
};

// What put_state_dict does on the caller's thread before anything is sent:
// the layout, the manifest and the gather of the packed bucket.
void BM_PreparePut1000x4KiB(benchmark::State& state) {
  SmallModel m;
  for (auto _ : state) {
    auto p = state_dicts::prepare_put(m.sd, "put_state_dict", StateDictPutOptions{});
    benchmark::DoNotOptimize(p);
  }
  state.counters["entries"] = 1000;
}
BENCHMARK(BM_PreparePut1000x4KiB)->Unit(benchmark::kMicrosecond);

// The same, for a put of the layout put before (what put_state_dict does
// every step of a training loop): the kept manifest is checked, not rebuilt.
void BM_PreparePutSameLayout1000x4KiB(benchmark::State& state) {
  SmallModel m;
  std::shared_ptr<const state_dicts::Snapshot> layout;
  (void)state_dicts::prepare_put(m.sd, "put_state_dict", StateDictPutOptions{}, nullptr, &layout);
  for (auto _ : state) {
    std::shared_ptr<const state_dicts::Snapshot> used;
    auto p = state_dicts::prepare_put(m.sd, "put_state_dict", StateDictPutOptions{}, layout, &used);
    benchmark::DoNotOptimize(p);
    if (used != layout) return state.SkipWithError("the kept layout was not used");
  }
  state.counters["entries"] = 1000;
}
BENCHMARK(BM_PreparePutSameLayout1000x4KiB)->Unit(benchmark::kMicrosecond);

// What get_state_dict_into does on the caller's thread with a cached
// manifest: match the destination, and plan the scatter of the bucket.
void BM_PlanInto1000x4KiB(benchmark::State& state) {
  SmallModel src, dst;
  auto prepared = state_dicts::prepare_put(src.sd, "put_state_dict", StateDictPutOptions{});
  if (!prepared.ok()) return state.SkipWithError("prepare_put failed");
  const std::string& bytes = (*prepared)->call.stream_manifest;
  auto t = Tensor::empty(DType::uint8, {static_cast<std::int64_t>(bytes.size())});
  std::memcpy(t->data(), bytes.data(), bytes.size());
  auto snap = state_dicts::decode_snapshot(*t, "m", "get_state_dict_into");
  if (!snap.ok()) return state.SkipWithError("decode_snapshot failed");
  auto shared = std::make_shared<const state_dicts::Snapshot>(std::move(snap).value());
  for (auto _ : state) {
    client::GetCall into;
    auto plan = state_dicts::plan_into("m", &dst.sd, "get_state_dict_into", shared, into, nullptr);
    benchmark::DoNotOptimize(plan);
  }
  state.counters["entries"] = 1000;
}
BENCHMARK(BM_PlanInto1000x4KiB)->Unit(benchmark::kMicrosecond);

// The same 4 MiB copied once, tensor by tensor: what the planning is
// measured against.
void BM_Memcpy1000x4KiB(benchmark::State& state) {
  SmallModel src, dst;
  for (auto _ : state) {
    for (std::size_t i = 0; i < src.buffers.size(); ++i) {
      std::memcpy(dst.buffers[i].data(), src.buffers[i].data(), 4096);
    }
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_Memcpy1000x4KiB)->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
