// Objects assembled from pieces as they are written (Gather) and taken
// apart as they are read (Scatter): a state dict's packed buckets move with
// one copy each way where the transport maps the volume's memory.

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/client/client.hpp"
#include "meshstore/client/client_state.hpp"
#include "meshstore/protocol/limits.hpp"
#include "meshstore/transports/copy_engine.hpp"

namespace meshstore::client {

namespace {

// Cuts pieces [0, count) into at most `groups` runs of about equal bytes:
// the first piece of each run, then `count`.
template <class Pieces>
std::vector<std::size_t> runs_of(const Pieces& pieces, std::uint64_t total, std::size_t groups) {
  std::vector<std::size_t> starts{0};
  const std::uint64_t share = total / groups + 1;
  std::uint64_t in_run = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (in_run >= share && starts.size() < groups) {
      starts.push_back(i);
      in_run = 0;
    }
    in_run += pieces[i].nbytes;
  }
  starts.push_back(pieces.size());
  return starts;
}

// The runs of `pieces` (runs_of) a copy of the `n`-byte object is split
// into: one per MiB of it, up to one per copy engine thread.
template <class Pieces>
std::vector<std::size_t> split_runs(const Pieces& pieces, std::uint64_t n) {
  const auto threads = static_cast<std::uint64_t>(transports::CopyEngine::instance().threads());
  const auto groups = static_cast<std::size_t>(std::max<std::uint64_t>(
      1, std::min<std::uint64_t>(threads, n / protocol::limits::kSplitBytesPerThread)));
  return runs_of(pieces, n, groups);
}

// Runs `job(lo, hi)` on the copy engine's threads for the runs of
// split_runs; completes once every run has.
template <class Pieces, class Job>
Future<void> in_runs(const Pieces& pieces, std::uint64_t n, Job job) {
  const auto starts = split_runs(pieces, n);
  std::vector<Future<void>> parts;
  for (std::size_t r = 0; r + 1 < starts.size(); ++r) {
    parts.push_back(transports::CopyEngine::instance().run(
        [job, lo = starts[r], hi = starts[r + 1]] { job(lo, hi); }));
  }
  return client::settle_all(std::move(parts));
}

// in_runs with this thread running the first run and waiting for the
// others: returns once every run has (so `job` may capture by reference).
template <class Pieces, class Job>
void in_runs_here(const Pieces& pieces, std::uint64_t n, Job job) {
  const auto starts = split_runs(pieces, n);
  std::vector<Future<void>> others;
  for (std::size_t r = 1; r + 1 < starts.size(); ++r) {
    others.push_back(transports::CopyEngine::instance().run(
        [&job, lo = starts[r], hi = starts[r + 1]] { job(lo, hi); }));
  }
  job(starts[0], starts[1]);
  for (const auto& f : others) f.wait();
}

Status check_gather(const Gather& g, std::uint64_t n) {
  std::uint64_t end = 0;
  for (const auto& p : g.pieces) {
    if (p.offset < end || p.nbytes > n || p.offset > n - p.nbytes) {
      return Status(Errc::invalid_argument, "a gathered piece of " + std::to_string(p.nbytes) +
                                                " bytes at " + std::to_string(p.offset) +
                                                " overlaps the one before it or leaves the " +
                                                std::to_string(n) + "-byte object");
    }
    end = p.offset + p.nbytes;
  }
  return Status();
}

// Pieces [lo, hi) of `g` into `dst`, with the gap before each; the run
// that ends the pieces also zeroes the tail up to `n`.
void fill_run(const Gather& g, std::byte* dst, std::uint64_t n, std::size_t lo, std::size_t hi) {
  std::uint64_t at = lo == 0 ? 0 : g.pieces[lo - 1].offset + g.pieces[lo - 1].nbytes;
  for (std::size_t i = lo; i < hi; ++i) {
    const auto& p = g.pieces[i];
    if (p.offset > at) std::memset(dst + at, 0, p.offset - at);
    if (p.nbytes > 0) std::memcpy(dst + p.offset, p.src, p.nbytes);
    at = p.offset + p.nbytes;
  }
  if (hi == g.pieces.size() && n > at) std::memset(dst + at, 0, n - at);
}

Status check_scatter(const Scatter& s, std::uint64_t n) {
  for (const auto& p : s.pieces) {
    if (p.nbytes > n || p.offset > n - p.nbytes) {
      return Status(Errc::out_of_range, "a piece of " + std::to_string(p.nbytes) + " bytes at " +
                                            std::to_string(p.offset) + " leaves the " +
                                            std::to_string(n) + "-byte object");
    }
  }
  return Status();
}

void scatter_run(const Scatter& s, const std::byte* src, std::size_t lo, std::size_t hi) {
  for (std::size_t i = lo; i < hi; ++i) {
    const auto& p = s.pieces[i];
    if (p.nbytes > 0) std::memcpy(p.dst, src + p.offset, p.nbytes);
  }
}

}  // namespace

Status fill_gathered_now(const Gather& g, std::byte* dst, std::uint64_t n) {
  MESHSTORE_RETURN_IF_ERROR(check_gather(g, n));
  fill_run(g, dst, n, 0, g.pieces.size());
  return Status();
}

Status scatter_now(const Scatter& s, const std::byte* src, std::uint64_t n) {
  MESHSTORE_RETURN_IF_ERROR(check_scatter(s, n));
  scatter_run(s, src, 0, s.pieces.size());
  return Status();
}

Future<void> scatter_from(std::shared_ptr<const Scatter> s, std::shared_ptr<const std::byte> src,
                          std::uint64_t n) {
  if (auto st = check_scatter(*s, n); !st.ok()) return make_error_future<void>(st);
  return in_runs(s->pieces, n,
                 [s, src](std::size_t lo, std::size_t hi) { scatter_run(*s, src.get(), lo, hi); });
}

Status scatter_copies(const Scatter& s, const std::byte* src, std::uint64_t n,
                      std::vector<transports::CopyEngine::Copy>* copies) {
  MESHSTORE_RETURN_IF_ERROR(check_scatter(s, n));
  for (const auto& p : s.pieces) {
    if (p.nbytes > 0)
      copies->push_back({p.dst, src + p.offset, static_cast<std::size_t>(p.nbytes)});
  }
  return Status();
}

Status fill_gathered_here(const Gather& g, std::byte* dst, std::uint64_t n) {
  MESHSTORE_RETURN_IF_ERROR(check_gather(g, n));
  in_runs_here(g.pieces, n, [&](std::size_t lo, std::size_t hi) { fill_run(g, dst, n, lo, hi); });
  return Status();
}

}  // namespace meshstore::client
