#pragma once

// POSIX shared-memory segments for the shm transport: named
// "meshstore.<pid>-<start>.<n>.<m>" (the owner's pid and start time, then a
// per-server and a per-segment number), so a segment left behind by a
// process that crashed can be told from a live one and removed.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meshstore/status.hpp"

namespace meshstore::transports::shm {

/// The header of each segment the shm server allocates for a region: the
/// region's bytes start kObjectHeaderBytes in (cache-line aligned), after a
/// magic number and the tag that names the object living there (0: none;
/// RegionMemory::object_tag). Clients check the tag around a read made
/// without a lease (docs/internals/data-path.md, "Lease-free reads").
struct ObjectHeader {
  std::uint64_t magic;
  std::atomic<std::uint64_t> object;
};
inline constexpr std::uint64_t kObjectHeaderMagic = 0x31474154534d4d53ULL;  // "SMMSTAG1"
inline constexpr std::size_t kObjectHeaderBytes = 64;
static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
              "object tags are shared between processes");
static_assert(sizeof(ObjectHeader) <= kObjectHeaderBytes);

/// The header of a slab: a segment the shm server carves into equal slots
/// for small regions (at most kMaxSlabRegionBytes), so that a volume of a
/// million small keys maps a few thousand segments, not a million (the
/// kernel allows 65,530 mappings per process by default), and a new key's
/// region costs no segment of its own. Slot i starts kSlabHeaderBytes + i *
/// slot_bytes in, with an ObjectHeader; the region's bytes follow it.
struct SlabHeader {
  std::uint64_t magic;
  std::uint64_t slot_bytes;
};
inline constexpr std::uint64_t kSlabMagic = 0x31424c53534d4d53ULL;  // "SMMSSLB1"
inline constexpr std::size_t kSlabHeaderBytes = 64;
inline constexpr std::size_t kMaxSlabRegionBytes = std::size_t{64} << 10;
static_assert(sizeof(SlabHeader) <= kSlabHeaderBytes);

/// Where the ObjectHeader of a region placed at `offset` in a segment of
/// `size` bytes lies, by the segment's first bytes `head` (at least
/// kSlabHeaderBytes of them): the segment's start for a segment of one
/// region, a slot's start in a slab. -1 when no region of `nbytes` can lie
/// there (the place does not fit the segment's layout: a forged or stale
/// place is refused, never followed).
std::int64_t object_header_at(const std::byte* head, std::size_t size, std::uint64_t offset,
                              std::uint64_t nbytes);

/// The name prefix every meshstore segment starts with (in /dev/shm).
inline constexpr const char* kSegmentPrefix = "meshstore.";

/// "meshstore.<pid>-<start time>." for this process: the per-process part of
/// every segment name it creates (a child after fork() gets its own).
std::string process_prefix();

/// Field `field` (numbered from 1, as proc(5) numbers them; 3 or more: the
/// state, 22 the start time) of /proc/<pid>/stat, "" when the process or
/// the field cannot be read.
std::string proc_stat_field(long pid, int field);

/// A mapped segment. Creating it allocates and prefaults every page (first
/// touch costs 1-2 GB/s on the reference VM); destroying it unmaps it and,
/// for the creator, unlinks the name. Not copyable; thread-safe to read and
/// write disjoint ranges.
class Segment {
 public:
  /// Creates segment `name` (without the leading '/') of `nbytes` (at
  /// least one page is used for 0), mapped read-write and prefaulted.
  /// Errc::out_of_capacity when /dev/shm is full, Errc::io_error otherwise.
  static Result<std::unique_ptr<Segment>> create(const std::string& name, std::size_t nbytes);
  /// Maps an existing segment read-write (or read-only). Errc::not_found
  /// when it is gone, Errc::unavailable when permission is denied (another
  /// user's segment).
  static Result<std::unique_ptr<Segment>> open(const std::string& name, bool read_only = false);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  const std::string& name() const noexcept { return name_; }
  /// Removes the name from /dev/shm now: the memory stays mapped here and
  /// in every process that mapped it, and goes with the last mapping, so
  /// no process's death can leave it behind. Nothing opens it by name
  /// afterwards; the creator's destructor then leaves the name alone.
  void unlink() noexcept;

 private:
  Segment(std::string name, std::byte* data, std::size_t size, bool owner) noexcept
      : name_(std::move(name)), data_(data), size_(size), owner_(owner) {}
  std::string name_;
  std::byte* data_;
  std::size_t size_;
  bool owner_;
};

/// A process of this host, watched for its exit through a pidfd: alive()
/// until it exits (a zombie not yet reaped counts as exited). Lease-free
/// reads (docs/internals/data-path.md, "Lease-free reads") ask it first, so a
/// volume killed with its segments still mapped is never read from: a
/// tag its process can no longer clear proves nothing.
class ProcessWatch {
 public:
  /// Watches `pid`; when `start_time` (field 22 of /proc/PID/stat) is not
  /// empty it must match, else the pid was reused and the process is gone.
  explicit ProcessWatch(long pid, const std::string& start_time = "");
  /// The process that creates segments named `prefix`
  /// ("meshstore.<pid>-<start>."); null when `prefix` names none.
  static std::unique_ptr<ProcessWatch> of_segment_prefix(const std::string& prefix);
  ~ProcessWatch();
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;
  /// Watched, and not exited (one poll(2), no waiting). False once it has
  /// exited, and always where it cannot be watched (no pidfd).
  bool alive() const;

 private:
  int fd_ = -1;
};

/// Whether the segment `name` still exists (is linked) in /dev/shm.
bool segment_exists(const std::string& name);

/// Removes segment `name`'s name from /dev/shm, if it has one (mappings
/// stay until unmapped).
void remove_segment(const std::string& name) noexcept;

/// What garbage_collect() found.
struct GcReport {
  /// Segments removed: their owner is dead.
  std::vector<std::string> removed;
  /// meshstore segments left alone: their owner is alive.
  std::size_t live = 0;
  /// Bytes freed.
  std::uint64_t bytes_freed = 0;
};

/// Removes every meshstore segment in /dev/shm whose creating process is no
/// longer alive (a crash, kill -9). Segments of live processes are kept.
/// Called when an shm server starts and by `meshstore gc`. With `dry_run`
/// nothing is removed: `removed` lists what would be. With `only_pid`, only
/// segments created by that (dead) process are considered.
GcReport garbage_collect(bool dry_run = false, long only_pid = 0);

/// The meshstore segments this process created and still holds: names.
std::vector<std::string> own_segments();

}  // namespace meshstore::transports::shm
