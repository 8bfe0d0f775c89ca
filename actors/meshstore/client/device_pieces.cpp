// GPU memory moved through page-locked host memory in pipelined pieces.

#include "meshstore/client/device_pieces.hpp"

#include <algorithm>
#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/internal/byte_budget.hpp"
#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/transports/copy_engine.hpp"

namespace meshstore::client {

namespace {

constexpr std::size_t kDevicePiece = std::size_t{64} << 20;

// Page-locked staging memory in flight, process-wide: a state dict of
// 100 GB put over tcp holds at most this much at once; pieces beyond it wait
// their turn (without blocking a thread).
constexpr std::size_t kStagingInFlight = std::size_t{1} << 30;

internal::ByteBudget& staging_budget() {
  static auto* budget = new internal::ByteBudget(kStagingInFlight);  // outlives late completions
  return *budget;
}

Status no_pinned_memory(std::size_t n) {
  return Status(Errc::out_of_capacity,
                "no host memory for " + std::to_string(n) + " bytes to stage a GPU tensor through");
}

// Runs `move(offset, length, buffer)` for each piece of `n` bytes, each with
// its own page-locked buffer, as the staging budget admits them; completes
// once every piece has settled. After a piece fails, pieces not started yet
// are skipped.
template <class F>
Future<void> by_pieces(std::size_t n, F move) {
  std::vector<Future<void>> parts;
  auto failed = std::make_shared<std::atomic<bool>>(false);
  for (std::size_t off = 0; off < n; off += kDevicePiece) {
    const std::size_t len = std::min(kDevicePiece, n - off);
    auto promise =
        std::make_shared<Promise<void>>(Status(Errc::internal, "a GPU staging piece was dropped"));
    parts.push_back(promise->future());
    staging_budget().admit(len, [move, off, len, promise, failed] {
      auto done = [len, promise, failed](const Result<void>& r) {
        if (!r.ok()) failed->store(true);
        staging_budget().release(len);
        promise->set(r);
      };
      if (failed->load()) {
        return done(Status(Errc::transport_error, "skipped after another piece failed"));
      }
      auto buf = internal::cuda::pinned(len);
      if (!buf) return done(no_pinned_memory(len));
      move(off, len, std::move(buf)).on_complete(done);
    });
  }
  return settle_all(std::move(parts));
}

// Copies `n` bytes between GPU and host memory on a copy engine thread.
Future<void> device_copy(void* dst, const void* src, std::size_t n, const char* what) {
  return transports::CopyEngine::instance().run_checked(
      [dst, src, n, what] { return internal::cuda::copy_bytes(dst, src, n).with_context(what); });
}

}  // namespace

Future<void> write_from_device(const std::shared_ptr<transports::Transport>& transport,
                               const wire::RegionRef& region, const std::byte* src, std::size_t n) {
  return by_pieces(n, [transport, region, src](std::size_t off, std::size_t len,
                                               std::shared_ptr<std::byte> buf) {
    return device_copy(buf.get(), src + off, len, "GPU to host")
        .then([transport, region, off, buf, len]() {
          return transport->write(region, off, buf.get(), len).then([buf] {});
        });
  });
}

Future<void> read_into_device(const std::shared_ptr<VolumeConn>& c, const wire::RegionRef& region,
                              std::byte* dst, std::size_t n) {
  return by_pieces(
      n, [c, region, dst](std::size_t off, std::size_t len, std::shared_ptr<std::byte> buf) {
        std::byte* to = dst + off;
        return c->transport->read(region, off, buf.get(), len).then([buf, to, len]() {
          return device_copy(to, buf.get(), len, "host to GPU").then([buf] {});
        });
      });
}

}  // namespace meshstore::client
