// store_bench --scenario weight-sync: put_state_dict and get_state_dict_into
// of a Qwen3-shaped bf16 state dict (the exact names and shapes) against
// memcpy of the same bytes; the per-tensor overhead fitted from a second
// workload (1,000 tensors of 4 KiB); a third (64 tensors of 4 MiB) for the
// simulator's cost per object (benchmarks/sim); end to end, from the trainer's first
// byte to the last byte in a reader process (run_reader), by copy and in
// place.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../bench_util.hpp"
#include "meshstore/store.hpp"
#include "peer.hpp"
#include "qwen3_shapes.hpp"
#include "scenarios.hpp"

using namespace std::chrono_literals;

namespace meshstore::bench {

namespace {

// Buffers and their state dict.
struct Dict {
  std::vector<std::vector<std::uint16_t>> buffers;
  meshstore::StateDict sd;
  std::uint64_t bytes = 0;
};

Dict make_dict(const qwen3::Tensors& shapes, std::uint16_t fill) {
  Dict d;
  d.buffers.reserve(shapes.size());
  for (const auto& [name, shape] : shapes) {
    d.buffers.emplace_back(static_cast<std::size_t>(qwen3::numel(shape)), fill);
    must(d.sd.insert(name, meshstore::TensorView(d.buffers.back().data(),
                                                 meshstore::DType::bfloat16, shape)),
         "state dict");
    d.bytes += d.buffers.back().size() * 2;
  }
  return d;
}

struct SyncTimes {
  double put = 0, get = 0;
};

// Median put_state_dict and get_state_dict_into seconds over `iters`, warm.
// memcpy of `src`'s bytes, tensor by tensor, warm: `iters` timings.
std::vector<double> memcpy_times(const Dict& src, const qwen3::Tensors& shapes, int iters) {
  Dict scratch = make_dict(shapes, 0);
  std::vector<double> t;
  for (int i = 0; i < iters + 1; ++i) {
    auto t0 = Clock::now();
    for (std::size_t k = 0; k < src.buffers.size(); ++k) {
      std::memcpy(scratch.buffers[k].data(), src.buffers[k].data(), src.buffers[k].size() * 2);
    }
    if (i > 0) t.push_back(secs(t0));
  }
  return t;
}

// The medians of `put` and of `get` over `iters` rounds of one, then the
// other; `progress` (null: none) names the rounds on stderr.
template <class Put, class Get>
SyncTimes time_rounds(int iters, const Put& put, const Get& get, const char* progress) {
  std::vector<double> put_t, get_t;
  for (int i = 0; i < iters; ++i) {
    if (progress)
      std::fprintf(stderr, "\rstore_bench weight-sync %s: round %d/%d", progress, i + 1, iters);
    auto t0 = Clock::now();
    put();
    put_t.push_back(secs(t0));
    t0 = Clock::now();
    get();
    get_t.push_back(secs(t0));
  }
  if (progress) std::fprintf(stderr, "\n");
  return SyncTimes{median(put_t), median(get_t)};
}

SyncTimes time_sync(meshstore::Store& store, const std::string& key, Dict& src, Dict& dst,
                    int iters, bool progress) {
  must(store.state_dicts().put(key, src.sd).get(600s), "put_state_dict (cold)");
  must(store.state_dicts().put(key, src.sd).get(600s), "put_state_dict (warm-up)");
  must(store.state_dicts().get_into(key, dst.sd).get(600s), "get_state_dict_into (warm-up)");
  return time_rounds(
      iters, [&] { must(store.state_dicts().put(key, src.sd).get(600s), "put_state_dict"); },
      [&] { must(store.state_dicts().get_into(key, dst.sd).get(600s), "get_state_dict_into"); },
      progress ? key.c_str() : nullptr);
}

// The same sync through versions, as a trainer and its workers run it:
// publish_state_dict, then get_latest_state_dict_into (the pointer read at
// the controller, then the version).
SyncTimes time_versioned_sync(meshstore::Store& store, const std::string& prefix, Dict& src,
                              Dict& dst, int iters) {
  auto publish = [&] {
    must(store.state_dicts().publish(prefix, src.sd, PublishOptions::by_copy()).get(600s),
         "publish_state_dict");
  };
  auto read = [&] {
    must(store.state_dicts().get_latest_into(prefix, dst.sd).get(600s),
         "get_latest_state_dict_into");
  };
  for (int i = 0; i < 2; ++i) {  // cold, then warm-up
    publish();
    read();
  }
  const SyncTimes t = time_rounds(iters, publish, read, nullptr);
  must(store.remove(prefix).get(60s), "cleanup");  // the pointer and its versions
  return t;
}

// The pattern of version `v` (bf16 bits), every element alike.
std::uint16_t pattern_of(std::uint64_t v) { return static_cast<std::uint16_t>(0x3f80 + v * 7); }

struct EndToEnd {
  double seconds = 0;  // median, first byte put to last byte read
  double put = 0;      // median publish_state_dict
  int rounds = 0;
};

// The trainer publishes, a worker in another process reads it into its own
// buffers, timed to the reader's last byte (steady clock, one host). Each
// round waits until the reader is subscribed to the next version first.
//  - copy: publish_state_dict of the trainer's buffers, timed from before
//    its first byte; the reader streams it while it is put.
//  - in place: the trainer writes the version straight into tensors from
//    stage_publish (as its update step would; not timed, like filling its
//    own buffers in the copy mode), then commit() is timed and the reader
//    reads it.
EndToEnd time_end_to_end(const Args& a, meshstore::Store& store, std::uint16_t store_port,
                         Dict& src, const qwen3::Tensors& shapes, int iters, bool in_place) {
  const std::string prefix = in_place ? "e2e_in_place" : "e2e";
  std::vector<meshstore::TensorSpec> specs;
  for (const auto& [name, shape] : shapes)
    specs.push_back({name, meshstore::DType::bfloat16, shape});
  const int warm = 2;  // the first versions fault in fresh segments
  const int rounds = iters + warm;
  auto subscribes = [&] {
    return must(store.admin().controller_counters().get(30s), "counters").stream_subscribes;
  };
  std::uint64_t last = subscribes();
  std::vector<std::string> args{"--peer",        "read",
                                "--port",        std::to_string(store_port),
                                "--model",       a.model,
                                "--transport",   a.transport,
                                "--tcp-streams", std::to_string(a.tcp_streams),
                                "--iters",       std::to_string(rounds),
                                "--prefix",      prefix};
  if (a.smoke) args.push_back("--smoke");
  auto reader = spawn_self(args);
  FILE* from = reader->from;
  char line[256];
  if (!std::fgets(line, sizeof(line), from) || std::strncmp(line, "ready", 5) != 0) {
    std::fprintf(stderr, "store_bench: the reader process did not start\n");
    std::exit(1);
  }
  std::vector<double> e2e, put;
  for (int r = 0; r < rounds; ++r) {
    if (!a.json) {
      std::fprintf(stderr, "\rstore_bench weight-sync end to end (%s): round %d/%d",
                   in_place ? "in place" : "copy", r + 1, rounds);
    }
    const std::uint64_t version = static_cast<std::uint64_t>(r) + 1;
    meshstore::StagedStateDict staged;
    if (in_place) {
      staged = must(store.state_dicts().stage_publish(prefix, specs).get(600s), "stage_publish");
      for (auto& e : staged.state_dict().entries()) {
        auto* p = static_cast<std::uint16_t*>(e.view.data());
        std::fill(p, p + e.view.numel(), pattern_of(version));
      }
    } else {
      for (auto& b : src.buffers) std::fill(b.begin(), b.end(), pattern_of(version));
    }
    // Bounded wait until the reader waits for this version.
    for (int i = 0; i < 60000 && subscribes() <= last; ++i) std::this_thread::sleep_for(1ms);
    last = subscribes();
    const auto t0 = Clock::now();
    const auto published =
        in_place
            ? must(staged.commit().get(600s), "commit")
            : must(store.state_dicts().publish(prefix, src.sd, PublishOptions::by_copy()).get(600s),
                   "publish")
                  .version();
    const double put_s = secs(t0);
    unsigned long long v = 0;
    long long end_ns = 0;
    int ok = 0;
    if (!std::fgets(line, sizeof(line), from) ||
        std::sscanf(line, "done %llu %lld %d", &v, &end_ns, &ok) != 3 || v != published || !ok) {
      std::fprintf(stderr, "store_bench: the reader read version %llu (%s), expected %llu\n", v,
                   ok ? "intact" : "corrupt", static_cast<unsigned long long>(published));
      std::exit(1);
    }
    const double e =
        static_cast<double>(
            end_ns -
            std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count()) /
        1e9;
    if (r >= warm) {
      e2e.push_back(e);
      put.push_back(put_s);
    }
  }
  if (!a.json) std::fprintf(stderr, "\n");
  reader.reset();  // closes its stdin and reaps it
  must(store.remove_batch({prefix}).get(60s), "cleanup");
  return EndToEnd{median(e2e), median(put), iters};
}
}  // namespace

// The reader peer of the end-to-end figure: connects to the store, then for
// each round waits for the next version under "e2e" (streamed while the
// writer puts it), notes when its last byte arrived, checks it, and reports
// "done VERSION STEADY_NS OK" on stdout.
int run_reader(const Args& a) {
  qwen3::Config config;
  if (!qwen3::find(a.model, config)) usage(("unknown model '" + a.model + "'").c_str());
  if (a.smoke) config.layers = 1;
  auto store = connect_helper(a, 2, "reader: connect");
  Dict dst = make_dict(qwen3::tensors(config), 0);
  std::printf("ready\n");
  std::fflush(stdout);
  std::uint64_t seen = 0;
  for (int r = 0; r < a.iters; ++r) {
    seen = must(store.state_dicts().get_next_into(a.prefix, dst.sd, seen, 600s).get(),
                "reader: get_next_state_dict_into");
    const auto end =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
            .count();
    bool ok = true;
    for (const auto& b : dst.buffers) {
      for (std::size_t i = 0; i < b.size() && ok; i += 4099) ok = b[i] == pattern_of(seen);
      ok = ok && b.back() == pattern_of(seen);
    }
    std::printf("done %llu %lld %d\n", static_cast<unsigned long long>(seen),
                static_cast<long long>(end), ok ? 1 : 0);
    std::fflush(stdout);
  }
  char c;
  while (read(0, &c, 1) > 0) {
  }
  store.close();
  return 0;
}

void run_weight_sync(const Args& a) {
  qwen3::Config config;
  if (!qwen3::find(a.model, config)) usage(("unknown model '" + a.model + "'").c_str());
  if (a.smoke) config.layers = 1;  // the real shapes, fewer layers
  const int iters = a.iters ? a.iters : (a.smoke ? 2 : 5);
  auto session = open_session(a);
  auto& store = session.store;
  const auto shapes = qwen3::tensors(config);
  Dict src = make_dict(shapes, 0x3f80), dst = make_dict(shapes, 0);
  const std::vector<double> memcpy_t = memcpy_times(src, shapes, iters);
  const SyncTimes big = time_sync(store, "ws", src, dst, iters, !a.json);
  for (std::size_t t = 0; t < src.buffers.size(); ++t) {
    if (src.buffers[t] != dst.buffers[t]) {
      std::fprintf(stderr, "store_bench: get_state_dict_into returned different bytes\n");
      std::exit(1);
    }
  }
  // A second workload for the fit: 1,000 tensors of 4 KiB.
  qwen3::Tensors small_shapes;
  for (int i = 0; i < 1000; ++i) small_shapes.push_back({"t." + std::to_string(i), {2048}});
  Dict small_src = make_dict(small_shapes, 0x4000), small_dst = make_dict(small_shapes, 0);
  const auto fast_before = store.admin().fast_path_stats();
  const SyncTimes small = time_sync(store, "ws_small", small_src, small_dst, iters, !a.json);
  // Its floor: one copy in (the put) and one out (the get), each timed as a
  // memcpy of the 1,000 tensors in this run.
  const double small_memcpy = median(memcpy_times(small_src, small_shapes, std::max(iters, 5)));
  const double small_vs_floor = 2 * small_memcpy / (small.put + small.get);
  // How many of its reads went without a lease (docs/internals/data-path.md,
  // "Lease-free reads").
  const auto fast_after = store.admin().fast_path_stats();
  const auto lease_free = fast_after.lease_free_reads - fast_before.lease_free_reads;
  // And how many of them were direct: on the caller's thread, no actor.
  const auto direct = fast_after.direct_state_dicts - fast_before.direct_state_dicts;
  // And how many of its puts ran on the caller's thread, over the ring.
  const auto ring_puts = fast_after.state_dict_puts - fast_before.state_dict_puts;
  // The same 1,000 tensors through versions (publish, read the latest).
  const SyncTimes versioned =
      time_versioned_sync(store, "ws_versions", small_src, small_dst, iters);
  // A third for the simulator (benchmarks/sim/weightsync_sim.py), which
  // takes a state dict's cost per object from it: tensors of 4 MiB, each an
  // object of its own.
  const int medium_n = a.smoke ? 4 : 64;
  qwen3::Tensors medium_shapes;
  for (int i = 0; i < medium_n; ++i) medium_shapes.push_back({"m." + std::to_string(i), {2 << 20}});
  Dict medium_src = make_dict(medium_shapes, 0x4100), medium_dst = make_dict(medium_shapes, 0);
  const SyncTimes medium = time_sync(store, "ws_medium", medium_src, medium_dst, iters, !a.json);
  const std::uint64_t medium_bytes = medium_src.bytes;
  medium_src = Dict();
  medium_dst = Dict();
  // time = tensors * per_tensor + bytes / bandwidth, from the two workloads.
  const double n1 = static_cast<double>(shapes.size()), b1 = static_cast<double>(src.bytes);
  const double n2 = 1000.0, b2 = static_cast<double>(small_src.bytes);
  auto per_tensor_us = [&](double t1, double t2) {
    return std::max(0.0, (t1 * b2 - t2 * b1) / (n1 * b2 - n2 * b1)) * 1e6;
  };
  const double put_op = per_tensor_us(big.put, small.put),
               get_op = per_tensor_us(big.get, small.get);
  const double m = median(memcpy_t), gb = b1 / 1e9;
  const double sequential = big.put + big.get;
  // Streaming needs a reader in a third process, so a store it can reach.
  EndToEnd streamed, in_place;
  if (session.peer) {
    small_src = Dict();
    small_dst = Dict();
    dst = Dict();
    streamed = time_end_to_end(a, store, session.peer->store_port, src, shapes, iters, false);
    in_place = time_end_to_end(a, store, session.peer->store_port, src, shapes, iters, true);
  }
  const bool have_stream = streamed.seconds > 0;
  const double e2e = have_stream ? streamed.seconds : sequential;
  if (a.json) {
    std::printf(
        "{\"scenario\":\"weight-sync\",\"model\":\"%s\",\"transport\":\"%s\",\"processes\":%d,"
        "\"tensors\":%zu,\"bytes\":%llu,\"iters\":%d,\"memcpy_gbps\":%.3f,"
        "\"put_state_dict_gbps\":%.3f,\"get_state_dict_into_gbps\":%.3f,"
        "\"put_state_dict_vs_memcpy\":%.3f,\"get_state_dict_into_vs_memcpy\":%.3f,"
        "\"put_per_tensor_us\":%.2f,\"get_per_tensor_us\":%.2f,\"per_tensor_overhead_us\":%.2f,"
        "\"small_1000x4KiB_sync_ms\":%.3f,\"small_put_ms\":%.3f,\"small_get_ms\":%.3f,"
        "\"small_memcpy_ms\":%.3f,\"small_sync_vs_two_memcpy\":%.3f,"
        "\"small_lease_free_reads\":%llu,\"small_direct_reads\":%llu,\"small_ring_puts\":%llu,"
        "\"small_versioned_sync_ms\":%.3f,\"small_publish_ms\":%.3f,\"small_get_latest_ms\":%.3f,"
        "\"small_bytes\":%llu,\"medium_tensors\":%d,\"medium_bytes\":%llu,"
        "\"medium_put_ms\":%.3f,\"medium_get_ms\":%.3f,"
        "\"put_state_dict_s\":%.6f,\"get_state_dict_into_s\":%.6f,"
        "\"end_to_end_gbps\":%.3f,\"end_to_end_vs_memcpy\":%.3f,"
        "\"end_to_end_mode\":\"%s\",\"end_to_end_sequential_vs_memcpy\":%.3f,"
        "\"end_to_end_publish_vs_memcpy\":%.3f,\"end_to_end_in_place_vs_memcpy\":%.3f,"
        "\"in_place_commit_ms\":%.3f}\n",
        config.name.c_str(), a.transport.c_str(), a.processes, shapes.size(),
        static_cast<unsigned long long>(src.bytes), iters, gb / m, gb / big.put, gb / big.get,
        m / big.put, m / big.get, put_op, get_op, std::max(put_op, get_op),
        (small.put + small.get) * 1e3, small.put * 1e3, small.get * 1e3, small_memcpy * 1e3,
        small_vs_floor, static_cast<unsigned long long>(lease_free),
        static_cast<unsigned long long>(direct), static_cast<unsigned long long>(ring_puts),
        (versioned.put + versioned.get) * 1e3, versioned.put * 1e3, versioned.get * 1e3,
        static_cast<unsigned long long>(b2), medium_n,
        static_cast<unsigned long long>(medium_bytes), medium.put * 1e3, medium.get * 1e3, big.put,
        big.get, gb / e2e, m / e2e, have_stream ? "streamed to a reader process" : "sequential",
        m / sequential, have_stream ? m / streamed.put : 0.0,
        have_stream ? m / in_place.seconds : 0.0, in_place.put * 1e3);
    return;
  }
  std::printf(
      "scenario weight-sync: %s (%zu tensors, %.2f GB bf16), transport %s, %s, median of %d\n",
      config.name.c_str(), shapes.size(), gb, a.transport.c_str(),
      a.processes == 2 ? "client process -> store in a peer process" : "embedded store", iters);
  std::printf("  %-24s %10s %10s %10s\n", "operation", "seconds", "GB/s", "vs memcpy");
  std::printf("  %-24s %10.4f %10.2f %10.2f\n", "memcpy", m, gb / m, 1.0);
  std::printf("  %-24s %10.4f %10.2f %10.2f\n", "put_state_dict", big.put, gb / big.put,
              m / big.put);
  std::printf("  %-24s %10.4f %10.2f %10.2f\n", "get_state_dict_into", big.get, gb / big.get,
              m / big.get);
  std::printf("  %-24s %10.4f %10.2f %10.2f   (put, then get, one process)\n",
              "end to end, sequential", sequential, gb / sequential, m / sequential);
  if (have_stream) {
    std::printf("  %-24s %10.4f %10.2f %10.2f   (publish; a reader process streams it)\n",
                "end to end, streamed", streamed.seconds, gb / streamed.seconds,
                m / streamed.seconds);
    std::printf("  %-24s %10.4f %10.2f %10.2f   (written in place; commit %.2f ms, then read)\n",
                "end to end, in place", in_place.seconds, gb / in_place.seconds,
                m / in_place.seconds, in_place.put * 1e3);
  }
  std::printf(
      "  per-tensor overhead: put %.1f us, get %.1f us; 1,000 x 4 KiB put %.2f ms + get %.2f ms"
      " (%llu of its reads lease-free, %llu direct; %llu puts over the ring): %.2f x its floor of"
      " two memcpys of %.2f ms\n",
      put_op, get_op, small.put * 1e3, small.get * 1e3, static_cast<unsigned long long>(lease_free),
      static_cast<unsigned long long>(direct), static_cast<unsigned long long>(ring_puts),
      small_vs_floor, small_memcpy * 1e3);
  std::printf(
      "  the same through versions: publish_state_dict %.2f ms + get_latest_state_dict_into"
      " %.2f ms\n",
      versioned.put * 1e3, versioned.get * 1e3);
  std::printf("  %d x 4 MiB (one object each): put %.2f ms + get %.2f ms\n", medium_n,
              medium.put * 1e3, medium.get * 1e3);
}

}  // namespace meshstore::bench
