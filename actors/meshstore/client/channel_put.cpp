// Puts on the caller's thread over the client's channel: staged objects
// written, then one commit.

#include "meshstore/client/channel_put.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <string_view>
#include <utility>
#include <vector>

#include "meshstore/client/device_pieces.hpp"
#include "meshstore/client/fast_path.hpp"
#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/protocol/fast_get.hpp"
#include "meshstore/protocol/limits.hpp"
#include "meshstore/transports/copy_engine.hpp"
#include "meshstore/transports/transport.hpp"

namespace meshstore::client {

namespace fg = protocol::fast_get;
using internal::cuda::on_device;

namespace {

// The record a put commits for `item` (its group `group`, "" for none):
// one shard, the object `region` on `volume_id` (null: the volume fills
// it in, for bytes sent inline), with its shm place for readers on that
// host.
wire::KeyRecord put_record(const PutItem& item, const wire::RegionRef* region,
                           const std::string& volume_id, const std::string& group) {
  wire::KeyRecord r;
  r.key = item.key;
  r.kind = item.kind;
  r.object_format = item.object_format;
  r.expect_version = item.expect_version;
  r.points_to = item.points_to;
  r.dtype = item.view.dtype();
  r.shape = item.slice ? item.slice->global_shape() : item.view.shape();
  r.group = group;
  std::string place;  // for readers on the volume's host (lease-free reads)
  if (region) {
    auto shm = region->described.find("shm");
    if (shm != region->described.end()) place = shm->second;
  }
  r.shards.push_back(wire::ShardRecord{item.slice ? *item.slice : TensorSlice::full(r.shape),
                                       volume_id, region ? region->region_id : 0,
                                       region ? region->nbytes : item.view.nbytes(), item.replicas,
                                       item.checksum, std::move(place)});
  return r;
}

// Whether a put writing `items` is worth announcing as a stream: only when
// the objects besides its largest hold enough bytes for a reader to copy
// while the put still writes (limits::kStreamMinOverlapBytes).
bool worth_streaming(const std::vector<PutItem>& items) {
  std::uint64_t total = 0, largest = 0;
  for (const auto& item : items) {
    total += item.view.nbytes();
    largest = std::max(largest, item.view.nbytes());
  }
  return total - largest >= protocol::limits::kStreamMinOverlapBytes;
}

// Writes each of `items` into the object staged for it (`regions`, in
// order) on the caller's thread: copied (a strided host tensor packed)
// into the volume's memory where `writer` maps it (shm), else sent with it
// (tcp; a strided tensor packed first), all at once, waiting
// for every send (the transport's own deadline bounds each). GPU memory
// takes one CUDA copy through the mapping (shm), else pipelined pieces
// through page-locked memory (client::write_from_device). The first
// error when one could not be written, naming its key; then the objects
// hold nothing of use.
// `filled(i)`, when given, is told each item written (a stream's progress).
Status write_staged(const std::shared_ptr<transports::Transport>& writer,
                    const std::vector<PutItem>& items, const std::vector<wire::RegionRef>& regions,
                    const std::function<void(std::size_t)>& filled = {}) {
  const auto caps = writer->capabilities();
  std::vector<std::vector<std::byte>> gathered;  // sent from here
  gathered.reserve(items.size());
  std::vector<std::pair<std::size_t, Future<void>>> sends;
  Status failed;
  auto fail = [&](std::size_t i, const Status& s) {
    if (failed.ok()) failed = s.with_context("write '" + items[i].key + "'");
  };
  for (std::size_t i = 0; i < items.size() && failed.ok(); ++i) {
    const auto& item = items[i];
    const std::uint64_t n = item.view.nbytes();
    if (regions[i].nbytes != n) {
      fail(i,
           Status(Errc::protocol_error, "the volume staged " + std::to_string(regions[i].nbytes) +
                                            " bytes for " + std::to_string(n)));
      break;
    }
    const std::byte* src = static_cast<const std::byte*>(item.view.data());
    if (!item.gather && on_device(item.view)) {
      if (n == 0) continue;
      sends.emplace_back(i, caps.device_copies
                                ? writer->write(regions[i], 0, src, n)
                                : client::write_from_device(writer, regions[i], src, n));
      continue;
    }
    const bool strided = !item.gather && !item.view.is_contiguous();
    if (caps.maps_memory) {
      auto mem = writer->map_writable(regions[i]);
      if (!mem.ok()) {
        fail(i, mem.status());
      } else if (item.gather) {
        if (auto s = fill_gathered_here(*item.gather, mem->get(), n); !s.ok()) fail(i, s);
      } else if (strided) {
        pack_to(item.view, mem->get());  // packed straight into the object
      } else if (n > 0) {
        transports::CopyEngine::instance().copy_here(mem->get(), src, n);
      }
      if (failed.ok() && filled) filled(i);
      continue;
    }
    if (item.gather || strided) {
      gathered.emplace_back(n);
      if (strided) {
        pack_to(item.view, gathered.back().data());
      } else if (auto s = fill_gathered_here(*item.gather, gathered.back().data(), n); !s.ok()) {
        fail(i, s);
      }
      src = gathered.back().data();
    }
    if (failed.ok() && n > 0) {
      sends.emplace_back(i, writer->write(regions[i], 0, src, n));
    } else if (failed.ok() && filled) {
      filled(i);
    }
  }
  for (const auto& [i, f] : sends) {  // every send ends before its bytes go
    auto sent = f.get();
    if (!sent.ok()) {
      fail(i, sent.status());
    } else if (failed.ok() && filled) {
      filled(i);
    }
  }
  return failed;
}

// What a commit's records and prefixes take beside the objects' bytes, at
// most (a record's encoding: its key and shape, the volume's id, a few
// fixed fields; the estimate only picks how the bytes travel: a request
// that does not fit after all is not sent).
std::size_t record_room(const ChannelPut& c, const std::string& volume_id) {
  std::size_t n = 64;
  for (const auto* items : {&c.items, &c.staged_items, &c.lent_items}) {
    for (const auto& item : *items) {
      n += 128 + 2 * item.key.size() + 16 * item.view.shape().size() + volume_id.size();
    }
  }
  for (const auto& p : c.prefixes) n += 8 + p.size();
  for (const auto& m : c.members) n += 4 + m.size();
  return n + c.group.size();
}

// A commit request for `c`: what it commits besides its items' records
// (the objects written in place first, which come with none of their bytes).
fg::CommitRequest request_for(const ChannelPut& c) {
  fg::CommitRequest req;
  for (std::size_t i = 0; i < c.staged_items.size(); ++i) {
    req.records.push_back(
        put_record(c.staged_items[i], &c.staged_regions[i], c.staged_on, c.staged_group));
  }
  for (std::size_t i = 0; i < c.lent_items.size(); ++i) {
    req.records.push_back(
        put_record(c.lent_items[i], &c.lent_regions[i], c.lent_on, c.staged_group));
  }
  if (!req.records.empty()) req.inlined.assign(req.records.size(), std::nullopt);
  req.prefixes = c.prefixes;
  req.sharded = c.sharded;
  req.group = c.group;
  req.members = c.members;
  req.layout = c.layout;
  return req;
}

// `c` committed `records` at `versions`: counted, and each record in the
// client's location cache, so this thread's next read sees it.
void learn_committed(FastPath& fast, const ChannelPut& c, std::vector<wire::KeyRecord>& records,
                     const std::vector<std::uint64_t>& versions) {
  fast.count_commit(c.whole_key);
  if (c.sharded) {
    // A shard is not its key's record: the key is located when read.
    for (const auto& r : records) fast.cache().erase(r.key);
    if (!c.group.empty()) fast.cache().erase_under(c.group);
    return;
  }
  for (std::size_t i = 0; i < records.size(); ++i) {
    records[i].version = versions[i];
    fast.cache().put(records[i]);
  }
}

// How often one put has the controller evict on a full volume before the
// volume's refusal (full) is its answer.
constexpr int kMaxEvictRounds = 64;

Result<std::vector<std::uint64_t>> cancelled(const ChannelPut& c) {
  return Status(Errc::cancelled, c.what + ": cancelled");
}

// The put in one request, its objects' bytes inline: the volume stages
// them and commits them (docs/architecture.md, "Puts on the caller's
// thread"). nullopt when it did not fit one request after all (nothing
// sent: the caller stages them), or nothing was committed for a reason
// that is the put's answer (`*refusal`: the volume refused it, or its
// bytes could not be read). With `guard`, the bytes are copied out
// of the caller's buffers inside its entry, before the commit.
std::optional<Result<std::vector<std::uint64_t>>> put_inline(
    FastPath& fast, const ChannelPut& c, const std::string& home, std::chrono::milliseconds timeout,
    const std::shared_ptr<internal::CallGuard>& guard, Status* refusal, Status* unsent) {
  if (guard && !guard->enter()) return cancelled(c);
  auto req = request_for(c);
  std::vector<std::vector<std::byte>> held;             // bytes assembled, packed or copied here
  std::vector<std::shared_ptr<std::byte>> from_device;  // GPU tensors' bytes, page-locked
  // A buffer of `n` bytes of this put's own (its views stay valid).
  auto hold = [&](std::size_t n) {
    if (held.empty()) held.reserve(c.items.size());  // no reallocation after this
    return held.emplace_back(n).data();
  };
  Status copied;
  const std::size_t first = req.records.size();  // the items' records follow
  for (std::size_t i = 0; i < c.items.size() && copied.ok(); ++i) {
    const auto& item = c.items[i];
    req.records.push_back(put_record(item, nullptr, home, c.groups[i]));
    const auto n = static_cast<std::size_t>(item.view.nbytes());
    const char* data = static_cast<const char*>(item.view.data());
    if (!item.gather && on_device(item.view) && n > 0) {
      // One device-to-host copy.
      auto buf = internal::cuda::pinned(n);
      copied = buf ? internal::cuda::copy_bytes(buf.get(), data, n)
                   : Status(Errc::out_of_capacity,
                            "no page-locked memory for " + std::to_string(n) + " bytes");
      from_device.push_back(buf);
      data = reinterpret_cast<const char*>(buf.get());
    } else if (item.gather) {
      auto* dst = hold(n);
      copied = fill_gathered_here(*item.gather, dst, n);
      data = reinterpret_cast<const char*>(dst);
    } else if (!item.view.is_contiguous()) {  // packed here
      auto* dst = hold(n);
      pack_to(item.view, dst);
      data = reinterpret_cast<const char*>(dst);
    } else if (guard && n > 0) {  // out of the caller's buffer before its entry ends
      auto* dst = hold(n);
      std::memcpy(dst, data, n);
      data = reinterpret_cast<const char*>(dst);
    }
    req.inlined.emplace_back(std::string_view(n > 0 ? data : "", n));
  }
  if (guard) guard->leave();  // the caller's bytes are copied
  if (!copied.ok()) {
    *refusal = copied.with_context("'" + c.items[req.records.size() - first - 1].key + "'");
    return std::nullopt;
  }
  if (guard && !guard->begin_commit()) return cancelled(c);
  // What was kept staged for this put goes back with it.
  auto staging = fast.take_staging(c.slot);
  if (staging && staging->volume_id == home) {
    for (const auto& r : staging->regions) req.release.push_back(r.region_id);
  } else if (staging) {
    fast.give_back(*staging, timeout);
  }
  bool sent = false, refused = false;
  auto got = fast.commit(home, req, timeout, &sent, &refused);
  if (!got.ok()) {
    if (!sent && staging && staging->volume_id == home) {
      fast.keep_staging(c.slot, std::move(*staging), timeout);
    }
    if (refused) *refusal = got.status();
    if (!sent) *unsent = got.status();
    if (!sent || refused) return std::nullopt;
    // The channel failed with the commit on its way: committed or not is
    // unknown (its objects then belong to the keys, or go with this client).
    return Result<std::vector<std::uint64_t>>(got.status().with_context(c.what));
  }
  for (std::size_t i = first; i < req.records.size(); ++i) {
    auto& shard = req.records[i].shards.front();
    shard.object_id = got->placed[i - first].object_id;
    shard.place = std::move(got->placed[i - first].place);
  }
  learn_committed(fast, c, req.records, got->versions);
  return Result<std::vector<std::uint64_t>>(std::move(got->versions));
}

// The transport that writes to this client's volume (`*home`) over its
// channel; null when it has none (`*why`, when given, says why). With
// `connect`, a client without one (no volume chosen yet, or no channel
// open to it: FastPath::may_connect_home) has the client actor connect it
// first (FastPath::connect_home: the waiting thread only).
std::shared_ptr<transports::Transport> home_writer(FastPath& fast, std::string* home,
                                                   std::chrono::milliseconds timeout, bool connect,
                                                   Status* why = nullptr) {
  *home = fast.home();
  auto writer = fast.writer_of(*home);
  if (!home->empty() && writer) return writer;
  Status connected(Errc::unavailable, "none is open");
  if (connect || fast.closed()) {
    connected = fast.connect_home(timeout);  // answers shutdown once closed
    *home = fast.home();
    writer = fast.writer_of(*home);
    if (!home->empty() && writer) return writer;
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
    writer_ = home_writer(fast_, &home_, timeout_, defer_ == nullptr, &no_channel);
    if (!writer_) {
      if (defer_ && fast_.may_connect_home()) {
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
