#include "meshstore/transports/shm/peer_memory.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <mutex>
#include <thread>

#include "meshstore/logging.hpp"

namespace meshstore::transports::shm {
namespace {

constexpr int kSlots = 1024;

// A guarded range. Written under `slots_mu` (begin last on register,
// first on unregister); read by the signal handler without a lock.
struct Slot {
  std::atomic<std::uintptr_t> begin{0};
  std::atomic<std::uintptr_t> end{0};
  std::atomic<bool> poisoned{false};
};

Slot slots[kSlots];
std::mutex slots_mu;  // guards the taking and freeing of slots
// Handlers running now: an unregistering guard waits until none may still
// map a page into its range.
std::atomic<int> in_handler{0};
std::atomic<std::uint64_t> faults{0};
const std::uintptr_t page_bytes = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
// The SIGBUS disposition before ours (never freed: a handler may read it).
std::atomic<const struct sigaction*> previous{nullptr};

void on_sigbus(int sig, siginfo_t* info, void*) {
  const int saved_errno = errno;
  in_handler.fetch_add(1);
  const auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
  bool handled = false;
  // A fault from an access (not a signal someone sent) inside a range.
  if (info->si_code > 0) {
    for (auto& s : slots) {
      const auto b = s.begin.load();
      if (b == 0 || addr < b || addr >= s.end.load()) continue;
      void* page = reinterpret_cast<void*>(addr & ~(page_bytes - 1));
      if (mmap(page, page_bytes, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS,
               -1, 0) != MAP_FAILED) {
        s.poisoned.store(true);
        faults.fetch_add(1);
        handled = true;
      }
      break;
    }
  }
  in_handler.fetch_sub(1);
  errno = saved_errno;
  if (handled) return;  // the access runs again, on the page of zeros
  // Not ours: hand it on by putting back the handler that was there
  // before (the default when none). A fault runs its access again when we
  // return and reaches that handler; a signal someone sent is sent again.
  // Ours is not put back: the process is most likely ending.
  const struct sigaction* before = previous.load();
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigaction(sig, before ? before : &fallback, nullptr);
  if (info->si_code <= 0) raise(sig);
}

// Puts on_sigbus in front of whatever handles SIGBUS now, once: a handler
// installed later stays in front of ours (putting ours back in front of it
// could send a fault round between the two for ever, when each hands it to
// the other).
void install_handler() {
  static bool installed = false;  // under slots_mu
  if (installed) return;
  installed = true;
  struct sigaction current {};
  if (sigaction(SIGBUS, nullptr, &current) != 0) return;
  previous.store(new struct sigaction(current));
  struct sigaction ours {};
  ours.sa_sigaction = on_sigbus;
  sigemptyset(&ours.sa_mask);
  ours.sa_flags = SA_SIGINFO;
  sigaction(SIGBUS, &ours, nullptr);
}

}  // namespace

std::unique_ptr<PeerMemory> PeerMemory::guard(const void* data, std::size_t n) {
  if (data == nullptr || n == 0) return nullptr;
  std::lock_guard<std::mutex> lock(slots_mu);
  install_handler();
  for (int i = 0; i < kSlots; ++i) {
    if (slots[i].begin.load() != 0) continue;
    const auto b = reinterpret_cast<std::uintptr_t>(data);
    slots[i].poisoned.store(false);
    slots[i].end.store(b + n);
    slots[i].begin.store(b);
    return std::unique_ptr<PeerMemory>(new PeerMemory(i));
  }
  static bool warned = false;  // under slots_mu
  if (!warned) {
    warned = true;
    log::get("shm")->warn(
        "{} peer mappings are guarded already: further ones are not, and a peer that truncates "
        "one under this process would end it with SIGBUS",
        kSlots);
  }
  return nullptr;
}

PeerMemory::~PeerMemory() {
  {
    std::lock_guard<std::mutex> lock(slots_mu);
    slots[slot_].begin.store(0);
    slots[slot_].end.store(0);
  }
  // A handler that matched the range before it went may still be mapping.
  while (in_handler.load() != 0) std::this_thread::yield();
}

bool PeerMemory::poisoned() const noexcept { return slots[slot_].poisoned.load(); }

std::uint64_t PeerMemory::faults_survived() noexcept { return faults.load(); }

}  // namespace meshstore::transports::shm
