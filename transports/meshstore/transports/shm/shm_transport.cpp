#include "meshstore/transports/shm/shm_transport.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/tensor.hpp"
#include "meshstore/transports/copy_engine.hpp"
#include "meshstore/transports/host_identity.hpp"
#include "meshstore/transports/region_description.hpp"
#include "meshstore/transports/shm/shm_segment.hpp"

namespace meshstore::transports::shm {
namespace {

std::string uid_tag() { return "uid=" + std::to_string(geteuid()); }

// An shm endpoint's address, "PREFIX;UID": the volume's segment name prefix
// and the user it runs as (uid_tag). An address without a ';' names no user.
struct ShmAddress {
  std::string prefix;
  std::string uid;
};
ShmAddress parse_address(const std::string& address) {
  const auto semi = address.find(';');
  if (semi == std::string::npos) return {address, ""};
  return {address.substr(0, semi), address.substr(semi + 1)};
}

// The slot size a region of `nbytes` takes in a slab: its ObjectHeader and
// bytes, rounded up to the next of four sizes per doubling (at most a
// fifth wasted), so a volume holds few slab sizes whatever its objects'.
std::size_t slot_bytes_for(std::size_t nbytes) {
  const std::size_t need = kObjectHeaderBytes + nbytes;
  if (need <= 256) return (need + 63) / 64 * 64;
  std::size_t power = 256;
  while (power * 2 < need) power *= 2;
  const std::size_t step = power / 4;
  return (need + step - 1) / step * step;
}

// Slabs (SlabHeader): the segments small regions are carved from, by slot
// size. A slab is made when no slab of its size has a free slot, sized for
// 64 slots (64 KiB to 4 MiB); a freed slot goes back to its slab, and a
// slab that is wholly free is unlinked unless it is the only free one of
// its size. Thread-safe: slots are freed on any thread.
class Slabs : public std::enable_shared_from_this<Slabs> {
 public:
  using Name = std::function<std::string()>;
  Result<RegionMemory> take(std::size_t nbytes, const Name& name) {
    const std::size_t slot = slot_bytes_for(nbytes);
    std::lock_guard<std::mutex> lock(mu_);
    auto& size = sizes_[slot];
    if (size.open.empty()) {
      const std::size_t bytes =
          std::clamp<std::size_t>(64 * slot, std::size_t{64} << 10, std::size_t{4} << 20);
      const std::string segment_name = name();
      auto seg = Segment::create(segment_name, bytes);
      if (!seg.ok()) return seg.status();
      auto slab = std::make_shared<Slab>();
      slab->segment = std::shared_ptr<Segment>(std::move(seg).value());
      slab->name = segment_name;
      slab->slot_bytes = slot;
      slab->slots = static_cast<std::uint32_t>((bytes - kSlabHeaderBytes) / slot);
      for (std::uint32_t k = slab->slots; k > 0; --k) slab->free.push_back(k - 1);
      new (slab->segment->data()) SlabHeader{kSlabMagic, slot};
      size.open.push_back(std::move(slab));
      ++size.empty;
    }
    std::shared_ptr<Slab> slab = size.open.back();
    if (slab->free.size() == slab->slots) --size.empty;
    const std::uint32_t index = slab->free.back();
    slab->free.pop_back();
    if (slab->free.empty()) size.open.pop_back();
    const std::size_t at = kSlabHeaderBytes + std::size_t{index} * slot;
    auto* header = new (slab->segment->data() + at) ObjectHeader{kObjectHeaderMagic, {0}};
    std::byte* data = slab->segment->data() + at + kObjectHeaderBytes;
    std::weak_ptr<Slabs> self = shared_from_this();
    RegionMemory m{std::shared_ptr<std::byte>(data,
                                              [self, slab, index](std::byte*) {
                                                if (auto s = self.lock()) s->give(slab, index);
                                              }),
                   slab->name, at + kObjectHeaderBytes};
    m.object_tag = &header->object;
    return m;
  }

 private:
  struct Slab {
    std::shared_ptr<Segment> segment;
    std::string name;
    std::size_t slot_bytes = 0;
    std::uint32_t slots = 0;
    std::vector<std::uint32_t> free;  // slot indices; none: not in its size's `open`
  };
  struct Size {
    std::vector<std::shared_ptr<Slab>> open;  // slabs with a free slot
    std::size_t empty = 0;                    // of them wholly free
  };

