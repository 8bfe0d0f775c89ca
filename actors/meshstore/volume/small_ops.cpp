#include "meshstore/volume/small_ops.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <thread>

#include "meshstore/internal/idle_spin.hpp"
#include "meshstore/internal/thread_name.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/protocol/atoms.hpp"
#include "meshstore/volume/state.hpp"

namespace meshstore::volume {

namespace {

// How often the serving thread asks whether each ring's client still runs
// (a process check per ring) and, at the latest, looks at its stop flag.
constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);

// A commit request (fast_get::CommitRequest), decoded and checked as input
// from another process, as the job for the volume actor (which checks each
// object given back or committed is one the channel's client staged there).
Result<protocol::FastCommitJob> commit_job(const std::vector<std::byte>& bytes,
                                           const std::string& volume_id) {
  auto req = protocol::fast_get::decode_commit(bytes);
  if (!req.ok()) return req.status();
  MESHSTORE_RETURN_IF_ERROR(check_commit(*req, volume_id));
  protocol::FastCommitJob job;
  job.request = std::move(req).value();
  // The bytes sent inline outlive the message they came in.
  for (const auto& data : job.request.inlined) {
    job.inlined.push_back(data ? std::optional<std::string>(*data) : std::nullopt);
  }
  job.request.inlined.clear();
  return job;
}

// The reply to a get or a check: `bytes` is neither a commit nor a part of
// one; a get's reply fits one `message` of its channel.
std::vector<std::byte> answer_get(const SmallObjects& table, const std::vector<std::byte>& bytes,
                                  std::size_t message) {
  auto req = protocol::fast_get::decode_request(bytes);
  if (!req.ok()) {
    const std::string why = req.status().to_string();
    return protocol::fast_get::encode(protocol::fast_get::ReplyStatus::error, why.data(),
                                      why.size());
  }
  return req->check ? table.check(req->object_id, req->key)
                    : table.read(req->object_id, req->key, message);
}

}  // namespace

// A channel's reply to one request, sent once by whoever has it first.
struct SmallOpService::Owed {
  // Takes the reply by value: a get's (up to a message) is moved along,
  // never copied, on its way to the channel.
  std::function<void(std::vector<std::byte>)> send;
  caf::actor_addr controller;  // a put's or commit's; none for a get
  std::uint64_t id = 0;        // in Pending; 0: not there
  std::atomic<bool> sent{false};
  // Sends `reply` unless it was sent.
  void deliver(std::vector<std::byte> reply) {
    if (!sent.exchange(true)) send(std::move(reply));
  }
};

// The puts and commits handed to the volume actor and not yet answered:
// what controller_gone() and stop() answer. Shared with the actor's
// callbacks, which may run after the service is gone.
struct SmallOpService::Pending {
  std::mutex mu;
  std::uint64_t next = 1;
  std::unordered_map<std::uint64_t, std::shared_ptr<Owed>> owed;
  std::atomic<std::size_t> outstanding{0};  // owed.size(), read without the lock
  void add(const std::shared_ptr<Owed>& o) {
    std::lock_guard<std::mutex> lock(mu);
    o->id = next++;
    owed.emplace(o->id, o);
    outstanding.store(owed.size());
  }
  void settle(const std::shared_ptr<Owed>& o, const std::vector<std::byte>& reply) {
    {
      std::lock_guard<std::mutex> lock(mu);
      owed.erase(o->id);
      outstanding.store(owed.size());
    }
    o->deliver(reply);
  }
  // Answers `reply` to each owed put whose controller is `controller` (every
  // one when it is null).
  void fail(const caf::actor_addr* controller, const std::vector<std::byte>& reply) {
    std::vector<std::shared_ptr<Owed>> doomed;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (auto it = owed.begin(); it != owed.end();) {
        if (!controller || it->second->controller == *controller) {
          doomed.push_back(std::move(it->second));
          it = owed.erase(it);
        } else {
          ++it;
        }
      }
      outstanding.store(owed.size());
    }
    for (auto& o : doomed) o->deliver(reply);
  }
};

