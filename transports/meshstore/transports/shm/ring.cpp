#include "meshstore/transports/shm/ring.hpp"

#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>

#include "meshstore/internal/idle_spin.hpp"

namespace meshstore::transports::shm {
namespace {

constexpr std::uint64_t kMagic = 0x676e69722e6d736dULL;  // "msm.ring", little-endian
constexpr std::uint32_t kVersion = 1;
constexpr std::uint32_t kMaxSlots = 4096;
constexpr std::uint32_t kMinSlotBytes = 64;
constexpr std::uint32_t kMaxSlotBytes = 1u << 20;
constexpr auto kLivenessPeriod = std::chrono::milliseconds(10);

struct Header {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t slots;
  std::uint32_t slot_bytes;
  std::uint32_t reserved;
  std::uint64_t total_bytes;
  std::atomic<std::int32_t> pid[2];  // client (creator), server; 0: none yet
  std::atomic<std::uint32_t> closed[2];
};

struct SlotHeader {
  std::uint32_t length;
  std::uint32_t reserved;
  std::uint64_t tag;
};

constexpr std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
constexpr std::size_t kHeaderBytes = round_up(sizeof(Header), 64);

static_assert(std::atomic<std::uint32_t>::is_always_lock_free, "futex words must be lock-free");
static_assert(std::atomic<std::int32_t>::is_always_lock_free, "pids must be lock-free");

std::size_t slot_stride(std::uint32_t slot_bytes) {
  return round_up(sizeof(SlotHeader) + slot_bytes, 64);
}

void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                std::chrono::nanoseconds timeout) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  // Not FUTEX_PRIVATE: the word is shared with another process. EAGAIN
  // (the word moved), EINTR and ETIMEDOUT all mean: look again.
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake(std::atomic<std::uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

// invalid_argument unless `name` names a meshstore segment: what a ring or
// a doorbell is opened by, a name another process sent (`what` says which).
Status check_segment_name(const char* what, const std::string& name) {
  if (name.rfind(kSegmentPrefix, 0) == 0 && name.find('/') == std::string::npos) return Status();
  return Status(Errc::invalid_argument,
                std::string(what) + ": '" + name + "' is not a meshstore segment name");
}

// Whether process `pid` runs: it exists and is not a zombie (dead, not yet
// reaped by its parent).
bool process_alive(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  return proc_stat_field(pid, 3) != "Z";  // unreadable: assume alive
}

}  // namespace

// One direction's queue. The producer writes `tail`, the consumer `head`;
// either may have been scribbled on by the peer, so neither is trusted:
// their distance is checked against `slots`, and a slot is always taken
// modulo `slots`.
struct Ring::Queue {
  alignas(64) std::atomic<std::uint32_t> tail;
  alignas(64) std::atomic<std::uint32_t> head;
  // Bumped by the producer after each message: the consumer sleeps on it.
  alignas(64) std::atomic<std::uint32_t> data_seq;
  std::atomic<std::uint32_t> consumer_sleeping;
  // Bumped by the consumer after each message taken: a producer facing a
  // full queue sleeps on it.
  alignas(64) std::atomic<std::uint32_t> space_seq;
  std::atomic<std::uint32_t> producer_sleeping;
};

namespace {

struct Layout {
  std::size_t queues = 0;  // offset of the two queues
  std::size_t slots = 0;   // offset of queue 0's slots; queue 1's follow
  std::size_t total = 0;
};

Layout layout_of(std::uint32_t slots, std::uint32_t slot_bytes) {
  Layout l;
  l.queues = kHeaderBytes;
  l.slots = l.queues + round_up(2 * sizeof(Ring::Queue), 64);
  l.total = l.slots + 2 * static_cast<std::size_t>(slots) * slot_stride(slot_bytes);
  return l;
}

}  // namespace

Ring::Ring(std::unique_ptr<Segment> segment, int end, std::uint32_t slots, std::uint32_t slot_bytes,
           std::chrono::microseconds spin)
    : segment_(std::move(segment)),
      end_(end),
      slots_(slots),
      slot_bytes_(slot_bytes),
      spin_(spin) {}

Result<std::unique_ptr<Ring>> Ring::create(const Options& options) {
  if (options.slots < 1 || options.slots > kMaxSlots) {
    return Status(Errc::invalid_argument,
                  "ring: slots must be in [1, 4096], got " + std::to_string(options.slots));
  }
  if (options.slot_bytes < kMinSlotBytes || options.slot_bytes > kMaxSlotBytes) {
    return Status(Errc::invalid_argument, "ring: slot_bytes must be in [64, 1048576], got " +
                                              std::to_string(options.slot_bytes));
  }
  if (options.spin.count() < 0) {
    return Status(Errc::invalid_argument, "ring: spin must not be negative");
  }
  static std::atomic<std::uint64_t> next{0};
  const std::string name = process_prefix() + "ring." + std::to_string(next.fetch_add(1));
  const Layout l = layout_of(options.slots, options.slot_bytes);
  auto segment = Segment::create(name, l.total);
  if (!segment.ok()) return segment.status();
  std::byte* base = (*segment)->data();
  auto* h = new (base) Header{};
  h->slots = options.slots;
  h->slot_bytes = options.slot_bytes;
  h->total_bytes = l.total;
  h->version = kVersion;
  h->pid[0].store(static_cast<std::int32_t>(getpid()));
  h->pid[1].store(0);
  h->closed[0].store(0);
  h->closed[1].store(0);
  for (int q = 0; q < 2; ++q) {
    new (base + l.queues + q * sizeof(Queue)) Queue{};
  }
  // The magic last: a half-built ring is never taken for one.
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kMagic;
  return std::unique_ptr<Ring>(
      new Ring(std::move(segment).value(), 0, options.slots, options.slot_bytes, options.spin));
}

Result<std::unique_ptr<Ring>> Ring::attach(const std::string& name, pid_t creator,
                                           std::chrono::microseconds spin) {
  MESHSTORE_RETURN_IF_ERROR(check_segment_name("ring", name));
  auto segment = Segment::open(name);
  if (!segment.ok()) return segment.status();
  const std::size_t size = (*segment)->size();
  auto bad = [&](const std::string& what) {
    return Status(Errc::protocol_error, "ring '" + name + "': " + what);
  };
  if (size < kHeaderBytes) return bad("segment of " + std::to_string(size) + " bytes, no header");
  auto* h = reinterpret_cast<Header*>((*segment)->data());
  if (h->magic != kMagic) return bad("not a ring (bad magic)");
  if (h->version != kVersion) {
    return bad("version " + std::to_string(h->version) + ", this build speaks " +
               std::to_string(kVersion));
  }
  const std::uint32_t slots = h->slots, slot_bytes = h->slot_bytes;
  if (slots < 1 || slots > kMaxSlots || slot_bytes < kMinSlotBytes || slot_bytes > kMaxSlotBytes) {
    return bad("slots " + std::to_string(slots) + " of " + std::to_string(slot_bytes) +
               " bytes are out of range");
  }
  const Layout l = layout_of(slots, slot_bytes);
  if (h->total_bytes != l.total || size < l.total) {
    return bad("its header says " + std::to_string(h->total_bytes) + " bytes, its layout needs " +
               std::to_string(l.total) + ", the segment has " + std::to_string(size));
  }
  const std::int32_t made_by = h->pid[0].load();
  if (made_by != static_cast<std::int32_t>(creator)) {
    return Status(Errc::unavailable, "ring '" + name + "' was created by process " +
                                         std::to_string(made_by) + ", not " +
                                         std::to_string(creator));
  }
  std::int32_t none = 0;
  if (!h->pid[1].compare_exchange_strong(none, static_cast<std::int32_t>(getpid()))) {
    return Status(Errc::unavailable, "ring '" + name + "' already has a server end (process " +
                                         std::to_string(none) + ")");
  }
  if (spin.count() < 0) return Status(Errc::invalid_argument, "ring: spin must not be negative");
  // Both ends hold the memory now: the name has done its job. Gone from
  // /dev/shm, the ring lives exactly as long as its two mappings, so a
  // client killed with SIGKILL leaves nothing behind once its volume
  // closes its end (and a volume killed, nothing once its client does).
  (*segment)->unlink();
  auto ring =
      std::unique_ptr<Ring>(new Ring(std::move(segment).value(), 1, slots, slot_bytes, spin));
  ring->guard_ = PeerMemory::guard(ring->segment_->data(), ring->segment_->size());
  return ring;
}

Ring::~Ring() {
  auto* h = reinterpret_cast<Header*>(segment_->data());
  h->closed[end_].store(1);
  // Wake whatever the peer may be sleeping on.
  for (Queue* q : {&queue(0), &queue(1)}) {
    q->data_seq.fetch_add(1);
    q->space_seq.fetch_add(1);
    futex_wake(&q->data_seq);
    futex_wake(&q->space_seq);
  }
}

// Queue 0 carries requests (client -> server), queue 1 replies: an end
// sends on queue end_ and receives on 1 - end_.
Ring::Queue& Ring::queue(int which) const {
  return *reinterpret_cast<Queue*>(segment_->data() + kHeaderBytes + which * sizeof(Queue));
}

std::byte* Ring::slot(int which, std::uint32_t index) const {
  return segment_->data() + layout_of(slots_, slot_bytes_).slots +
         (static_cast<std::size_t>(which) * slots_ + index % slots_) * slot_stride(slot_bytes_);
}

Status Ring::truncated() const {
  if (guard_ && guard_->poisoned()) {
    return corrupt("its segment was truncated under this end (an access past its end was caught)");
  }
  return Status();
}

Status Ring::peer_gone(bool ask_process) const {
  MESHSTORE_RETURN_IF_ERROR(truncated());
  const auto* h = reinterpret_cast<const Header*>(segment_->data());
  const int peer = 1 - end_;
  if (h->closed[peer].load() != 0) {
    return Status(Errc::unavailable, "ring '" + name() + "': the " +
                                         (peer == 0 ? "client" : "server") + " closed its end");
  }
  const std::int32_t pid = h->pid[peer].load();
  if (ask_process && pid > 0 && !process_alive(pid)) {
    return Status(Errc::unavailable, "ring '" + name() + "': the " +
                                         (peer == 0 ? "client" : "server") + " process " +
                                         std::to_string(pid) + " is gone");
  }
  return Status();
}

Status Ring::corrupt(const std::string& what) const {
  return Status(Errc::protocol_error, "ring '" + name() + "': " + what);
}

namespace {

// Waits until ready() (spinning for `spin`, then sleeping on `word` with
// `sleeping` set), the deadline, or gone() says the peer is gone.
// The timeout's message, "ring 'NAME': WHAT", is built only on a timeout.
template <class Ready, class Gone>
Status wait_for(Ready ready, Gone gone, std::atomic<std::uint32_t>& word,
                std::atomic<std::uint32_t>& sleeping, std::chrono::microseconds spin,
                Ring::Deadline deadline, const std::string& name, const char* what) {
  if (internal::spin_until(ready, spin)) return Status();
  auto next_check = std::chrono::steady_clock::now();
  for (;;) {
    const std::uint32_t seen = word.load();
    sleeping.store(1);  // seq_cst: the peer's publish then reads it
    if (ready()) {
      sleeping.store(0);
      return Status();
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_check) {
      if (auto s = gone(); !s.ok()) {
        sleeping.store(0);
        return s;
      }
      next_check = now + kLivenessPeriod;
    }
    if (now >= deadline) {
      sleeping.store(0);
      return Status(Errc::timeout, "ring '" + name + "': " + what);
    }
    futex_wait(&word, seen, std::min<std::chrono::nanoseconds>(deadline - now, kLivenessPeriod));
    sleeping.store(0);
  }
}

}  // namespace

Status Ring::send(std::uint64_t tag, const void* data, std::size_t n, Deadline deadline) {
  if (n > slot_bytes_) {
    return Status(Errc::invalid_argument, "ring '" + name() + "': a message of " +
                                              std::to_string(n) + " bytes exceeds its slots of " +
                                              std::to_string(slot_bytes_) + " bytes");
  }
  if (n > 0 && data == nullptr) {
    return Status(Errc::invalid_argument, "ring '" + name() + "': null data");
  }
  // Only the closed flag here (a load): whether the peer's process still
  // runs is asked while waiting, every 10 ms, not on every message.
  if (auto s = peer_gone(false); !s.ok()) return s;
  Queue& q = queue(end_);
  const std::uint32_t tail = q.tail.load(std::memory_order_relaxed);
  Status bad;
  auto has_space = [&] {
    const std::uint32_t head = q.head.load(std::memory_order_acquire);
    if (tail - head > slots_) {
      bad = corrupt("queue head " + std::to_string(head) + " is ahead of tail " +
                    std::to_string(tail));
      return true;
    }
    return tail - head < slots_;
  };
  auto s = wait_for(
      has_space, [&] { return peer_gone(); }, q.space_seq, q.producer_sleeping, spin_, deadline,
      name(), "no room for a message (the peer is not reading)");
  if (!s.ok()) return s;
  // Indices of zeros, read past the end of a truncated segment: say so.
  MESHSTORE_RETURN_IF_ERROR(truncated());
  if (!bad.ok()) return bad;
  std::byte* at = slot(end_, tail);
  SlotHeader sh{static_cast<std::uint32_t>(n), 0, tag};
  std::memcpy(at, &sh, sizeof(sh));
  if (n > 0) std::memcpy(at + sizeof(SlotHeader), data, n);
  MESHSTORE_RETURN_IF_ERROR(truncated());
  q.tail.store(tail + 1);  // seq_cst, then the sleeping flag
  q.data_seq.fetch_add(1);
  if (q.consumer_sleeping.load() != 0) futex_wake(&q.data_seq);
  if (doorbell_) doorbell_->ring();
  return Status();
}

// Takes the message at `head` of queue `q` (the caller saw tail != head).
Result<Ring::Message> Ring::take(Queue& q, std::uint32_t head) {
  // Indices of zeros, read past the end of a truncated segment: say so.
  MESHSTORE_RETURN_IF_ERROR(truncated());
  const std::byte* at = slot(1 - end_, head);
  SlotHeader sh;
  std::memcpy(&sh, at, sizeof(sh));
  if (sh.length > slot_bytes_) {
    return corrupt("entry " + std::to_string(head) + " says " + std::to_string(sh.length) +
                   " bytes, its slot holds " + std::to_string(slot_bytes_));
  }
  Message m;
  m.tag = sh.tag;
  m.bytes.resize(sh.length);
  if (sh.length > 0) std::memcpy(m.bytes.data(), at + sizeof(SlotHeader), sh.length);
  MESHSTORE_RETURN_IF_ERROR(truncated());
  q.head.store(head + 1);
  q.space_seq.fetch_add(1);
  if (q.producer_sleeping.load() != 0) futex_wake(&q.space_seq);
  return m;
}

Status Ring::check_distance(std::uint32_t head, std::uint32_t tail) const {
  if (tail - head <= slots_) return Status();
  return corrupt("queue tail " + std::to_string(tail) + " is more than " + std::to_string(slots_) +
                 " slots past head " + std::to_string(head));
}

Result<Ring::Message> Ring::receive(Deadline deadline) {
  Queue& q = queue(1 - end_);
  const std::uint32_t head = q.head.load(std::memory_order_relaxed);
  Status bad;
  auto has_data = [&] {
    const std::uint32_t tail = q.tail.load();  // seq_cst: after our sleeping flag
    bad = check_distance(head, tail);
    return !bad.ok() || tail != head;
  };
  auto s = wait_for(
      has_data,
      [&] {
        // Gone, unless a last message arrived meanwhile.
        auto g = peer_gone();
        return !g.ok() && has_data() ? Status() : g;
      },
      q.data_seq, q.consumer_sleeping, spin_, deadline, name(), "no message before the deadline");
  if (!s.ok()) return s;
  MESHSTORE_RETURN_IF_ERROR(truncated());
  if (!bad.ok()) return bad;
  return take(q, head);
}

Result<std::optional<Ring::Message>> Ring::try_receive() {
  Queue& q = queue(1 - end_);
  const std::uint32_t head = q.head.load(std::memory_order_relaxed);
  const std::uint32_t tail = q.tail.load(std::memory_order_acquire);
  MESHSTORE_RETURN_IF_ERROR(truncated());
  MESHSTORE_RETURN_IF_ERROR(check_distance(head, tail));
  if (tail == head) {
    // Closed with nothing left: gone. A last message sent before the
    // close is still taken (the flag is read after the index).
    MESHSTORE_RETURN_IF_ERROR(peer_gone(false));
    return std::optional<Message>();
  }
  auto m = take(q, head);
  if (!m.ok()) return m.status();
  return std::optional<Message>(std::move(m).value());
}

bool Ring::has_message() const {
  const Queue& q = queue(1 - end_);
  return q.tail.load(std::memory_order_acquire) != q.head.load(std::memory_order_relaxed);
}

namespace {

constexpr std::uint64_t kDoorbellMagic = 0x6c6c65622e6d736dULL;  // "msm.bell", little-endian
constexpr std::size_t kDoorbellBytes = 4096;

struct DoorbellWords {
  std::uint64_t magic;
  alignas(64) std::atomic<std::uint32_t> seq;
  std::atomic<std::uint32_t> sleeping;
};
static_assert(sizeof(DoorbellWords) <= kDoorbellBytes);

DoorbellWords& words_of(const Segment& s) { return *reinterpret_cast<DoorbellWords*>(s.data()); }

}  // namespace

Doorbell::Doorbell(std::unique_ptr<Segment> segment) : segment_(std::move(segment)) {}

Doorbell::~Doorbell() = default;

Result<std::shared_ptr<Doorbell>> Doorbell::create() {
  static std::atomic<std::uint64_t> next{0};
  auto segment = Segment::create(process_prefix() + "bell." + std::to_string(next.fetch_add(1)),
                                 kDoorbellBytes);
  if (!segment.ok()) return segment.status();
  auto* w = new ((*segment)->data()) DoorbellWords{};
  w->seq.store(0);
  w->sleeping.store(0);
  std::atomic_thread_fence(std::memory_order_release);
  w->magic = kDoorbellMagic;
  std::shared_ptr<Doorbell> bell(new Doorbell(std::move(segment).value()));
  bell->guard_ = PeerMemory::guard(bell->segment_->data(), bell->segment_->size());
  return bell;
}

Result<std::shared_ptr<Doorbell>> Doorbell::open(const std::string& name) {
  MESHSTORE_RETURN_IF_ERROR(check_segment_name("doorbell", name));
  auto segment = Segment::open(name);
  if (!segment.ok()) return segment.status();
  if ((*segment)->size() < sizeof(DoorbellWords) || words_of(**segment).magic != kDoorbellMagic) {
    return Status(Errc::protocol_error, "doorbell '" + name + "': not a doorbell");
  }
  return std::shared_ptr<Doorbell>(new Doorbell(std::move(segment).value()));
}

const std::string& Doorbell::name() const noexcept { return segment_->name(); }

void Doorbell::ring() {
  auto& w = words_of(*segment_);
  w.seq.fetch_add(1);  // seq_cst, then the sleeping flag
  if (w.sleeping.load() != 0) futex_wake(&w.seq);
}

std::uint32_t Doorbell::seq() const { return words_of(*segment_).seq.load(); }

void Doorbell::set_sleeping(bool on) { words_of(*segment_).sleeping.store(on ? 1 : 0); }

void Doorbell::sleep(std::uint32_t seen, std::chrono::nanoseconds timeout) {
  // A truncated segment (poisoned guard) reads zeros and no client can
  // wake it any more: sleep out the slice, the rings are polled after it.
  if (guard_ && guard_->poisoned()) {
    std::this_thread::sleep_for(timeout);
    return;
  }
  futex_wait(&words_of(*segment_).seq, seen, timeout);
}

}  // namespace meshstore::transports::shm