  void give(const std::shared_ptr<Slab>& slab, std::uint32_t index) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& size = sizes_[slab->slot_bytes];
    slab->free.push_back(index);
    if (slab->free.size() == 1) size.open.push_back(slab);  // it was full
    if (slab->free.size() != slab->slots) return;
    if (size.empty == 0) {
      ++size.empty;  // kept for the next region of its size
      return;
    }
    // Another is free already: this one goes (unlinked once unmapped).
    size.open.erase(std::find(size.open.begin(), size.open.end(), slab));
  }

  std::mutex mu_;  // guards sizes_ and every Slab's free list
  std::unordered_map<std::size_t, Size> sizes_;
};

// Hands out segments named "<process prefix><server number>.<n>": for a
// region of at most kMaxSlabRegionBytes a slot of a slab (Slabs), else a
// segment of its own, starting with its ObjectHeader. The volume's
// RegionPool reuses a released region for the next of the same size, so a
// key's next version lands in memory that is already faulted in and
// already mapped by its clients. The header's tag names the object there.
class ShmAllocator final : public RegionAllocator {
 public:
  explicit ShmAllocator(std::string prefix) : prefix_(std::move(prefix)) {}
  Result<RegionMemory> allocate(std::size_t nbytes) override {
    if (nbytes <= kMaxSlabRegionBytes) return slabs_->take(nbytes, [this] { return next_name(); });
    const std::string name = next_name();
    if (nbytes > SIZE_MAX - kObjectHeaderBytes) {
      return Status(Errc::out_of_capacity, "a region of " + std::to_string(nbytes) + " bytes");
    }
    auto seg = Segment::create(name, kObjectHeaderBytes + nbytes);
    if (!seg.ok()) return seg.status();
    std::shared_ptr<Segment> owned(std::move(seg).value());
    auto* header = new (owned->data()) ObjectHeader{kObjectHeaderMagic, {0}};
    std::byte* data = owned->data() + kObjectHeaderBytes;
    // The segment is unmapped and unlinked when the last owner lets go.
    RegionMemory m{std::shared_ptr<std::byte>(data, [owned](std::byte*) mutable { owned.reset(); }),
                   name, kObjectHeaderBytes};
    m.object_tag = &header->object;
    return m;
  }
  const std::string& prefix() const noexcept { return prefix_; }

 private:
  std::string next_name() { return prefix_ + std::to_string(next_.fetch_add(1)); }
  const std::string prefix_;
  std::atomic<std::uint64_t> next_{1};
  std::shared_ptr<Slabs> slabs_ = std::make_shared<Slabs>();
};

class ShmServer final : public TransportServer {
 public:
  explicit ShmServer(std::string prefix)
      : allocator_(std::make_shared<ShmAllocator>(std::move(prefix))) {}
  std::string_view name() const noexcept override { return "shm"; }
  EndpointInfo endpoint() const override {
    EndpointInfo e;
    e.transport = "shm";
    e.address = allocator_->prefix() + ";" + uid_tag();
    e.host_id = host_identity();
    return e;
  }
  std::shared_ptr<RegionAllocator> allocator() const override { return allocator_; }
  Status describe(const Region& region, wire::RegionRef& ref) override {
    if (region.device() >= 0 || region.segment().empty()) return Status();
    ref.described["shm"] = shm::describe(region.segment(), region.segment_offset());
    return Status();
  }
  void shutdown() override {}

 private:
  std::shared_ptr<ShmAllocator> allocator_;
};

// Where a region lives, as the shm server described it.
struct Placement {
  std::string segment;
  std::uint64_t offset = 0;
};

Result<Placement> placement(const wire::RegionRef& ref, const std::string& where) {
  DescriptionReader d(ref, "shm", where);
  if (!d.present()) {
    return Status(Errc::protocol_error, where + ": the volume did not place it in shared memory");
  }
  Placement p;
  auto segment = d.bytes();
  if (!segment.ok()) return segment.status();
  auto offset = d.u64();
  if (!offset.ok()) return offset.status();
  MESHSTORE_RETURN_IF_ERROR(d.finish());
  if (segment->empty()) return d.malformed("names no segment");
  p.segment = std::move(segment).value();
  p.offset = *offset;
  return p;
}

// One segment as a client maps it. GPU copies to and from it (the caller's
// tensor in device memory) go through the mapping in one copy; from the
// second such copy on, the mapping is page-locked for CUDA, so they run at
// the DMA engines' speed. Not the first: page-locking costs about as much
// as a copy, and a segment that serves one device copy may never serve
// another, while one the volume reuses for a key's next version (its pool
// keeps segments by size) serves every step's.
class Mapping {
 public:
  explicit Mapping(std::shared_ptr<Segment> segment) : segment_(std::move(segment)) {}
  ~Mapping() { pin_.reset(); }  // unregistered before the segment unmaps
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  Segment& segment() const noexcept { return *segment_; }

