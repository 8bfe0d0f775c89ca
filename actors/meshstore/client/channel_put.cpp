// Puts on the caller's thread over the client's channel: staged objects
// written, then one commit.

#include "meshstore/client/channel_put.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

#include "meshstore/client/channel_commit.hpp"
#include "meshstore/client/fast_path.hpp"
#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/protocol/fast_get.hpp"
#include "meshstore/protocol/limits.hpp"
#include "meshstore/transports/transport.hpp"

namespace meshstore::client {

namespace fg = protocol::fast_get;
using internal::cuda::on_device;

namespace {

// How often one put has the controller evict on a full volume before the
// volume's refusal (full) is its answer.
constexpr int kMaxEvictRounds = 64;

// The transport that writes to this client's volume (`*home`) over its
// channel; null when it has none (`*why`, when given, says why). With
// `connect`, a client without one (no volume chosen yet, or no channel
// open to it: FastPath::may_connect_home) has the client actor connect it
// first (FastPath::connect_home: the waiting thread only).
// `*may_connect`, when given, is FastPath::may_connect_home() as read
// together with the missing writer (FastPath::home_writer).
std::shared_ptr<transports::Transport> home_writer(FastPath& fast, std::string* home,
                                                   std::chrono::milliseconds timeout, bool connect,
                                                   Status* why = nullptr,
                                                   bool* may_connect = nullptr) {
  bool connectable = false;
  auto writer = fast.home_writer(home, &connectable);
  if (may_connect) *may_connect = connectable;
  if (writer) return writer;
  Status connected(Errc::unavailable, "none is open");
  if (connect || fast.closed()) {
    connected = fast.connect_home(timeout);  // answers shutdown once closed
    writer = fast.home_writer(home, &connectable);
    if (writer) return writer;
  }
  if (why) *why = connected.ok() ? Status(Errc::unavailable, "it closed at once") : connected;
  return nullptr;
}

// Whether `c`'s layout repeats the last put's under its slot: noted once
// per call in `*repeated` (its tries after an eviction or a conflict are
// not puts of their own, and must not make a put once look repeated).
bool layout_repeats(FastPath& fast, const ChannelPut& c, const std::vector<std::uint64_t>& sizes,
                    std::optional<bool>* repeated) {
  if (!*repeated) *repeated = fast.note_layout(c.slot, sizes);
  return **repeated;
}

using Attempt = std::optional<Result<std::vector<std::uint64_t>>>;

// One try of put_over_channel: nullopt when nothing was committed, and
// `refusal` says why when that is the put's answer (the volume refused it,
// its bytes could not be read or written into the staged objects, the put
// cannot be one commit, no channel to be had), `unsent` when its channel
// failed before the commit left (a new one may take it). put_over_channel
// tries again for making room on a full volume and for a new channel.
class PutTry {
 public:
  PutTry(FastPath& fast, const ChannelPut& c, std::chrono::milliseconds timeout, bool* defer,
         const std::shared_ptr<internal::CallGuard>& guard, std::optional<bool>* repeated)
      : fast_(fast), c_(c), timeout_(timeout), defer_(defer), guard_(guard), repeated_(repeated) {}

  Status refusal;
  Status unsent;

  Attempt run() {
    if (!check_items() || !find_channel()) return std::nullopt;
    // Bytes that fit one request travel in it: how they are copied, not a
    // route (the same commit either way). Objects kept in GPU memory
    // (cuda-ipc) are staged there, never inline.
    device_objects_ = writer_->capabilities().device_memory;
    to_gpu_ = device_objects_ && std::any_of(c_.items.begin(), c_.items.end(), [](auto& i) {
                return !i.gather && on_device(i.view);
              });
    if (!to_gpu_ && largest_ <= fg::kMaxObjectBytes &&
        total_ + record_room(c_, home_) <= fast_.request_room(home_)) {
      if (auto done = put_inline(fast_, c_, home_, timeout_, guard_, &refusal, &unsent)) {
        return done;
      }
      if (!refusal.ok() || !unsent.ok()) return std::nullopt;
    }
    return staged();
  }

