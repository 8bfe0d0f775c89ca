#pragma once

// What one commit over the channel carries, and the writes before it
// (docs/internals/data-path-small-ops.md, "Puts on the caller's thread"): the record of
// each item, the request, the put whose bytes ride inline in it, and the
// write of items into objects the volume staged for them. The put's
// control flow (which of these, retried how) is channel_put.cpp's.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshstore/client/channel_put.hpp"
#include "meshstore/protocol/fast_get.hpp"
#include "meshstore/transports/transport.hpp"

namespace meshstore::client {

/// The record a put commits for `item` (its group `group`, "" for none):
/// one shard, the object `region` on `volume_id` (null: the volume fills
/// it in, for bytes sent inline), with its shm place for readers on that
/// host.
wire::KeyRecord put_record(const PutItem& item, const wire::RegionRef* region,
                           const std::string& volume_id, const std::string& group);

/// Whether a put writing `items` is worth announcing as a stream: only when
/// the objects besides its largest hold enough bytes for a reader to copy
/// while the put still writes (limits::kStreamMinOverlapBytes).
bool worth_streaming(const std::vector<PutItem>& items);

/// Writes each of `items` into the object staged for it (`regions`, in
/// order) on the caller's thread: copied (a strided host tensor packed)
/// into the volume's memory where `writer` maps it (shm), else sent with
/// it (tcp; a strided tensor packed first), all at once, waiting for every
/// send (the transport's own deadline bounds each). GPU memory takes one
/// CUDA copy through the mapping (shm), else pipelined pieces through
/// page-locked memory (client::write_from_device). The first error when
/// one could not be written, naming its key; then the objects hold
/// nothing of use. `filled(i)`, when given, is told each item written (a
/// stream's progress).
Status write_staged(const std::shared_ptr<transports::Transport>& writer,
                    const std::vector<PutItem>& items, const std::vector<wire::RegionRef>& regions,
                    const std::function<void(std::size_t)>& filled = {});

/// What a commit's records and prefixes take beside the objects' bytes, at
/// most: the estimate only picks how the bytes travel (a request that
/// does not fit after all is not sent).
std::size_t record_room(const ChannelPut& c, const std::string& volume_id);

/// A commit request for `c`: what it commits besides its items' records
/// (the objects written in place first, which come with none of their
/// bytes).
protocol::fast_get::CommitRequest request_for(const ChannelPut& c);

/// `c` committed `records` at `versions`: counted, and each record in the
/// client's location cache, so this thread's next read sees it.
void learn_committed(FastPath& fast, const ChannelPut& c, std::vector<wire::KeyRecord>& records,
                     const std::vector<std::uint64_t>& versions);

/// A cancelled put's answer.
Result<std::vector<std::uint64_t>> cancelled(const ChannelPut& c);

/// The put in one request, its objects' bytes inline: the volume stages
/// them and commits them. nullopt when it did not fit one request after
/// all (nothing sent: the caller stages them), or nothing was committed
/// for a reason that is the put's answer (`*refusal`: the volume refused
/// it, or its bytes could not be read; `*unsent`: the channel failed
/// before the request left). With `guard`, the bytes are copied out of the
/// caller's buffers inside its entry, before the commit.
std::optional<Result<std::vector<std::uint64_t>>> put_inline(
    FastPath& fast, const ChannelPut& c, const std::string& home, std::chrono::milliseconds timeout,
    const std::shared_ptr<internal::CallGuard>& guard, Status* refusal, Status* unsent);

}  // namespace meshstore::client