// Identified commits (fast_get::CommitRequest::id), by client and id: one
// under way collects the requests sent again for it, which get its reply;
// one done keeps its reply (the last kRecentCommits, kRecentReplyBytes in
// all) for one sent again later. A client sends a commit again only when
// its channel failed with the first on its way (FastPath::commit), so
// none is done twice and none is lost. Shared with the replies' senders,
// which may run after the service is gone.
struct SmallOpService::Recent {
  using Key = std::pair<caf::actor_addr, std::uint64_t>;
  struct Entry {
    std::optional<std::vector<std::byte>> reply;  // set once done
    std::vector<std::shared_ptr<Owed>> waiting;
  };
  std::mutex mu;
  std::map<Key, Entry> entries;
  std::deque<Key> done;  // oldest first
  std::size_t kept_bytes = 0;

  // True when `owed` is answered by a commit `key` names: now, or once
  // the one under way is done. False for a commit not seen: the caller
  // does it, and its reply goes through finish().
  bool join(const Key& key, const std::shared_ptr<Owed>& owed) {
    std::vector<std::byte> reply;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto [it, fresh] = entries.try_emplace(key);
      if (fresh) return false;
      if (!it->second.reply) {
        it->second.waiting.push_back(owed);
        return true;
      }
      reply = *it->second.reply;
    }
    owed->deliver(reply);
    return true;
  }
  // The commit `key` names answered `reply`: kept, and sent to those
  // waiting for it.
  void finish(const Key& key, const std::vector<std::byte>& reply) {
    std::vector<std::shared_ptr<Owed>> waiting;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = entries.find(key);
      if (it == entries.end() || it->second.reply) return;
      waiting.swap(it->second.waiting);
      if (reply.size() > kRecentReplyBytes) {
        entries.erase(it);
      } else {
        it->second.reply = reply;
        kept_bytes += reply.size();
        done.push_back(key);
      }
      while (!done.empty() && (done.size() > kRecentCommits || kept_bytes > kRecentReplyBytes)) {
        auto old = entries.find(done.front());
        kept_bytes -= old->second.reply->size();
        entries.erase(old);
        done.pop_front();
      }
    }
    for (auto& o : waiting) o->deliver(reply);
  }
};

// One attached ring. The serving thread receives on it; replies are sent
// by that thread (gets) or by the volume actor's (puts), one at a time.
struct SmallOpService::Channel {
  std::unique_ptr<transports::shm::Ring> ring;
  FastPuts puts;
  std::mutex send_mu;
  bool closed = false;  // under send_mu: replies are dropped

  protocol::fast_get::PartAssembly parts;  // requests and replies larger than a slot

  Channel(std::unique_ptr<transports::shm::Ring> r, FastPuts p)
      : ring(std::move(r)), puts(std::move(p)) {}
  // Sends `reply` to request `tag` (its first part when it is larger than
  // a slot), without waiting for room: the client has one request out at
  // a time, so a full queue means it stopped reading, and its request
  // then times out on its side.
  void reply(std::uint64_t tag, std::vector<std::byte> bytes) {
    bytes = parts.first_part(std::move(bytes), ring->slot_bytes());
    std::lock_guard<std::mutex> lock(send_mu);
    if (closed) return;
    (void)ring->send(tag, bytes.data(), bytes.size(), std::chrono::steady_clock::now());
  }
};

SmallOpService::SmallOpService(std::string volume_id, std::shared_ptr<SmallObjects> table,
                               std::chrono::microseconds spin,
                               std::chrono::milliseconds request_timeout)
    : volume_id_(std::move(volume_id)),
      table_(std::move(table)),
      spin_(spin),
      request_timeout_(request_timeout),
      pending_(std::make_shared<Pending>()),
      recent_(std::make_shared<Recent>()),
      spinning_host_(internal::spinning_host()) {}

SmallOpService::~SmallOpService() {
  stop();
  std::vector<std::shared_ptr<Channel>> rings;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rings.swap(rings_);
  }
  for (auto& c : rings) {
    std::lock_guard<std::mutex> lock(c->send_mu);
    c->closed = true;
  }
}

