// The fast path for small gets and puts: the rings, read and put through
// the client's location cache.

#include "meshstore/client/fast_path.hpp"

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "meshstore/internal/thread_name.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/protocol/fast_get.hpp"
#include "meshstore/protocol/limits.hpp"
#include "meshstore/transports/shm/ring.hpp"
#include "meshstore/transports/transport.hpp"

namespace meshstore::client {

namespace {

// The least recently used entry of `map` (not empty), whose values count
// their use in `used`.
template <class Map>
typename Map::iterator least_recent(Map& map) {
  return std::min_element(map.begin(), map.end(), [](const auto& a, const auto& b) {
    return a.second.used < b.second.used;
  });
}

}  // namespace

// One channel to a volume and what a caller needs to use it, one request
// at a time: a ring (same host) or small operations (tcp's own connection,
// else actor messages; each request prefixed with the token the client
// attached with). A ring's
// volume is also read directly, through the shm transport.
struct FastPath::Channel {
  std::mutex mu;  // held for a whole request and its reply
  std::unique_ptr<transports::shm::Ring> ring;
  // Whether a request failed: then the volume may still be working on it,
  // so the channel is never used again (under `mu`).
  bool failed = false;
  std::shared_ptr<transports::Transport> shm;  // direct reads; null: none
  // The controller's process (FastPath::watch_controller), copied here so a
  // direct read needs no lock for it; null: not watched.
  std::shared_ptr<const transports::shm::ProcessWatch> controller;
  // Whether `entry` is read straight from this volume's shared memory.
  bool direct(const Entry& entry) const { return shm && !entry.place.empty(); }
  // Where `entry`'s object lies in that memory, with its tag; none (no tag)
  // when the controller's process exited, the volume's did, or the place
  // is not the volume's region.
  transports::Transport::TaggedBytes tagged(const Entry& entry) const {
    if (controller && !controller->alive()) return {};
    wire::RegionRef ref;
    ref.region_id = entry.object_id;
    ref.nbytes = entry.nbytes;
    ref.described.emplace("shm", entry.place);
    return shm->tagged_bytes(ref);
  }
  std::unique_ptr<transports::SmallOps> remote;
  std::uint64_t token = 0;                           // remote only
  std::shared_ptr<transports::Transport> transport;  // remote only: writes staged objects
  std::uint64_t next_tag = 1;
  std::vector<std::byte> request;  // reused encoding buffer (remote: after the token)

  // The largest message it carries (a larger request goes in parts).
  std::size_t max_request() const {
    return ring ? ring->slot_bytes() : transports::kMaxSmallOpBytes - sizeof(token);
  }
  // The largest object a get over it asks for: its reply is one message
  // (a ring slot; a small operation's 1 MiB across hosts).
  std::uint64_t max_get() const {
    return ring ? protocol::limits::kRingReadBytes
                : transports::kMaxSmallOpBytes - protocol::fast_get::kReplyHeaderBytes;
  }
  // Sends `request` and waits for its reply (the caller holds `mu`), in
  // parts when it or its reply is larger than a message
  // (fast_get::exchange_in_parts). `*sent` (when given) is false when the
  // request certainly did not reach the volume (a ring's send that failed
  // enqueues nothing); a remote request may have whenever it fails.
  Result<std::vector<std::byte>> exchange(std::chrono::steady_clock::time_point deadline,
                                          bool* sent = nullptr) {
    return protocol::fast_get::exchange_in_parts(
        request.data(), request.size(), max_request(),
        [&](const std::byte* p, std::size_t n, bool* left) {
          return exchange_one(p, n, deadline, left);
        },
        sent);
  }

 private:
  // One message and its reply; over a ring under a new tag, passing over
  // late replies to abandoned requests.
  Result<std::vector<std::byte>> exchange_one(const std::byte* p, std::size_t n,
                                              std::chrono::steady_clock::time_point deadline,
                                              bool* sent) {
    if (sent) *sent = true;
    if (remote) {
      framed.resize(sizeof(token) + n);
      std::memcpy(framed.data(), &token, sizeof(token));
      std::memcpy(framed.data() + sizeof(token), p, n);
      return remote->exchange(framed.data(), framed.size(), deadline);
    }
    const std::uint64_t tag = next_tag++;
    if (auto s = ring->send(tag, p, n, deadline); !s.ok()) {
      if (sent) *sent = false;
      return s;
    }
    for (;;) {
      auto m = ring->receive(deadline);
      if (!m.ok()) return m.status();
      if (m->tag == tag) return std::move(m->bytes);
    }
  }

