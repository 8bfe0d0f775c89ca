// peer_bench's Open MPI contender (built when CMake finds MPI).
//
//   mpirun -np 2 [settings in peer_bench.cpp] build/bin/peer_mpi --spec FILE --rounds N
//
// FILE lists a workload's tensors, one "NAME NUMEL" line each (bf16: 2 bytes
// an element). Rank 0 (process A) sends every tensor to rank 1 (process B):
// one MPI_Isend each, then MPI_Waitall; B posts one MPI_Irecv per tensor
// into its own buffers, waits for all, and checks them. Rank 0 prints per
// round "round R SECONDS OK": from A's first send to B's last byte (both
// read CLOCK_MONOTONIC on one host).
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "peer_mpi: %s\n", why.c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

// Round r's elements of tensor t: element i holds (i * 7 + t + r) mod 2^16,
// as in peer_bench.
void fill(std::vector<std::uint16_t>& b, std::size_t t, int r) {
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint16_t>(i * 7 + t + r);
}

bool holds(const std::vector<std::vector<std::uint16_t>>& buffers, int r) {
  for (std::size_t t = 0; t < buffers.size(); ++t) {
    const auto& b = buffers[t];
    for (std::size_t i = 0; i < b.size(); i += 1 + b.size() / 64) {
      if (b[i] != static_cast<std::uint16_t>(i * 7 + t + r)) return false;
    }
    if (b.back() != static_cast<std::uint16_t>((b.size() - 1) * 7 + t + r)) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  std::string spec;
  int rounds = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg == "--spec") {
      spec = argv[i + 1];
    } else if (arg == "--rounds") {
      rounds = std::atoi(argv[i + 1]);
    } else {
      fail("unknown argument '" + arg + "'");
    }
  }
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) fail("run with exactly 2 ranks (mpirun -np 2)");
  if (spec.empty() || rounds < 1) fail("usage: peer_mpi --spec FILE --rounds N");
  std::vector<std::vector<std::uint16_t>> buffers;
  std::ifstream in(spec);
  std::string name;
  std::uint64_t numel = 0;
  while (in >> name >> numel) {
    // One message per tensor: MPI counts in int, so a tensor must stay under
    // 2 GiB (every workload's tensors do).
    if (numel * 2 > static_cast<std::uint64_t>(INT_MAX)) fail("tensor '" + name + "' too large");
    buffers.emplace_back(numel, 0);
  }
  if (buffers.empty()) fail("no tensors in '" + spec + "'");
  std::vector<MPI_Request> reqs(buffers.size());
  for (int r = 0; r < rounds; ++r) {
    if (rank == 0) {
      for (std::size_t t = 0; t < buffers.size(); ++t) fill(buffers[t], t, r);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      const std::int64_t t0 = now_ns();
      for (std::size_t t = 0; t < buffers.size(); ++t) {
        MPI_Isend(buffers[t].data(), static_cast<int>(buffers[t].size() * 2), MPI_BYTE, 1,
                  static_cast<int>(t % 32767), MPI_COMM_WORLD, &reqs[t]);
      }
      MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
      std::int64_t end[2] = {0, 0};
      MPI_Recv(end, 2, MPI_INT64_T, 1, 32767, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      std::printf("round %d %.9f %d\n", r, static_cast<double>(end[0] - t0) / 1e9,
                  static_cast<int>(end[1]));
      std::fflush(stdout);
    } else {
      for (std::size_t t = 0; t < buffers.size(); ++t) {
        MPI_Irecv(buffers[t].data(), static_cast<int>(buffers[t].size() * 2), MPI_BYTE, 0,
                  static_cast<int>(t % 32767), MPI_COMM_WORLD, &reqs[t]);
      }
      MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
      std::int64_t end[2] = {now_ns(), holds(buffers, r) ? 1 : 0};
      MPI_Send(end, 2, MPI_INT64_T, 0, 32767, MPI_COMM_WORLD);
    }
  }
  MPI_Finalize();
  return 0;
}