void SmallOpService::stop() {
  std::thread thread;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    thread.swap(thread_);
  }
  if (thread.joinable()) {
    bell_->ring();
    thread.join();
  }
  pending_->fail(nullptr, protocol::fast_get::encode_error(
                              Status(Errc::unavailable, "volume '" + volume_id_ + "' stopped")));
}

Result<std::string> SmallOpService::add_ring(std::unique_ptr<transports::shm::Ring> ring,
                                             FastPuts puts) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_.load()) return Status(Errc::unavailable, "volume '" + volume_id_ + "' stopped");
    if (!bell_) {
      auto bell = transports::shm::Doorbell::create();
      if (!bell.ok()) return bell.status().with_context("volume '" + volume_id_ + "': doorbell");
      bell_ = std::move(bell).value();
      thread_ = std::thread([this] { run(); });
    }
    rings_.push_back(std::make_shared<Channel>(std::move(ring), std::move(puts)));
    generation_.fetch_add(1);
  }
  bell_->ring();
  return bell_->name();
}

void SmallOpService::attach_token(std::uint64_t token, FastPuts puts) {
  std::lock_guard<std::mutex> lock(mu_);
  tokens_[token] = Attached{std::move(puts), std::make_shared<protocol::fast_get::PartAssembly>()};
}

void SmallOpService::owner_gone(const caf::actor_addr& owner) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = tokens_.begin(); it != tokens_.end();) {
    it = it->second.puts.owner == owner ? tokens_.erase(it) : std::next(it);
  }
}

void SmallOpService::controller_gone(const caf::actor_addr& controller) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Bounded: a volume outlives few controllers (a store has one; a
    // restarted one is a new actor), and only recent ones can still be
    // named by a client attaching.
    constexpr std::size_t kMaxDeadControllers = 64;
    if (dead_controllers_.size() == kMaxDeadControllers) {
      dead_controllers_.erase(dead_controllers_.begin());
    }
    dead_controllers_.push_back(controller);
  }
  if (!await_controller_.load()) pending_->fail(&controller, controller_down_reply());
}

std::vector<std::byte> SmallOpService::controller_down_reply() const {
  return protocol::fast_get::encode_error(
      Status(Errc::unavailable, "volume '" + volume_id_ + "': the controller went down"));
}

bool SmallOpService::controller_down(const caf::actor_addr& controller) const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::find(dead_controllers_.begin(), dead_controllers_.end(), controller) !=
         dead_controllers_.end();
}

