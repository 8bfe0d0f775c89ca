// store_bench --scenario single: put / get_into / get of one tensor, warm
// (the same key reused) and cold (first put), against memcpy of the same
// bytes (on one core, and split over every core: the host's copy limit), a
// raw TCP stream between the same two processes and, with
// --transport cma, bare process_vm_writev / readv of the peer's memory.
#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../bench_util.hpp"
#include "peer.hpp"
#include "raw_tcp.hpp"
#include "scenarios.hpp"

using namespace std::chrono_literals;

namespace meshstore::bench {

void run_single(const Args& a) {
  const std::size_t n = a.smoke ? (std::size_t{4} << 20) : a.bytes;
  const int iters = a.iters ? a.iters : (a.smoke ? 2 : 5);
  auto session = open_session(a);
  auto& store = session.store;
  std::vector<std::uint8_t> src(n), dst(n), scratch(n);
  for (std::size_t i = 0; i < n; i += 4096) src[i] = static_cast<std::uint8_t>(i >> 12);
  std::memset(dst.data(), 0, n);
  std::memset(scratch.data(), 0, n);
  const auto len = static_cast<std::int64_t>(n);
  const meshstore::TensorView in(src.data(), meshstore::DType::uint8, {len});
  const meshstore::TensorView out(dst.data(), meshstore::DType::uint8, {len});

  std::vector<double> memcpy_t, memcpy_all_t, put_t, get_into_t, get_t, tcp_send_t, tcp_recv_t;
  for (int i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    std::memcpy(scratch.data(), src.data(), n);
    memcpy_t.push_back(secs(t0));
    memcpy_all_t.push_back(memcpy_all_cores({{scratch.data(), src.data(), n}}));
  }
  if (session.peer) {
    RawTcp raw(session.peer->raw_port);
    raw.send(src.data(), n);  // warms the peer's buffer
    for (int i = 0; i < iters; ++i) {
      tcp_send_t.push_back(raw.send(src.data(), n));
      tcp_recv_t.push_back(raw.recv(scratch.data(), n));
    }
  }
  // cma: bare process_vm_writev / readv of the same bytes to and from the
  // peer's buffer, one call each, as a program without a store would.
  std::vector<double> cma_write_t, cma_read_t;
  if (session.peer && session.peer->cma_address != 0) {
    auto bare = [&](bool write) {
      iovec local{write ? static_cast<void*>(src.data()) : static_cast<void*>(scratch.data()), n};
      iovec remote{reinterpret_cast<void*>(session.peer->cma_address), n};
      const auto t0 = Clock::now();
      std::size_t done = 0;
      while (done < n) {
        iovec l{static_cast<char*>(local.iov_base) + done, n - done};
        iovec r{static_cast<char*>(remote.iov_base) + done, n - done};
        const ssize_t got = write ? process_vm_writev(session.peer->cma_pid, &l, 1, &r, 1, 0)
                                  : process_vm_readv(session.peer->cma_pid, &l, 1, &r, 1, 0);
        if (got <= 0) {
          std::perror("store_bench: bare process_vm_readv/writev");
          std::exit(1);
        }
        done += static_cast<std::size_t>(got);
      }
      return secs(t0);
    };
    bare(true);  // the peer's buffer is touched already; this warms ours
    for (int i = 0; i < iters; ++i) {
      cma_write_t.push_back(bare(true));
      cma_read_t.push_back(bare(false));
    }
  }
  auto t0 = Clock::now();
  must(store.put("bench", in).get(600s), "cold put");
  const double cold = secs(t0);
  must(store.put("bench", in).get(600s), "warm-up put");  // the next version needs new memory once
  for (int i = 0; i < iters; ++i) {
    if (!a.json) std::fprintf(stderr, "\rstore_bench single: round %d/%d", i + 1, iters);
    t0 = Clock::now();
    must(store.put("bench", in).get(600s), "put");
    put_t.push_back(secs(t0));
    t0 = Clock::now();
    must(store.get_into("bench", out).get(600s), "get_into");
    get_into_t.push_back(secs(t0));
    t0 = Clock::now();
    auto t = must(store.get("bench").get(600s), "get");
    get_t.push_back(secs(t0));
  }
  if (!a.json) std::fprintf(stderr, "\n");
  if (std::memcmp(src.data(), dst.data(), n) != 0) {
    std::fprintf(stderr, "store_bench: get_into returned different bytes\n");
    std::exit(1);
  }
  const double gb = static_cast<double>(n) / 1e9;
  const double m = median(memcpy_t), p = median(put_t), gi = median(get_into_t), g = median(get_t);
  const double ma = median(memcpy_all_t);
  const bool two = session.peer != nullptr;
  const double ts = two ? median(tcp_send_t) : 0, tr = two ? median(tcp_recv_t) : 0;
  if (a.json) {
    std::printf(
        "{\"scenario\":\"single\",\"transport\":\"%s\",\"encrypt_tcp\":%s,\"tcp_streams\":%d,"
        "\"bytes\":%zu,\"iters\":%"
        "d,"
        "\"processes\":%d,"
        "\"memcpy_gbps\":%.3f,\"put_gbps\":%.3f,\"put_cold_gbps\":%.3f,\"get_into_gbps\":%.3f,"
        "\"get_gbps\":%.3f,"
        "\"put_vs_memcpy\":%.3f,\"get_into_vs_memcpy\":%.3f,\"get_vs_memcpy\":%.3f,\"put_cold_vs_"
        "memcpy\":%.3f,\"memcpy_all_cores_gbps\":%.3f,\"put_vs_memcpy_all_cores\":%.3f,"
        "\"get_into_vs_memcpy_all_cores\":%.3f",
        a.transport.c_str(), a.encrypt_tcp ? "true" : "false", a.tcp_streams, n, iters, a.processes,
        gb / m, gb / p, gb / cold, gb / gi, gb / g, m / p, m / gi, m / g, m / cold, gb / ma, ma / p,
        ma / gi);
    if (two) {
      std::printf(
          ",\"raw_tcp_send_gbps\":%.3f,\"raw_tcp_recv_gbps\":%.3f,\"put_vs_raw_tcp\":%.3f,"
          "\"get_into_vs_raw_tcp\":%.3f",
          gb / ts, gb / tr, ts / p, tr / gi);
    }
    if (!cma_read_t.empty()) {
      const double cw = median(cma_write_t), cr = median(cma_read_t);
      std::printf(
          ",\"process_vm_writev_gbps\":%.3f,\"process_vm_readv_gbps\":%.3f,"
          "\"put_vs_process_vm_writev\":%.3f,\"get_into_vs_process_vm_readv\":%.3f",
          gb / cw, gb / cr, cw / p, cr / gi);
    }
    std::printf("}\n");
    return;
  }
  std::printf("scenario single: %zu bytes, transport %s%s, %s, median of %d\n", n,
              a.transport.c_str(), a.encrypt_tcp ? " (volumes encrypt tcp)" : "",
              two ? "client process -> store in a peer process" : "embedded store (1 process)",
              iters);
  std::printf("  %-18s %10s %10s %10s %14s %12s\n", "operation", "seconds", "GB/s", "vs memcpy",
              "vs all cores", two ? "vs raw tcp" : "");
  auto row = [&](const char* name, double t, double tcp) {
    std::printf("  %-18s %10.4f %10.2f %10.2f %14.2f", name, t, gb / t, m / t, ma / t);
    if (tcp > 0) std::printf(" %12.2f", tcp / t);
    std::printf("\n");
  };
  row("memcpy", m, 0);
  row("memcpy, all cores", ma, 0);
  if (two) {
    row("raw tcp send", ts, ts);
    row("raw tcp recv", tr, tr);
  }
  row("put (cold)", cold, ts);
  row("put (warm)", p, ts);
  row("get_into", gi, tr);
  row("get (allocates)", g, tr);
  if (!cma_read_t.empty()) {
    const double cw = median(cma_write_t), cr = median(cma_read_t);
    std::printf("  bare process_vm_writev %.4f s (%.2f GB/s): put (warm) %.2f x of it\n", cw,
                gb / cw, cw / p);
    std::printf("  bare process_vm_readv  %.4f s (%.2f GB/s): get_into %.2f x of it\n", cr, gb / cr,
                cr / gi);
  }
}

}  // namespace meshstore::bench