  std::vector<std::byte> framed;  // token + request (remote)
};

void FastPath::set_home(const std::string& volume_id) {
  std::lock_guard<std::mutex> lock(mu_);
  home_ = volume_id;
}

void FastPath::set_home_connector(HomeConnector connector) {
  std::lock_guard<std::mutex> lock(mu_);
  home_connector_ = std::move(connector);
}

bool FastPath::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

bool FastPath::may_connect_home() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || !home_connector_) return false;
  return home_.empty() || rings_.count(home_) == 0;
}

Status FastPath::connect_home(std::chrono::milliseconds timeout) {
  HomeConnector connector;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) {
      return Status(Errc::shutdown, "the store was closed before the operation completed");
    }
    if (!home_connector_) return Status(Errc::internal, "no client to connect this store");
    connector = home_connector_;
  }
  return connector(timeout);
}

void FastPath::set_evictor(Evictor evictor) {
  std::lock_guard<std::mutex> lock(mu_);
  evictor_ = std::move(evictor);
}

bool FastPath::evict(const std::string& volume_id, std::uint64_t bytes,
                     std::chrono::milliseconds timeout) {
  Evictor evictor;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || !evictor_) return false;
    evictor = evictor_;
  }
  return evictor(volume_id, bytes, timeout);
}

void FastPath::set_stream_hooks(StreamHooks hooks) {
  std::lock_guard<std::mutex> lock(mu_);
  stream_hooks_ = std::move(hooks);
}

std::optional<FastPath::StreamHooks> FastPath::stream_hooks() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return std::nullopt;
  return stream_hooks_;
}

void FastPath::close_ring(const std::string& volume_id) {
  std::shared_ptr<Channel> doomed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = rings_.find(volume_id); it != rings_.end()) {
      doomed = std::move(it->second);
      rings_.erase(it);
    }
    // Staged there: gone with the volume.
    for (auto it = kept_.begin(); it != kept_.end();) {
      it = it->second.staging.volume_id == volume_id ? kept_.erase(it) : std::next(it);
    }
  }
  // Closed (unlinked) once the last caller using it lets go.
}

void FastPath::add_ring(const std::string& volume_id, std::unique_ptr<transports::shm::Ring> ring,
                        std::shared_ptr<transports::Transport> shm) {
  auto channel = std::make_shared<Channel>();
  channel->ring = std::move(ring);
  channel->shm = std::move(shm);
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;  // the channel (and its ring) goes here
  channel->controller = controller_;
  rings_[volume_id] = std::move(channel);
}

void FastPath::watch_controller(std::shared_ptr<const transports::shm::ProcessWatch> watch) {
  std::lock_guard<std::mutex> lock(mu_);
  controller_ = std::move(watch);
}

void FastPath::add_remote(const std::string& volume_id,
                          std::unique_ptr<transports::SmallOps> channel, std::uint64_t token,
                          std::shared_ptr<transports::Transport> transport) {
  auto c = std::make_shared<Channel>();
  c->remote = std::move(channel);
  c->token = token;
  c->transport = std::move(transport);
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  rings_[volume_id] = std::move(c);
}

bool FastPath::has_ring(const std::string& volume_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return rings_.count(volume_id) != 0;
}

FastPath::FastPath(std::shared_ptr<LocationCache> cache) : cache_(std::move(cache)) {
  std::random_device rd;
  next_commit_id_.store((std::uint64_t{rd()} << 32) ^ (std::uint64_t{rd()} << 8));
}

FastPath::~FastPath() { stop_waiting(); }