void SmallOpService::serve(const std::vector<std::byte>& bytes, const FastPuts* puts,
                           const std::shared_ptr<Owed>& owed,
                           protocol::fast_get::PartAssembly* parts, std::size_t message,
                           bool answer_here) {
  auto magic = protocol::fast_get::request_magic(bytes);
  if (magic.ok() && *magic == protocol::fast_get::kPartMagic) {
    if (!parts || !puts) {
      return owed->deliver(protocol::fast_get::encode_error(
          Status(Errc::protocol_error,
                 "volume '" + volume_id_ + "': a request in parts from a client never attached")));
    }
    std::vector<std::byte> whole;
    if (auto reply = parts->take(bytes, &whole)) return owed->deliver(*reply);
    // The last part: the request, served as if it came whole.
    return serve(whole, puts, owed, nullptr, message, answer_here);
  }
  if (!magic.ok() || *magic != protocol::fast_get::kCommitMagic) {
    return owed->deliver(answer_get(*table_, bytes, message));
  }
  auto refuse = [&](Status s) { owed->deliver(protocol::fast_get::encode_error(s)); };
  if (!puts) {
    return refuse(Status(Errc::unavailable,
                         "volume '" + volume_id_ + "': a commit from a client never attached"));
  }
  auto volume = caf::actor_cast<caf::actor>(puts->volume);
  if (!volume) return refuse(Status(Errc::unavailable, "volume '" + volume_id_ + "' stopped"));
  const caf::actor_addr controller = controller_for(*puts);
  owed->controller = controller;
  std::weak_ptr<Pending> pending = pending_;
  auto settle = [pending, owed](const std::vector<std::byte>& reply) {
    if (auto p = pending.lock()) {
      p->settle(owed, reply);
    } else {
      owed->deliver(reply);
    }
  };
  auto job = commit_job(bytes, volume_id_);
  if (!job.ok()) return refuse(job.status());
  if (job->request.id != 0) {
    // Sent again after its channel failed: answered as the first was.
    const Recent::Key key{puts->owner, job->request.id};
    if (recent_->join(key, owed)) return;
    owed->send = [recent = recent_, key,
                  send = std::move(owed->send)](std::vector<std::byte> reply) {
      recent->finish(key, reply);
      send(std::move(reply));
    };
  }
  job->owner = puts->owner;
  job->controller = controller;
  job->reply_limit = protocol::fast_get::kMaxAssembledBytes;  // a larger reply comes in parts
  job->answer_here = answer_here;
  const std::size_t records = job->request.records.size();
  job->done = std::make_shared<std::function<void(Result<protocol::fast_get::CommitDone>)>>(
      [settle, records](Result<protocol::fast_get::CommitDone> r) {
        if (r.ok() && r->versions.size() != records) {
          r = Status(Errc::internal, "a commit of " + std::to_string(records) +
                                         " records answered " + std::to_string(r->versions.size()) +
                                         " versions");
        }
        settle(r.ok() ? protocol::fast_get::encode_commit_done(*r)
                      : protocol::fast_get::encode_error(r.status()));
      });
  pending_->add(owed);
  // Checked once owed: a controller_gone() before add() found nothing to
  // answer, and the dead controller never would (unless a new one is
  // awaited: the actor holds the commit for it).
  if (!await_controller_.load() && controller_down(controller)) {
    return pending_->settle(owed, controller_down_reply());
  }
  caf::anon_send(volume, protocol::fast_commit_atom::value, std::move(job).value());
}

void SmallOpService::serve_framed(const std::byte* p, std::size_t n,
                                  std::function<void(std::vector<std::byte>)> send,
                                  bool answer_here) {
  auto owed = std::make_shared<Owed>();
  owed->send = std::move(send);
  if (n < kTokenBytes) {
    const std::string why = "volume '" + volume_id_ + "': a small request without its token";
    return owed->deliver(
        protocol::fast_get::encode(protocol::fast_get::ReplyStatus::error, why.data(), why.size()));
  }
  std::uint64_t token = 0;
  std::memcpy(&token, p, kTokenBytes);
  std::optional<Attached> attached;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tokens_.find(token);
    if (it != tokens_.end()) attached = it->second;
  }
  if (stop_.load()) {
    return owed->deliver(protocol::fast_get::encode_error(
        Status(Errc::unavailable, "volume '" + volume_id_ + "' stopped")));
  }
  if (attached) {
    // A reply larger than a small op's message goes in parts.
    owed->send = [send = std::move(owed->send),
                  parts = attached->parts](std::vector<std::byte> reply) {
      send(parts->first_part(std::move(reply), transports::kMaxSmallOpBytes));
    };
  }
  serve(std::vector<std::byte>(p + kTokenBytes, p + n), attached ? &attached->puts : nullptr, owed,
        attached ? attached->parts.get() : nullptr, transports::kMaxSmallOpBytes, answer_here);
}

namespace {

// A reply the calling thread waits for, moved to it, not copied; a reply
// dropped unsent (its Owed gone) ends the wait at once.
struct AwaitedReply {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<std::vector<std::byte>> bytes;
  bool dropped = false;
};
struct ReplySlot {
  std::shared_ptr<AwaitedReply> to;
  ~ReplySlot() {
    std::lock_guard<std::mutex> lock(to->mu);
    if (!to->bytes) to->dropped = true;
    to->cv.notify_all();
  }
};

}  // namespace

