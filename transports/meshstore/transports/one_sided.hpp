#pragma once

// The one-sided protocol shared by cma (process_vm_readv/writev on one host)
// and rdma (READ/WRITE on registered memory across hosts): the volume
// describes each region it hands out (its address and, for rdma, the key of
// its registration; TransportServer::describe) in the RegionRef that
// travels in the control messages, and the client moves the bytes itself,
// with no code on the volume's side per byte. The volume keeps a region
// alive exactly as long as a client may touch it: staged until commit or
// release, leased until close_read (storage_volume.cpp), so a reader never
// reads memory that was freed or reused.
//
// This header holds the parts every one-sided transport shares: cutting a
// transfer into pieces, running batches of pieces on the copy engine's
// threads with one future for the whole transfer, and a registration cache
// keyed by buffer so the next version of a key, landing in the same pooled
// memory, reuses its registration.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "meshstore/future.hpp"
#include "meshstore/status.hpp"
#include "meshstore/transports/wire/region_ref.hpp"

namespace meshstore::transports::one_sided {

/// One piece of a transfer: `length` bytes between local memory and the
/// peer's memory at `remote` (its address space), under registration `key`.
struct Piece {
  std::byte* local = nullptr;
  std::uint64_t remote = 0;
  std::uint64_t key = 0;
  std::size_t length = 0;
};

/// How a one-sided transport's server describes a region (its entry in
/// RegionRef::described): the region's address in the volume's process and
/// the key of its registration (0 where none is needed, as for cma).
std::string describe(std::uint64_t address, std::uint64_t key);

/// Cuts [offset, offset + n) of the region `ref`, as `transport` described
/// it, into pieces of at most `chunk` bytes, paired with `local`.
/// Errc::out_of_range when the range leaves the region; Errc::not_found when
/// a non-empty range is asked of a region the volume never described for
/// `transport`; Errc::protocol_error for a malformed description. `what`
/// names the transfer in errors.
Result<std::vector<Piece>> plan(const wire::RegionRef& ref, std::string_view transport,
                                std::uint64_t offset, std::byte* local, std::size_t n,
                                std::size_t chunk, const char* what);

/// Moves a batch of pieces (one system call or one posted batch); returns
/// the first error.
using MoveBatch = std::function<Status(const Piece* pieces, std::size_t count)>;

/// Runs `pieces`: in batches of at most `batch` pieces, on the calling thread
/// when they total less than `inline_below` bytes, else spread over the copy
/// engine's threads. The future completes once every batch finished, with
/// the first error (batches after an error are skipped).
Future<void> run(std::vector<Piece> pieces, std::size_t batch, std::size_t inline_below,
                 MoveBatch move);

/// Registrations of memory for one-sided access, cached by buffer (start
/// address and length): registering the same buffer again returns the key
/// it got, so a key's next version in the same pooled memory costs nothing.
/// Registrations are released by forget() or when the cache goes.
/// Thread-safe.
class RegistrationCache {
 public:
  /// Registers [data, data + n) and answers its key (rdma: ibv_reg_mr's
  /// rkey with the handle kept by the caller's closure).
  using Register = std::function<Result<std::uint64_t>(std::byte* data, std::size_t n)>;
  /// Releases the registration with `key`.
  using Deregister = std::function<void(std::uint64_t key)>;

  RegistrationCache(Register reg, Deregister dereg);
  ~RegistrationCache();
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  /// The key of the registration of exactly [data, data + n), registering
  /// it the first time.
  Result<std::uint64_t> key_for(std::byte* data, std::size_t n);
  /// Releases the registration of the buffer starting at `data` (its
  /// memory is about to be freed); no-op when there is none.
  void forget(std::byte* data);
  /// Live registrations.
  std::size_t size() const;
  /// Registrations made (cache misses) since creation.
  std::uint64_t registrations() const;

 private:
  Register register_;
  Deregister deregister_;
  mutable std::mutex mu_;  // guards entries_, made_
  struct Entry {
    std::size_t length;
    std::uint64_t key;
  };
  std::map<std::byte*, Entry> entries_;
  std::uint64_t made_ = 0;
};

}  // namespace meshstore::transports::one_sided
