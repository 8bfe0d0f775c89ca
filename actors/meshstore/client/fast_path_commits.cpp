// FastPath's commits over a channel, a failed one's commit sent again, and
// the objects kept staged for a layout put again.

#include <algorithm>
#include <utility>
#include <vector>

#include "meshstore/client/fast_path.hpp"
#include "meshstore/client/fast_path_channel.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/protocol/fast_get.hpp"
#include "meshstore/protocol/limits.hpp"

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

}  // namespace meshstore::client