std::vector<std::byte> SmallOpService::serve_token(const std::byte* p, std::size_t n) {
  auto awaited = std::make_shared<AwaitedReply>();
  auto slot = std::make_shared<ReplySlot>();
  slot->to = awaited;
  serve_framed(
      p, n,
      [slot](std::vector<std::byte> bytes) {
        std::lock_guard<std::mutex> lock(slot->to->mu);
        slot->to->bytes = std::move(bytes);
        slot->to->cv.notify_all();
      },
      false);
  slot.reset();  // the Owed holds it while the request is served
  // The actor's commit at the controller has its own timeout, and stop()
  // answers what is owed: this bound only guards against a lost callback.
  std::unique_lock<std::mutex> lock(awaited->mu);
  if (!awaited->cv.wait_for(lock, request_timeout_ + std::chrono::seconds(5),
                            [&] { return awaited->bytes || awaited->dropped; })) {
    return protocol::fast_get::encode_error(
        Status(Errc::timeout, "volume '" + volume_id_ + "': a small request did not finish"));
  }
  if (!awaited->bytes) {
    return protocol::fast_get::encode_error(
        Status(Errc::unavailable, "volume '" + volume_id_ + "' dropped a small request"));
  }
  return std::move(*awaited->bytes);
}

bool SmallOpService::drain(const std::shared_ptr<Channel>& channel) {
  for (;;) {
    auto m = channel->ring->try_receive();
    if (!m.ok()) {
      if (m.status().code() != Errc::unavailable) {
        log::get("volume")->warn("volume '{}': fast path ring closed: {}", volume_id_,
                                 m.status().to_string());
      }
      return false;
    }
    if (!*m) return true;
    auto owed = std::make_shared<Owed>();
    std::weak_ptr<Channel> weak = channel;
    owed->send = [weak, tag = (*m)->tag](std::vector<std::byte> reply) {
      if (auto c = weak.lock()) c->reply(tag, std::move(reply));
    };
    serve((*m)->bytes, &channel->puts, owed, &channel->parts, channel->ring->slot_bytes());
  }
}

void SmallOpService::run() {
  internal::name_this_thread("ms.small_ops");
  using Clock = std::chrono::steady_clock;
  std::vector<std::shared_ptr<Channel>> rings;
  std::uint64_t seen_generation = ~std::uint64_t{0};
  auto next_check = Clock::now() + kLivenessPeriod;
  // Drops the rings in `gone` (their client closed, died or corrupted it).
  auto drop = [&](const std::vector<std::shared_ptr<Channel>>& gone) {
    if (gone.empty()) return;
    for (const auto& c : gone) {
      {
        std::lock_guard<std::mutex> lock(c->send_mu);
        c->closed = true;
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    rings_.erase(std::remove_if(rings_.begin(), rings_.end(),
                                [&](const auto& c) {
                                  return std::find(gone.begin(), gone.end(), c) != gone.end();
                                }),
                 rings_.end());
    generation_.fetch_add(1);
  };
  // Answers what waits on every ring; true when something did.
  auto poll = [&] {
    if (generation_.load() != seen_generation) {
      std::lock_guard<std::mutex> lock(mu_);
      rings = rings_;
      seen_generation = generation_.load();
    }
    bool any = false;
    std::vector<std::shared_ptr<Channel>> gone;
    for (const auto& c : rings) {
      if (!c->ring->has_message()) continue;
      any = true;
      if (!drain(c)) gone.push_back(c);
    }
    drop(gone);
    return any;
  };
  while (!stop_.load()) {
    const auto now = Clock::now();
    if (now >= next_check) {
      std::vector<std::shared_ptr<Channel>> gone;
      for (const auto& c : rings) {
        if (!c->ring->has_message() && !c->ring->alive().ok()) gone.push_back(c);
      }
      drop(gone);
      next_check = now + kLivenessPeriod;
    }
    if (poll()) continue;
    // The next request of a client that just had its answer comes soon:
    // spin for it. Not while the volume actor works on a put, unless the
    // host has cores to spare: on 2 vCPUs this thread would take the core
    // the actor (and the controller) need to answer it.
    const bool spin = pending_->outstanding.load() == 0 || spinning_host_;
    if (spin && internal::spin_until([&] { return stop_.load() || poll(); }, spin_)) continue;
    const std::uint32_t seq = bell_->seq();
    bell_->wait(seq, std::max<Clock::duration>(next_check - Clock::now(), Clock::duration::zero()),
                [&] { return stop_.load() || poll(); });
  }
}

}  // namespace meshstore::volume