  // Called before each device copy through this mapping.
  void before_device_copy() {
    std::lock_guard<std::mutex> lock(mu_);
    if (pin_ || pin_failed_ || ++device_copies_ < kPinFrom) return;
    auto pinned = internal::cuda::register_host(segment_->data(), segment_->size());
    if (pinned.ok()) {
      pin_ = std::move(pinned).value();
      return;
    }
    pin_failed_ = true;  // device copies still work, through bounce buffers
    log::get("shm")->info("segment '{}' stays pageable for GPU copies: {}", segment_->name(),
                          pinned.status().message());
  }

 private:
  static constexpr int kPinFrom = 2;
  std::shared_ptr<Segment> segment_;
  std::mutex mu_;  // guards the three below
  int device_copies_ = 0;
  bool pin_failed_ = false;
  std::shared_ptr<void> pin_;
};

// A client's mapped segments, least recently used evicted first. A mapping
// in use by a copy is kept alive by that copy (shared_ptr), so eviction
// never unmaps memory under a transfer. Segments the volume unlinked (it
// freed them) are dropped by a periodic sweep, so their memory is returned.
class MappingCache {
 public:
  explicit MappingCache(std::size_t max_entries) : max_(max_entries) {}

  Result<std::shared_ptr<Mapping>> get(const std::string& name) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = map_.find(name);
      if (it != map_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second.pos);
        return it->second.segment;
      }
    }
    // Mapped outside the lock: MAP_POPULATE of a large segment takes a while.
    auto opened = Segment::open(name);
    if (!opened.ok()) return opened.status();
    auto seg = std::make_shared<Mapping>(std::shared_ptr<Segment>(std::move(opened).value()));
    std::vector<std::shared_ptr<Mapping>> doomed;  // unmapped outside the lock
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(name);
    if (it != map_.end()) return it->second.segment;  // another thread won
    lru_.push_front(name);
    map_.emplace(name, Entry{seg, lru_.begin()});
    while (map_.size() > max_) {
      auto victim = map_.find(lru_.back());
      doomed.push_back(std::move(victim->second.segment));
      map_.erase(victim);
      lru_.pop_back();
    }
    if (++inserts_since_sweep_ >= std::max<std::size_t>(64, map_.size() / 4)) {
      inserts_since_sweep_ = 0;
      for (auto e = map_.begin(); e != map_.end();) {
        if (e->first != name && !segment_exists(e->first)) {
          doomed.push_back(std::move(e->second.segment));
          lru_.erase(e->second.pos);
          e = map_.erase(e);
        } else {
          ++e;
        }
      }
    }
    return seg;
  }

 private:
  struct Entry {
    std::shared_ptr<Mapping> segment;
    std::list<std::string>::iterator pos;
  };
  const std::size_t max_;
  std::mutex mu_;  // guards map_, lru_, inserts_since_sweep_
  std::unordered_map<std::string, Entry> map_;
  std::list<std::string> lru_;
  std::size_t inserts_since_sweep_ = 0;
};

class ShmTransport final : public Transport {
 public:
  // `segment_prefix`: the volume's ("meshstore.<pid>-<start>.<server>."),
  // whose process is watched for lease-free reads.
  ShmTransport(const TransportConfig& config, const std::string& segment_prefix)
      : config_(config),
        cache_(static_cast<std::size_t>(config.shm_max_mappings)),
        prefix_(segment_prefix),
        owner_(ProcessWatch::of_segment_prefix(segment_prefix)) {}