 private:
  // The items as the channel takes them; their sizes, total and largest.
  bool check_items() {
    if (c_.items.empty() || c_.staged_items.size() != c_.staged_regions.size() ||
        c_.lent_items.size() != c_.lent_regions.size()) {
      return refuse(Errc::internal,
                    "a put of no items, or of staged or lent items without objects");
    }
    const std::size_t keys = c_.items.size() + c_.staged_items.size() + c_.lent_items.size();
    if (keys > fg::kMaxCommitRecords) {
      return refuse(Errc::invalid_argument, std::to_string(keys) +
                                                " keys, more than one commit takes (" +
                                                std::to_string(fg::kMaxCommitRecords) + ")");
    }
    sizes_.reserve(c_.items.size());
    for (const auto& item : c_.items) {
      const auto& v = item.view;
      // A strided GPU view is packed on its device before it comes here.
      if ((item.slice && !c_.sharded) || (!item.gather && !v.is_contiguous() && on_device(v))) {
        return refuse(Errc::internal, "'" + item.key +
                                          "': a shard outside a sharded put, or a strided view "
                                          "in GPU memory, reached the channel's put");
      }
      total_ += v.nbytes();
      largest_ = std::max(largest_, v.nbytes());
      sizes_.push_back(v.nbytes());
    }
    return true;
  }

  // The channel to this client's volume. None yet (a client's first put,
  // or its channel failed): the waiting thread has the client pick its
  // volume and open the channel, then puts it here (as the same put: its
  // layout noted there). Where it cannot, why is the answer.
  bool find_channel() {
    Status no_channel;
    bool may_connect = false;
    writer_ = home_writer(fast_, &home_, timeout_, defer_ == nullptr, &no_channel, &may_connect);
    if (!writer_) {
      if (defer_ && may_connect) {
        *defer_ = true;
      } else if (no_channel.code() == Errc::shutdown) {
        refusal = no_channel;
      } else {
        refusal = no_channel.with_context("no channel to this client's volume");
      }
      return false;
    }
    if (!c_.staged_items.empty() && c_.staged_on != home_) {
      return refuse(Errc::unavailable, "the staged memory lies on volume '" + c_.staged_on +
                                           "', no longer this client's volume ('" + home_ + "')");
    }
    return true;
  }

  // The put written into objects the volume staged for it, then one
  // commit.
  Attempt staged() {
    // What the volume stages, keys for its messages; GPU memory for a GPU
    // tensor where the transport keeps objects there (cuda-ipc).
    layout_.reserve(c_.items.size());
    for (const auto& item : c_.items) {
      const bool gpu = device_objects_ && !item.gather && on_device(item.view);
      layout_.push_back(
          fg::StageSpec{item.key, item.view.nbytes(),
                        gpu ? static_cast<std::int32_t>(item.view.device().index) : -1});
    }
    // Sent rather than copied (tcp): the caller's thread waits for the
    // network only as long as a put it keeps staged ahead could take; a
    // larger put is sent from the client's waiting thread (FastPath::defer).
    if (!writer_->capabilities().maps_memory && total_ > protocol::limits::kStagedAheadBytes &&
        defer_) {
      *defer_ = true;
      return std::nullopt;
    }
    // A layout put again (a trainer's every step) is worth staging ahead,
    // within bounds: its next put then writes at once and commits in one
    // round trip. (Not GPU objects: a staging is matched by its sizes
    // alone. Not a commit of objects written in place: those come staged
    // already.)
    keep_ = layout_repeats(fast_, c_, sizes_, repeated_) &&
            total_ <= protocol::limits::kStagedAheadBytes && !to_gpu_ && c_.staged_items.empty();
    if (!commit_fits() || !obtain_staging()) return std::nullopt;
    if (guard_ && !guard_->enter()) {
      unused();
      return cancelled(c_);
    }
    open_stream();
    const Status written = write_staged(writer_, c_.items, staging_->regions, [&](std::size_t i) {
      if (stream_ && in_stream_[i] != SIZE_MAX && c_.items[i].view.nbytes() > 0) {
        stream_->progress(c_.stream_key, {in_stream_[i]});
      }
    });
    if (guard_) guard_->leave();
    if (!written.ok()) {
      // Nothing committed: the write's failure is the put's answer
      // (put_over_channel), the objects go back or stay for the next put.
      abort_stream("a write into its staged objects failed: " + written.to_string());
      unused();
      refusal = written;
      return std::nullopt;
    }
    if (guard_ && !guard_->begin_commit()) {
      abort_stream("cancelled");
      unused();
      return cancelled(c_);
    }
    return commit();
  }