void FastPath::defer(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    if (!jobs_stopped_) {
      jobs_.push_back(std::move(job));
      if (!waiter_.joinable()) {
        waiter_ = std::thread([this] {
          internal::name_this_thread("ms.fast_wait");
          std::unique_lock<std::mutex> lock(jobs_mu_);
          for (;;) {
            jobs_cv_.wait(lock, [this] { return jobs_stopped_ || !jobs_.empty(); });
            if (jobs_.empty()) return;  // stopped, and every job ran
            auto next = std::move(jobs_.front());
            jobs_.pop_front();
            lock.unlock();
            next();
            next = nullptr;  // what it held goes before the next wait
            lock.lock();
          }
        });
      }
      jobs_cv_.notify_one();
      return;
    }
  }
  job();  // closed: on this thread
}

void FastPath::stop_waiting() {
  std::thread waiter;
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    jobs_stopped_ = true;
    waiter.swap(waiter_);
  }
  jobs_cv_.notify_one();
  if (waiter.joinable()) waiter.join();
}

void FastPath::close(std::chrono::milliseconds timeout) {
  // Deferred puts end first (they may keep stagings, given back below).
  stop_waiting();
  std::unordered_map<std::string, Kept> kept;
  {
    std::lock_guard<std::mutex> lock(mu_);
    kept.swap(kept_);
  }
  // Given back now rather than after the volume's orphan grace, all of a
  // volume's in one request.
  std::unordered_map<std::string, Staging> by_volume;
  for (auto& [under, k] : kept) {
    auto& s = by_volume[k.staging.volume_id];
    s.volume_id = k.staging.volume_id;
    s.regions.insert(s.regions.end(), k.staging.regions.begin(), k.staging.regions.end());
  }
  for (const auto& [volume_id, s] : by_volume) give_back(s, timeout);
  std::unordered_map<std::string, std::shared_ptr<Channel>> doomed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    doomed.swap(rings_);
  }
}

std::shared_ptr<FastPath::Channel> FastPath::channel_of(const std::string& key,
                                                        Entry* entry) const {
  auto e = cache_->entry(key);
  if (!e) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  auto r = rings_.find(e->volume_id);
  if (r == rings_.end()) return nullptr;
  *entry = std::move(*e);
  return r->second;
}

bool FastPath::servable(const std::string& key,
                        const std::function<bool(const Entry&)>& accept) const {
  Entry entry;
  auto channel = channel_of(key, &entry);
  return channel && accept(entry) && (channel->direct(entry) || entry.nbytes <= channel->max_get());
}

FastPath::Outcome FastPath::read_direct(const std::string& key, const Entry& entry,
                                        Channel& channel, const Consume& consume, bool to_device) {
  const TaggedObject object{entry.object_id, channel.tagged(entry)};
  if (!object.at.tag) return Outcome::miss;
  std::size_t changed = 0;
  const auto outcome = read_tagged(
      &object, 1,
      [&] {
        if (to_device && object.at.before_device_copy) object.at.before_device_copy();
        return consume(entry, object.at.data, entry.nbytes);
      },
      &changed);
  if (outcome == Outcome::stale) {
    cache_->erase_object(key, entry.object_id);
    lease_free_stale_.fetch_add(1, std::memory_order_relaxed);
    stale_.fetch_add(1, std::memory_order_relaxed);
  } else if (outcome == Outcome::miss) {
    misses_.fetch_add(1, std::memory_order_relaxed);
  } else {
    lease_free_reads_.fetch_add(1, std::memory_order_relaxed);
    direct_reads_.fetch_add(1, std::memory_order_relaxed);
    hits_.fetch_add(1, std::memory_order_relaxed);
  }
  return outcome;
}

