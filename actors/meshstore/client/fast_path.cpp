// The fast path for small gets and puts: the channels, and reads through
// the client's location cache (commits and staging: fast_path_commits.cpp).

#include "meshstore/client/fast_path.hpp"

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "meshstore/client/fast_path_channel.hpp"
#include "meshstore/internal/thread_name.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/protocol/fast_get.hpp"
#include "meshstore/protocol/limits.hpp"
#include "meshstore/transports/shm/ring.hpp"
#include "meshstore/transports/transport.hpp"

namespace meshstore::client {

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
  return may_connect_home_locked();
}

bool FastPath::may_connect_home_locked() const {
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
  return channel && accept(entry) &&
         (channel->direct(entry) || entry.nbytes <= channel->max_get() ||
          channel->bulk_reads(entry));
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
    const std::function<bool(std::size_t, const Entry&)>& accept, const ConsumeAll& consume) {
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
        std::vector<const std::byte*> data(objects.size());
        for (std::size_t i = 0; i < objects.size(); ++i) data[i] = objects[i].at.data;
        return consume(entries, data);
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
                                 bool to_device, const Place& place) {
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
    if (channel->bulk_reads(entry)) return read_bulk(key, entry, channel, consume, place, timeout);
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

FastPath::Outcome FastPath::read_bulk(const std::string& key, const Entry& entry,
                                      const std::shared_ptr<Channel>& channel,
                                      const Consume& consume, const Place& place,
                                      std::chrono::milliseconds timeout) {
  namespace fg = protocol::fast_get;
  auto outcome = [&](Outcome o) {
    (o == Outcome::hit     ? hits_
     : o == Outcome::stale ? stale_
                           : misses_)
        .fetch_add(1, std::memory_order_relaxed);
    if (o == Outcome::stale) cache_->erase_object(key, entry.object_id);
    return o;
  };
  {
    std::unique_lock<std::mutex> lock(channel->mu);
    if (channel->failed) return outcome(Outcome::miss);
    fg::encode_into(fg::Request{entry.object_id, key, true}, channel->request);
    auto m = channel->exchange(std::chrono::steady_clock::now() + timeout);
    auto status = m.ok() ? fg::reply_status(*m) : Result<fg::ReplyStatus>(m.status());
    if (status.ok() && *status == fg::ReplyStatus::stale) return outcome(Outcome::stale);
    if (status.ok() && (*status != fg::ReplyStatus::ok || m->size() != fg::kReplyHeaderBytes)) {
      status =
          Status(Errc::protocol_error, "volume answered a check of '" + key + "' with status " +
                                           std::to_string(static_cast<int>(*status)) + " and " +
                                           std::to_string(m->size()) + " bytes");
    }
    if (!status.ok()) {
      close_failed(entry.volume_id, channel, status.status());
      return outcome(Outcome::miss);
    }
  }
  // The object was committed under `key` and current at the check; its
  // bytes never change, and its region (id = object id) is found until it
  // is dropped, so the read below is that object's or fails.
  std::vector<std::byte> own;
  std::byte* dst = place ? place(entry) : nullptr;
  if (dst == nullptr) {
    own.resize(entry.nbytes);
    dst = own.data();
  }
  wire::RegionRef ref;
  ref.region_id = entry.object_id;
  ref.nbytes = entry.nbytes;
  auto read = channel->transport->read(ref, 0, dst, entry.nbytes).get();
  if (!read.ok()) {
    // Dropped since the check: located afresh. Else the actors' path says.
    return outcome(read.status().code() == Errc::not_found ? Outcome::stale : Outcome::miss);
  }
  return outcome(consume(entry, dst, entry.nbytes) ? Outcome::hit : Outcome::miss);
}

std::string FastPath::home() const {
  std::lock_guard<std::mutex> lock(mu_);
  return home_;
}

std::shared_ptr<transports::Transport> FastPath::home_writer(std::string* home,
                                                             bool* may_connect) const {
  std::lock_guard<std::mutex> lock(mu_);
  *home = home_;
  std::shared_ptr<transports::Transport> writer;
  if (auto r = rings_.find(home_); !home_.empty() && r != rings_.end()) {
    writer = r->second->ring ? r->second->shm : r->second->transport;
  }
  *may_connect = !writer && may_connect_home_locked();
  return writer;
}

std::size_t FastPath::request_room(const std::string& volume_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto r = rings_.find(volume_id);
  return r == rings_.end() ? 0 : r->second->max_request();
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
  for (const auto& [volume, c] : rings_) {
    s.channels[c->ring ? "shm" : c->transport ? std::string(c->transport->name()) : "actor"] += 1;
  }
  return s;
}

}  // namespace meshstore::client