  // The items' records, each written into its object in `regions`.
  std::vector<wire::KeyRecord> records_for(const std::vector<wire::RegionRef>& regions) const {
    std::vector<wire::KeyRecord> records;
    records.reserve(c_.items.size());
    for (std::size_t i = 0; i < c_.items.size(); ++i) {
      records.push_back(put_record(c_.items[i], &regions[i], home_, c_.groups[i]));
    }
    return records;
  }

  // The commit of the items written into `regions` (after any objects
  // written in place: request_for's records, none of them inline).
  fg::CommitRequest commit_of(const std::vector<wire::RegionRef>& regions) const {
    auto req = request_for(c_);
    auto records = records_for(regions);
    req.records.insert(req.records.end(), std::make_move_iterator(records.begin()),
                       std::make_move_iterator(records.end()));
    if (!req.inlined.empty()) req.inlined.resize(req.records.size());
    return req;
  }

  // Whether the records as the commit will carry them fit one request (in
  // parts when larger than a message).
  bool commit_fits() {
    wire::RegionRef widest;
    widest.region_id = ~std::uint64_t{0};
    widest.described.emplace("shm", std::string(96, 'x'));  // longer than a segment's place
    auto probe = commit_of(std::vector<wire::RegionRef>(c_.items.size(), widest));
    probe.stage = layout_;
    probe.release.assign(layout_.size(), ~std::uint64_t{0});
    std::vector<std::byte> bytes;
    fg::encode_into(probe, bytes);
    if (bytes.size() <= fg::kMaxAssembledBytes) return true;
    return refuse(Errc::invalid_argument, "its commit takes " + std::to_string(bytes.size()) +
                                              " bytes of records, more than one request takes (" +
                                              std::to_string(fg::kMaxAssembledBytes) + ")");
  }

  // The objects this put writes into: kept from the last put of its layout,
  // else staged with one request (which gives a kept staging of another
  // layout back).
  bool obtain_staging() {
    fg::CommitRequest req;
    staging_ = fast_.take_staging(c_.slot);
    if (staging_ && (to_gpu_ || staging_->volume_id != home_ || staging_->sizes != sizes_)) {
      if (staging_->volume_id == home_) {
        for (const auto& r : staging_->regions) req.release.push_back(r.region_id);
      } else {
        fast_.give_back(*staging_, timeout_);
      }
      staging_.reset();
    }
    if (staging_) return true;
    req.stage = layout_;
    bool sent = false, refused = false;
    auto got = fast_.commit(home_, req, timeout_, &sent, &refused);
    // Nothing committed: put_over_channel answers a refusal, or tries a
    // new channel (a stage that failed on its way committed nothing).
    if (!got.ok()) {
      (refused ? refusal : unsent) = got.status();
      return false;
    }
    if (got->staged.size() != layout_.size()) {
      return refuse(Errc::protocol_error, "volume '" + home_ + "' staged " +
                                              std::to_string(got->staged.size()) + " objects for " +
                                              std::to_string(layout_.size()));
    }
    staging_ = FastPath::Staging{home_, sizes_, std::move(got->staged)};
    return true;
  }