FastPath::Outcome FastPath::read_together(
    const std::vector<std::string>& keys,
    const std::function<bool(std::size_t, const Entry&)>& accept, const ConsumeAt& consume) {
  // Counted as one lease-free read (as the actors count a volume's group
  // of objects), not as gets: hits, misses and stale count single keys.
  if (keys.empty()) return Outcome::miss;
  std::vector<Entry> entries(keys.size());
  std::vector<TaggedObject> objects(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    auto channel = channel_of(keys[i], &entries[i]);
    if (!channel || !channel->direct(entries[i]) || !accept(i, entries[i])) return Outcome::miss;
    objects[i] = TaggedObject{entries[i].object_id, channel->tagged(entries[i])};
    if (!objects[i].at.tag) return Outcome::miss;
  }
  // One snapshot: every tag names its object before the first copy and
  // after the last (a writer's replace clears the old tags before it
  // returns).
  std::size_t changed = 0;
  const auto outcome = read_tagged(
      objects.data(), objects.size(),
      [&] {
        for (std::size_t i = 0; i < objects.size(); ++i) {
          if (!consume(i, entries[i], objects[i].at.data, entries[i].nbytes)) return false;
        }
        return true;
      },
      &changed);
  if (outcome == Outcome::stale) {
    cache_->erase_object(keys[changed], entries[changed].object_id);
    lease_free_stale_.fetch_add(1, std::memory_order_relaxed);
  } else if (outcome == Outcome::hit) {
    lease_free_reads_.fetch_add(1, std::memory_order_relaxed);
    direct_batches_.fetch_add(1, std::memory_order_relaxed);
  }
  return outcome;
}

std::optional<FastPath::Pointer> FastPath::pointer_here(const std::string& prefix) {
  Entry entry;
  auto channel = channel_of(prefix, &entry);
  if (!channel || entry.points_to == 0 || !channel->direct(entry)) return std::nullopt;
  const auto at = channel->tagged(entry);
  if (!at.tag) return std::nullopt;
  if (at.tag->load(std::memory_order_acquire) != entry.object_id) {
    cache_->erase_object(prefix, entry.object_id);  // moved on: located afresh
    return std::nullopt;
  }
  return Pointer{entry.points_to, entry.version};
}

std::optional<FastPath::Pointer> FastPath::pointer_last_seen(const std::string& prefix) const {
  Entry entry;
  auto channel = channel_of(prefix, &entry);
  if (!channel || entry.points_to == 0 || channel->ring) return std::nullopt;
  return Pointer{entry.points_to, entry.version};
}

void FastPath::close_failed(const std::string& volume_id, const std::shared_ptr<Channel>& channel,
                            const Status& why) {
  if (why.code() != Errc::unavailable) {
    log::get("client")->warn("fast path to volume '{}' closed: {}", volume_id, why.to_string());
  }
  channel->failed = true;
  drop_ring(volume_id, channel);
  std::lock_guard<std::mutex> lock(mu_);
  failed_.insert(volume_id);  // the next call to it has the client open a new one
}

bool FastPath::take_reopen(const std::string& volume_id) {
  std::lock_guard<std::mutex> lock(mu_);
  return !closed_ && failed_.erase(volume_id) != 0;
}

void FastPath::drop_ring(const std::string& volume_id, const std::shared_ptr<Channel>& expected) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rings_.find(volume_id);
  if (it != rings_.end() && it->second == expected) rings_.erase(it);
}

FastPath::Outcome FastPath::read(const std::string& key,
                                 const std::function<bool(const Entry&)>& accept,
                                 const Consume& consume, std::chrono::milliseconds timeout,
                                 bool to_device) {
  Entry entry;
  auto channel = channel_of(key, &entry);
  if (!channel || !accept(entry)) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return Outcome::miss;
  }
  if (channel->direct(entry)) {
    auto direct = read_direct(key, entry, *channel, consume, to_device);
    if (direct != Outcome::miss) return direct;
  }
  if (entry.nbytes > channel->max_get()) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return Outcome::miss;
  }
  using Clock = std::chrono::steady_clock;
  std::unique_lock<std::mutex> lock(channel->mu);
  if (channel->failed) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return Outcome::miss;
  }
  protocol::fast_get::encode_into(protocol::fast_get::Request{entry.object_id, key},
                                  channel->request);
  const auto deadline = Clock::now() + timeout;
  // A ring that fails (the volume went down, a corrupt entry, no reply in
  // time) is dropped: the actor path then reports what happened, and a
  // later connection makes a new ring.
  auto fail = [&](const Status& s) {
    close_failed(entry.volume_id, channel, s);
    misses_.fetch_add(1, std::memory_order_relaxed);
    return Outcome::miss;
  };
  auto m = channel->exchange(deadline);
  if (!m.ok()) return fail(m.status());
  auto status = protocol::fast_get::reply_status(*m);
  if (!status.ok()) return fail(status.status());
  if (*status == protocol::fast_get::ReplyStatus::stale) {
    cache_->erase_object(key, entry.object_id);
    stale_.fetch_add(1, std::memory_order_relaxed);
    return Outcome::stale;
  }
  const std::byte* payload = m->data() + protocol::fast_get::kReplyHeaderBytes;
  const std::size_t n = m->size() - protocol::fast_get::kReplyHeaderBytes;
  if (*status == protocol::fast_get::ReplyStatus::error) {
    return fail(
        Status(Errc::protocol_error,
               "volume refused a get: " + std::string(reinterpret_cast<const char*>(payload), n)));
  }
  if (n != entry.nbytes) {
    return fail(Status(Errc::protocol_error, "'" + key + "': " + std::to_string(n) +
                                                 " bytes for an object of " +
                                                 std::to_string(entry.nbytes)));
  }
  lock.unlock();
  if (!consume(entry, payload, n)) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return Outcome::miss;
  }
  hits_.fetch_add(1, std::memory_order_relaxed);
  return Outcome::hit;
}