  std::string_view name() const noexcept override { return "shm"; }
  Capabilities capabilities() const noexcept override {
    Capabilities c;
    c.one_sided = true;
    c.same_host_only = true;
    c.maps_memory = true;
    c.device_copies = true;
    return c;
  }
  // `src` (write) or `dst` (read) may be GPU memory: then one CUDA copy
  // through the mapping, on a copy engine thread.
  Future<void> write(const wire::RegionRef& dst, std::uint64_t offset, const std::byte* src,
                     std::size_t n) override {
    auto at = locate(dst, offset, n, "shm write");
    if (!at.ok()) return make_error_future<void>(at.status());
    if (n > 0 && internal::cuda::is_device_pointer(src)) {
      return device_copy(std::move(at->first), at->second, src, n, "shm write from GPU memory");
    }
    return hold(CopyEngine::instance().copy(at->second, src, n, config_.shm_parallel_copy_bytes),
                std::move(at->first));
  }
  Future<void> read(const wire::RegionRef& src, std::uint64_t offset, std::byte* dst,
                    std::size_t n) override {
    auto at = locate(src, offset, n, "shm read");
    if (!at.ok()) return make_error_future<void>(at.status());
    if (n > 0 && internal::cuda::is_device_pointer(dst)) {
      return device_copy(std::move(at->first), dst, at->second, n, "shm read into GPU memory");
    }
    return hold(CopyEngine::instance().copy(dst, at->second, n, config_.shm_parallel_copy_bytes),
                std::move(at->first));
  }

  Result<std::shared_ptr<std::byte>> map_read_only(const wire::RegionRef& ref) override {
    const std::string where = "shm view of region " + std::to_string(ref.region_id);
    if (ref.device >= 0) return device_region_error(ref.region_id, ref.device, "shm view");
    auto placed = placement(ref, where);
    if (!placed.ok()) return placed.status();
    // Its own read-only mapping, apart from the cache: writes through it fault.
    auto seg = Segment::open(placed->segment, true);
    if (!seg.ok()) return seg.status().with_context(where);
    std::shared_ptr<Segment> owned(std::move(seg).value());
    if (placed->offset > owned->size() || ref.nbytes > owned->size() - placed->offset) {
      return Status(Errc::protocol_error,
                    where + ": segment '" + placed->segment + "' is too small");
    }
    std::byte* p = owned->data() + placed->offset;
    return std::shared_ptr<std::byte>(p, [owned](std::byte*) mutable { owned.reset(); });
  }

  // The tag of a segment the server allocated for one region (its header
  // before the region, magic number checked) and the region's bytes after
  // it; none for any other place (a publisher's lent buffers).
  TaggedBytes tagged_bytes(const wire::RegionRef& ref) override {
    // A volume that died left its tags as they were: none is proof then.
    if (ref.device >= 0 || !owner_ || !owner_->alive()) return {};
    // Only the volume's own segments (a record's place is the writer's
    // word), and only where its server put a region.
    auto placed = placement(ref, "object tag");
    if (!placed.ok() || prefix_.empty() || placed->segment.rfind(prefix_, 0) != 0) return {};
    auto seg = cache_.get(placed->segment);
    if (!seg.ok()) return {};
    const Segment& s = (*seg)->segment();
    // A segment of one region, or a slot of a slab (SlabHeader).
    const std::int64_t at = object_header_at(s.data(), s.size(), placed->offset, ref.nbytes);
    if (at < 0) return {};
    const auto* header = reinterpret_cast<const ObjectHeader*>(s.data() + at);
    if (header->magic != kObjectHeaderMagic) return {};
    TaggedBytes out;
    out.data = s.data() + placed->offset;
    out.before_device_copy = [mapping = *seg] { mapping->before_device_copy(); };
    out.tag =
        std::shared_ptr<const std::atomic<std::uint64_t>>(std::move(seg).value(), &header->object);
    return out;
  }

  Result<std::shared_ptr<std::byte>> map_writable(const wire::RegionRef& ref) override {
    // The cached mapping: already populated, so filling it costs no faults;
    // the region is staged, so nobody reads it before the commit.
    auto at = locate(ref, 0, ref.nbytes, "shm in-place write");
    if (!at.ok()) return at.status();
    std::shared_ptr<Mapping> seg = std::move(at->first);
    return std::shared_ptr<std::byte>(at->second, [seg](std::byte*) mutable { seg.reset(); });
  }