  // Announced as a stream: readers copy each object as soon as it is
  // written (the records of the state dict `stream_key`, written in the
  // order of the items); the commit ends it, a failure aborts it.
  void open_stream() {
    in_stream_.assign(c_.items.size(), SIZE_MAX);
    if (c_.stream_manifest.empty() || !c_.staged_items.empty() || !worth_streaming(c_.items)) {
      return;
    }
    stream_ = fast_.stream_hooks();
    if (!stream_) return;
    std::vector<wire::KeyRecord> records;
    std::vector<std::uint64_t> filled;
    auto all = records_for(staging_->regions);
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (all[i].group != c_.stream_key) continue;  // a publish's pointer
      in_stream_[i] = records.size();
      if (c_.items[i].view.nbytes() == 0) filled.push_back(records.size());
      records.push_back(std::move(all[i]));
    }
    if (!stream_->open(c_.stream_key, c_.stream_manifest, records, filled, timeout_)) {
      stream_.reset();
    }
  }

  void abort_stream(const std::string& why) {
    if (stream_) stream_->abort(c_.stream_key, c_.what + ": " + why);
  }

  // The staging not used after all: kept for the next put, or given back.
  void unused() {
    if (keep_) return fast_.keep_staging(c_.slot, std::move(*staging_), timeout_);
    fast_.give_back(*staging_, timeout_);
  }

  Attempt commit() {
    auto req = commit_of(staging_->regions);
    if (keep_) req.stage = layout_;
    bool sent = false, refused = false;
    auto got = fast_.commit(home_, req, timeout_, &sent, &refused);
    if (!got.ok()) {
      abort_stream(got.status().to_string());
      // Refused or never sent: nothing committed, and the objects are still
      // this client's (put_over_channel answers a refusal, or tries again).
      if (!sent || refused) {
        (refused ? refusal : unsent) = got.status();
        unused();
        return std::nullopt;
      }
      // The ring failed with the commit on its way: committed or not is
      // unknown (its objects then belong to the keys, or go with this client).
      return Result<std::vector<std::uint64_t>>(got.status().with_context(c_.what));
    }
    learn_committed(fast_, c_, req.records, got->versions);
    if (got->staged.size() == layout_.size() && keep_) {
      fast_.keep_staging(c_.slot, FastPath::Staging{home_, sizes_, std::move(got->staged)},
                         timeout_);
    }
    return Result<std::vector<std::uint64_t>>(std::move(got->versions));
  }

  bool refuse(Errc code, std::string why) {
    refusal = Status(code, std::move(why));
    return false;
  }

  FastPath& fast_;
  const ChannelPut& c_;
  const std::chrono::milliseconds timeout_;
  bool* const defer_;
  const std::shared_ptr<internal::CallGuard>& guard_;
  std::optional<bool>* const repeated_;
  std::uint64_t total_ = 0, largest_ = 0;
  std::vector<std::uint64_t> sizes_;  // what a staging is matched by
  std::string home_;
  std::shared_ptr<transports::Transport> writer_;
  bool device_objects_ = false, to_gpu_ = false, keep_ = false;
  std::vector<fg::StageSpec> layout_;
  std::optional<FastPath::Staging> staging_;
  std::optional<FastPath::StreamHooks> stream_;
  std::vector<std::size_t> in_stream_;  // each item's index among the stream's records
};

}  // namespace