std::string FastPath::home() const {
  std::lock_guard<std::mutex> lock(mu_);
  return home_;
}

std::shared_ptr<transports::Transport> FastPath::writer_of(const std::string& volume_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto r = rings_.find(volume_id);
  if (r == rings_.end()) return nullptr;
  return r->second->ring ? r->second->shm : r->second->transport;
}

std::size_t FastPath::request_room(const std::string& volume_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto r = rings_.find(volume_id);
  return r == rings_.end() ? 0 : r->second->max_request();
}

Result<protocol::fast_get::CommitDone> FastPath::commit(const std::string& volume_id,
                                                        protocol::fast_get::CommitRequest& req,
                                                        std::chrono::milliseconds timeout,
                                                        bool* sent, bool* refused) {
  *sent = false;
  *refused = false;
  std::shared_ptr<Channel> channel;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto r = rings_.find(volume_id);
    if (closed_ || r == rings_.end()) {
      return Status(Errc::unavailable, "no channel to volume '" + volume_id + "'");
    }
    channel = r->second;
  }
  std::unique_lock<std::mutex> lock(channel->mu);
  if (channel->failed) return Status(Errc::unavailable, "the channel failed");
  // Identified where it can be sent again (resend): across hosts. A
  // ring's commit is not (the volume then keeps nothing for it).
  const bool resendable = channel->remote && channel->transport;
  while (resendable && req.id == 0)
    req.id = next_commit_id_.fetch_add(1, std::memory_order_relaxed);
  protocol::fast_get::encode_into(req, channel->request);
  if (channel->request.size() > protocol::fast_get::kMaxAssembledBytes) {
    return Status(Errc::unsupported, "a commit of " + std::to_string(channel->request.size()) +
                                         " bytes is over the " +
                                         std::to_string(protocol::fast_get::kMaxAssembledBytes) +
                                         " one request may take");
  }
  auto fail = [&](const Status& s) {
    close_failed(volume_id, channel, s);
    return s;
  };
  auto m = channel->exchange(std::chrono::steady_clock::now() + timeout, sent);
  if (!m.ok()) {
    const Status why = fail(m.status());
    if (!*sent || req.id == 0) return why;
    // It may have landed: the same request again, with its id.
    auto again = resend(volume_id, *channel, timeout);
    if (!again) return why;
    if (!again->ok()) {
      return Status(why.code(), why.message() + "; sent again: " + again->status().to_string());
    }
    m = std::move(*again);
  }
  const auto inlined = static_cast<std::size_t>(
      std::count_if(req.inlined.begin(), req.inlined.end(), [](const auto& b) { return b; }));
  auto done = protocol::fast_get::decode_commit_reply(*m, req.records.size(), inlined,
                                                      req.stage.size(), refused, req.sharded);
  // A reply that does not decode: the ring is not to be trusted.
  if (!done.ok() && !*refused) return fail(done.status());
  return done;
}