 private:
  // The mapped segment of `ref` and the address of byte `offset` of it.
  Result<std::pair<std::shared_ptr<Mapping>, std::byte*>> locate(const wire::RegionRef& ref,
                                                                 std::uint64_t offset,
                                                                 std::size_t n, const char* op) {
    MESHSTORE_RETURN_IF_ERROR(check_range(ref.region_id, ref.nbytes, offset, n, op));
    if (ref.device >= 0) return device_region_error(ref.region_id, ref.device, op);
    const std::string where = std::string(op) + " of region " + std::to_string(ref.region_id);
    auto placed = placement(ref, where);
    if (!placed.ok()) return placed.status();
    auto seg = cache_.get(placed->segment);
    if (!seg.ok()) return seg.status().with_context(where);
    const Segment& s = (*seg)->segment();
    if (placed->offset > s.size() || ref.nbytes > s.size() - placed->offset) {
      return Status(Errc::protocol_error, where + ": segment '" + placed->segment + "' holds " +
                                              std::to_string(s.size()) + " bytes, too few");
    }
    std::byte* p = s.data() + placed->offset + offset;
    return std::make_pair(std::move(seg).value(), p);
  }
  // Keeps the mapping alive until the copy is done.
  static Future<void> hold(Future<void> copy, std::shared_ptr<Mapping> seg) {
    if (copy.ready()) return copy;
    return copy.then([seg] {});
  }
  // A CUDA copy between the mapping and GPU memory, off the caller's thread
  // (an actor's): the copy blocks until the bytes are there.
  static Future<void> device_copy(std::shared_ptr<Mapping> seg, std::byte* dst,
                                  const std::byte* src, std::size_t n, const char* what) {
    return CopyEngine::instance().run_checked([seg, dst, src, n, what] {
      seg->before_device_copy();
      return internal::cuda::copy_bytes(dst, src, n).with_context(what);
    });
  }

  const TransportConfig config_;
  MappingCache cache_;
  const std::string prefix_;                   // the volume's segment names begin with it
  const std::unique_ptr<ProcessWatch> owner_;  // the volume's process; null: unknown
};

}  // namespace

TransportFactory shm_factory() {
  TransportFactory f;
  f.name = "shm";
  f.priority = 20;
  f.capabilities.one_sided = true;
  f.capabilities.same_host_only = true;
  f.capabilities.maps_memory = true;
  f.capabilities.device_copies = true;
  f.gpu_direct = [] { return meshstore::cuda::status(); };
  f.make_server = [](const ServerContext& ctx) -> Result<std::unique_ptr<TransportServer>> {
    static std::atomic<std::uint64_t> servers{1};
    // The first server of a process clears what crashed processes left.
    static const bool collected = [] {
      auto report = garbage_collect();
      if (!report.removed.empty()) {
        log::get("shm")->warn(
            "removed {} shared-memory segment(s) ({} bytes) left by processes that died",
            report.removed.size(), report.bytes_freed);
      }
      return true;
    }();
    (void)collected;
    (void)ctx;
    return std::unique_ptr<TransportServer>(
        std::make_unique<ShmServer>(process_prefix() + std::to_string(servers.fetch_add(1)) + "."));
  };
  f.make_client = [](const ClientContext& ctx,
                     const EndpointInfo& ep) -> Result<std::unique_ptr<Transport>> {
    MESHSTORE_RETURN_IF_ERROR(ctx.config.validate());
    if (ep.transport != "shm") {
      return Status(Errc::invalid_argument, "shm client: endpoint is not an shm endpoint");
    }
    return std::unique_ptr<Transport>(
        std::make_unique<ShmTransport>(ctx.config, parse_address(ep.address).prefix));
  };
  f.can_serve = [](const EndpointInfo& ep) -> Status {
    MESHSTORE_RETURN_IF_ERROR(same_host(ep.host_id));
    const std::string their_uid = parse_address(ep.address).uid;
    if (their_uid != uid_tag()) {
      return Status(Errc::unsupported, "the volume runs as another user (" + their_uid +
                                           ", this process " + uid_tag() + ")");
    }
    return Status();
  };
  return f;
}

std::string describe(std::string_view segment, std::uint64_t offset) {
  return DescriptionWriter().bytes(segment).u64(offset).take();
}

}  // namespace meshstore::transports::shm