std::optional<Result<std::vector<std::uint64_t>>> put_over_channel(
    FastPath& fast, const ChannelPut& c, std::chrono::milliseconds timeout, bool* defer,
    const std::shared_ptr<internal::CallGuard>& guard) {
  Status refusal, unsent;
  std::optional<bool> repeated;
  // One try, and more while a full volume (with LRU eviction) makes room:
  // the controller evicts there and the put tries again, as long as each
  // round evicts something (bounded: the volume holds finitely many keys).
  auto attempt = [&](const ChannelPut& put) {
    auto once = [&] {
      PutTry t(fast, put, timeout, defer, guard, &repeated);
      auto done = t.run();
      refusal = t.refusal;
      unsent = t.unsent;
      return done;
    };
    auto done = once();
    if (done || refusal.code() != Errc::out_of_capacity) return done;
    std::uint64_t bytes = 0;
    for (const auto& item : put.items) bytes += item.view.nbytes();
    const std::string home = fast.home();
    for (int round = 0; round < kMaxEvictRounds && !done && !home.empty() &&
                        refusal.code() == Errc::out_of_capacity && fast.evict(home, bytes, timeout);
         ++round) {
      done = once();
    }
    return done;
  };
  auto done = attempt(c);
  const bool deferred = defer && *defer;
  if (!done && !deferred && refusal.ok() && !unsent.ok() && fast.may_connect_home()) {
    // There was no channel, or it failed under this put before its commit
    // left: nothing was committed, and the client opens a new channel,
    // from the waiting thread, for the put to take.
    if (defer) {
      *defer = true;
      return std::nullopt;
    }
    done = attempt(c);
  }
  if (!done && refusal.code() == Errc::conflict && c.refusals_final && !c.cache_fenced.empty()) {
    // Another writer moved a key on since this client saw it: put over it,
    // unfenced, as a put of a key this client never saw would.
    ChannelPut unfenced = c;
    for (auto i : c.cache_fenced) unfenced.items[i].expect_version.reset();
    unfenced.cache_fenced.clear();
    done = attempt(unfenced);
  }
  if (done || (defer && *defer) || !c.refusals_final) return done;
  // Nothing was committed: a refusal, or no channel to be had, is the
  // answer. The objects written in place are still this client's.
  if (!c.staged_items.empty()) {
    fast.give_back(FastPath::Staging{c.staged_on, {}, c.staged_regions}, timeout);
  }
  Status why = !refusal.ok() ? refusal
               : !unsent.ok()
                   ? unsent.with_context("the channel to volume '" + fast.home() + "' failed")
                   : Status(Errc::internal, "the channel's put committed nothing and said no why");
  return Result<std::vector<std::uint64_t>>(why.with_context(c.what));
}

Result<StagedRegions> stage_over_channel(FastPath& fast, const std::vector<std::string>& keys,
                                         const std::vector<std::uint64_t>& sizes,
                                         std::chrono::milliseconds timeout) {
  std::string home;
  Status why;
  auto writer = home_writer(fast, &home, timeout, true, &why);
  if (!writer) {
    return why.code() == Errc::shutdown ? why
                                        : why.with_context("no channel to this client's volume");
  }
  if (!writer->capabilities().maps_memory) {
    return Status(Errc::unsupported, "volume '" + home + "' is reached over " +
                                         std::string(writer->name()) +
                                         ", which cannot map its memory into this process");
  }
  FastPath::Staging all{home, sizes, {}};
  auto fail = [&](const Status& s) {
    if (!all.regions.empty()) fast.give_back(all, timeout);
    return s;
  };
  constexpr std::size_t kPerRequest = fg::kMaxCommitRecords;
  for (std::size_t at = 0; at < keys.size(); at += kPerRequest) {
    fg::CommitRequest req;
    for (std::size_t i = at; i < std::min(keys.size(), at + kPerRequest); ++i) {
      req.stage.push_back(fg::StageSpec{keys[i], sizes[i], -1});
    }
    bool sent = false, refused = false;
    auto got = fast.commit(home, req, timeout, &sent, &refused);
    if (!got.ok()) return fail(got.status().with_context("stage at volume '" + home + "'"));
    all.regions.insert(all.regions.end(), got->staged.begin(), got->staged.end());
    if (got->staged.size() != req.stage.size()) {
      return fail(Status(Errc::protocol_error,
                         "volume '" + home + "' staged " + std::to_string(got->staged.size()) +
                             " objects for " + std::to_string(req.stage.size()) + " keys"));
    }
  }
  StagedRegions out;
  out.volume_id = home;
  for (const auto& r : all.regions) {
    auto mem = writer->map_writable(r);
    if (!mem.ok()) return fail(mem.status());
    out.memory.push_back(std::move(mem).value());
  }
  out.regions = std::move(all.regions);
  return out;
}

}  // namespace meshstore::client
