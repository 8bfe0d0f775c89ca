// What one commit over the channel carries, and the writes before it.

#include "meshstore/client/channel_commit.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "meshstore/client/device_pieces.hpp"
#include "meshstore/client/fast_path.hpp"
#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/protocol/limits.hpp"
#include "meshstore/transports/copy_engine.hpp"

namespace meshstore::client {

namespace fg = protocol::fast_get;
using internal::cuda::on_device;

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
  r.copies = item.copies;
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

bool worth_streaming(const std::vector<PutItem>& items) {
  std::uint64_t total = 0, largest = 0;
  for (const auto& item : items) {
    total += item.view.nbytes();
    largest = std::max(largest, item.view.nbytes());
  }
  return total - largest >= protocol::limits::kStreamMinOverlapBytes;
}

namespace {

// Contiguous host tensors copied into mapped objects in batches of about
// limits::kWriteBatchBytes, one CopyEngine::copy_all_here each; `filled`
// is told each item once its batch has landed.
class WriteBatch {
 public:
  explicit WriteBatch(const std::function<void(std::size_t)>& filled) : filled_(filled) {}

  void add(std::size_t item, std::shared_ptr<std::byte> mapping, const std::byte* src,
           std::uint64_t n) {
    copies_.push_back({mapping.get(), src, static_cast<std::size_t>(n)});
    items_.push_back(item);
    mappings_.push_back(std::move(mapping));
    if ((bytes_ += n) >= protocol::limits::kWriteBatchBytes) flush();
  }

  void flush() {
    transports::CopyEngine::instance().copy_all_here(copies_);
    if (filled_) {
      for (auto i : items_) filled_(i);
    }
    copies_.clear();
    items_.clear();
    mappings_.clear();
    bytes_ = 0;
  }

 private:
  const std::function<void(std::size_t)>& filled_;
  std::vector<transports::CopyEngine::Copy> copies_;
  std::vector<std::size_t> items_;
  std::vector<std::shared_ptr<std::byte>> mappings_;  // mapped until copied
  std::uint64_t bytes_ = 0;
};

}  // namespace

Status write_staged(const std::shared_ptr<transports::Transport>& writer,
                    const std::vector<PutItem>& items, const std::vector<wire::RegionRef>& regions,
                    const std::function<void(std::size_t)>& filled) {
  const auto caps = writer->capabilities();
  std::vector<std::vector<std::byte>> gathered;  // sent from here
  gathered.reserve(items.size());
  std::vector<std::pair<std::size_t, Future<void>>> sends;
  Status failed;
  auto fail = [&](std::size_t i, const Status& s) {
    if (failed.ok()) failed = s.with_context("write '" + items[i].key + "'");
  };
  WriteBatch batch(filled);
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
      } else {
        batch.add(i, *mem, src, n);
        continue;
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
  if (failed.ok()) batch.flush();
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

Result<std::vector<std::uint64_t>> cancelled(const ChannelPut& c) {
  return Status(Errc::cancelled, c.what + ": cancelled");
}

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

}  // namespace meshstore::client