std::optional<Result<std::vector<std::byte>>> FastPath::resend(const std::string& volume_id,
                                                               const Channel& failed,
                                                               std::chrono::milliseconds timeout) {
  if (!failed.remote || !failed.transport) return std::nullopt;
  resent_commits_.fetch_add(1, std::memory_order_relaxed);
  // Its connect and handshake take at most the transport's request timeout.
  auto ops = failed.transport->open_small_ops();  // the volume knows the client by its token
  if (!ops.ok()) return std::nullopt;
  auto fresh = std::make_shared<Channel>();
  fresh->remote = std::move(ops).value();
  fresh->token = failed.token;
  fresh->transport = failed.transport;
  std::lock_guard<std::mutex> lock(fresh->mu);
  fresh->request = failed.request;
  auto m = fresh->exchange(std::chrono::steady_clock::now() + timeout);
  if (!m.ok()) return Result<std::vector<std::byte>>(m.status());
  {
    // The new connection is the volume's channel from now on.
    std::lock_guard<std::mutex> guard(mu_);
    if (!closed_ && rings_.count(volume_id) == 0) {
      rings_[volume_id] = fresh;
      failed_.erase(volume_id);
    }
  }
  return Result<std::vector<std::byte>>(std::move(m).value());
}

bool FastPath::note_layout(const std::string& under, const std::vector<std::uint64_t>& sizes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& n = noted_[under];
  const bool repeated = n.sizes == sizes;
  if (!repeated) n.sizes = sizes;
  n.used = ++clock_;
  constexpr std::size_t kMaxNoted = 64;
  if (noted_.size() > kMaxNoted) noted_.erase(least_recent(noted_));
  return repeated;
}

std::optional<FastPath::Staging> FastPath::take_staging(const std::string& under) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = kept_.find(under);
  if (it == kept_.end()) return std::nullopt;
  auto s = std::move(it->second.staging);
  kept_.erase(it);
  return s;
}

void FastPath::keep_staging(const std::string& under, Staging s,
                            std::chrono::milliseconds timeout) {
  std::vector<Staging> displaced;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || rings_.count(s.volume_id) == 0) {
      displaced.push_back(std::move(s));
    } else {
      auto it = kept_.find(under);
      if (it != kept_.end()) {
        displaced.push_back(std::move(it->second.staging));
        kept_.erase(it);
      }
      while (kept_.size() >= protocol::limits::kStagedAheadCount) {
        auto oldest = least_recent(kept_);
        displaced.push_back(std::move(oldest->second.staging));
        kept_.erase(oldest);
      }
      kept_[under] = Kept{std::move(s), ++clock_};
    }
  }
  for (const auto& d : displaced) give_back(d, timeout);
}

void FastPath::give_back(const Staging& s, std::chrono::milliseconds timeout) {
  for (std::size_t at = 0; at < s.regions.size(); at += protocol::fast_get::kMaxCommitRecords) {
    const std::size_t end = std::min(s.regions.size(), at + protocol::fast_get::kMaxCommitRecords);
    protocol::fast_get::CommitRequest req;
    for (std::size_t i = at; i < end; ++i) req.release.push_back(s.regions[i].region_id);
    bool sent = false, refused = false;
    auto done = commit(s.volume_id, req, timeout, &sent, &refused);
    if (done.ok()) continue;
    if (done.status().code() != Errc::unavailable) {
      log::get("client")->info("staged objects on volume '{}' not given back: {}", s.volume_id,
                               done.status().to_string());
    }
    return;  // the rest go with this client
  }
}

FastPath::Stats FastPath::stats() const {
  Stats s;
  s.hits = hits_.load(std::memory_order_relaxed);
  s.misses = misses_.load(std::memory_order_relaxed);
  s.stale = stale_.load(std::memory_order_relaxed);
  s.puts = puts_.load(std::memory_order_relaxed);
  s.lease_free_reads = lease_free_reads_.load(std::memory_order_relaxed);
  s.lease_free_stale = lease_free_stale_.load(std::memory_order_relaxed);
  s.direct_reads = direct_reads_.load(std::memory_order_relaxed);
  s.direct_batches = direct_batches_.load(std::memory_order_relaxed);
  s.state_dict_puts = state_dict_puts_.load(std::memory_order_relaxed);
  s.resent_commits = resent_commits_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  s.rings = rings_.size();
  return s;
}

}  // namespace meshstore::client
