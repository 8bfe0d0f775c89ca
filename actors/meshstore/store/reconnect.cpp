#include "meshstore/store/reconnect.hpp"

#include <unistd.h>

#include <algorithm>
#include <random>

#include "meshstore/foreign_thread.hpp"
#include "meshstore/logging.hpp"

namespace meshstore::store {

namespace {

// One attempt's share of the time left: short, so that stop() is not kept
// waiting by a connection attempt.
constexpr std::chrono::milliseconds kAttempt{250};
// The pause once every address was tried: 5 ms after the first round,
// doubling up to 100 ms (a server restarted in place, or a standby, serves
// some 20 ms after the kill: a fixed 100 ms pause was most of a failover),
// each drawn from its upper half so that the processes of a large job do
// not all knock at once.
constexpr std::chrono::milliseconds kFirstPause{5};
constexpr std::chrono::milliseconds kMaxPause{100};

std::chrono::milliseconds pause_after(std::size_t rounds, std::minstd_rand& gen) {
  auto d = kFirstPause;
  for (std::size_t i = 1; i < rounds && d < kMaxPause; ++i) d *= 2;
  d = std::min(d, kMaxPause);
  std::uniform_int_distribution<std::int64_t> half(d.count() / 2, d.count());
  return std::chrono::milliseconds(half(gen));
}

}  // namespace

namespace {

std::string joined(const std::vector<std::string>& addresses) {
  std::string out;
  for (const auto& a : addresses) out += (out.empty() ? "" : " or ") + a;
  return out;
}

}  // namespace

Reconnector::Reconnector(std::vector<std::string> addresses, std::chrono::milliseconds timeout,
                         Attempt attempt, std::function<void(const std::string&)> gave_up)
    : addresses_(std::move(addresses)),
      named_(joined(addresses_)),
      timeout_(timeout),
      attempt_(std::move(attempt)),
      gave_up_(std::move(gave_up)) {
  thread_ = std::thread([this] { run(); });
}

Reconnector::~Reconnector() { stop(); }

void Reconnector::control_down(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    why_ = why.empty() ? "the controller went down" : why;
    down_ = why_ + "; reconnecting to the store at " + named_ + " (a failover is under way)";
  }
  cv_.notify_all();
}

std::string Reconnector::down() const {
  std::lock_guard<std::mutex> lock(mu_);
  return down_;
}

void Reconnector::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Reconnector::pause(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> lock(mu_);
  return !cv_.wait_for(lock, d, [&] { return stopping_; });
}

void Reconnector::run() {
  // Asks actors with scoped actors of the store's system.
  ForeignThreadGuard guard;
  for (;;) {
    std::string why;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !why_.empty(); });
      if (stopping_) return;
      why = std::exchange(why_, {});
    }
    reconnect(why);
  }
}

void Reconnector::reconnect(const std::string& why) {
  auto log = log::get("store");
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout_;
  log->warn("{}; reconnecting to the store at {} for up to {} ms", why, named_, timeout_.count());
  Status last(Errc::unavailable, "no attempt was made");
  std::minstd_rand gen(static_cast<std::uint32_t>(
      std::chrono::steady_clock::now().time_since_epoch().count() ^ ::getpid()));
  for (std::size_t turn = 0;; ++turn) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    const std::string& at = addresses_[turn % addresses_.size()];
    last = attempt_(at, std::min(left, kAttempt));
    if (last.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (why_.empty()) down_.clear();  // else it went down again meanwhile
      }
      log->info("reconnected to the store at {} after {} ms", at,
                std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - start)
                    .count());
      return;
    }
    if (last.code() == Errc::shutdown) return;
    // A pause once every address was tried.
    const std::size_t rounds = (turn + 1) / addresses_.size();
    if ((turn + 1) % addresses_.size() == 0 && !pause(pause_after(rounds, gen))) return;
  }
  log->error("gave up reconnecting to the store at {} after {} ms: {}; its calls fail from now",
             named_, timeout_.count(), last.to_string());
  const std::string gone = "no store came back at " + named_ + " within " +
                           std::to_string(timeout_.count()) + " ms (" + last.to_string() + ")";
  {
    std::lock_guard<std::mutex> lock(mu_);
    down_ = gone;
  }
  if (gave_up_) gave_up_(gone);
}

}  // namespace meshstore::store
