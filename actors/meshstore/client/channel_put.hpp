#pragma once

// Puts on the caller's thread over the client's channel to its volume
// (docs/internals/data-path-small-ops.md, "Puts on the caller's thread"): every put a
// channel takes (a whole tensor or object, a batch, a state dict, a
// version) is one commit request, its bytes inline or written first into
// objects the volume staged for it.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshstore/client/client.hpp"
#include "meshstore/internal/call_guard.hpp"
#include "meshstore/status.hpp"

namespace meshstore::client {

class FastPath;

/// What one put over the channel commits: `items` (item i's record in
/// group groups[i], "" for none), replacing the keys of the groups under
/// `prefixes`; the objects staged ahead for it are kept under `slot`.
struct ChannelPut {
  std::vector<PutItem> items;
  std::vector<std::string> groups;
  std::vector<std::string> prefixes;
  std::string slot;
  std::string what;        // the call, for errors
  bool whole_key = false;  // one key's put (counted as such: FastPath::count_commit)
  // A refusal (the controller's no, a full volume that cannot make room),
  // or a failure to read the items' bytes or write them into the objects
  // staged for them (nothing committed), is the put's answer, instead of nullopt (the actors then
  // put it and report the same refusal). Items whose expect_version came from this client's
  // location cache (indices in `cache_fenced`) lose it after a conflict, and the put goes over the
  // channel once more: such a fence keeps a late put from rolling a key back, not a writer from
  // overwriting another's value. A refused put's `staged_regions` are
  // given back to their volume before it answers.
  bool refusals_final = false;
  std::vector<std::size_t> cache_fenced;
  // Shards of sharded keys (items with a slice): each key commits once its
  // shards, from every rank, cover it; in `group` (of `members`, `layout`)
  // they are one rank's part of a sharded state dict, whose keys commit
  // together. No prefixes then.
  bool sharded = false;
  std::string group;
  std::vector<std::string> members;
  std::uint64_t layout = 0;
  // Objects the caller wrote in place (staged for this client on volume
  // `staged_on`, which must be its channel's): committed with the items,
  // ahead of them, in group `staged_group`; nothing is written for them.
  std::vector<PutItem> staged_items;
  std::vector<wire::RegionRef> staged_regions;
  std::string staged_on;
  std::string staged_group;
  // Direct publishing: items lent to this process's lending volume
  // (`lent_on`), whose objects are `lent_regions` (lend_items): committed
  // with the items, after the staged ones, in group `staged_group`;
  // nothing is written for them. Refused, the caller gives them back.
  std::vector<PutItem> lent_items;
  std::vector<wire::RegionRef> lent_regions;
  std::string lent_on;
  // A state dict's put worth a stream (worth_streaming): its manifest's
  // bytes, announced under `stream_key` for readers to copy each object
  // (those of group `stream_key`) as soon as it is written.
  std::string stream_key;
  std::string stream_manifest;
};

/// Puts `c` when its client has a channel (ring or tcp) to its volume, in
/// one commit request: the items' bytes inline when they fit it (GPU
/// memory first copied into page-locked memory); else written first
/// straight into objects the volume staged for them (kept under the slot
/// from the put before for a layout put again, else staged with one
/// request): mapped and copied where the channel's transport maps them
/// (split over the copy engine, this thread taking a share; GPU memory in
/// one CUDA copy through the mapping), else sent with it (GPU memory in
/// pipelined pieces through page-locked memory); that commit also stages
/// the next put's objects for a layout put again.
/// nullopt: nothing committed, and the caller takes it another way (only
/// without `refusals_final`: a one-request publish whose pointer moved,
/// whose caller reads the pointer afresh); with it, every reason nothing
/// was committed is the answer (a full volume, a precondition that no
/// longer holds, bytes that could not be read or written into the staged
/// objects, no channel to be had). A channel that failed before the commit left is
/// opened again and the put tried on it once more (with `defer`: on the
/// waiting thread). Else the outcome: the versions, one
/// per item (the location cache has the records), or the channel's error
/// with the commit on its way. With `defer`, a put whose bytes are sent
/// (tcp) and more than limits::kStagedAheadBytes is left alone: nullopt
/// with `*defer` set, for the caller to run it again, without `defer`, on
/// the client's waiting thread (FastPath::defer), which may wait that long.
/// With `guard` (a cancellable call's), the caller's bytes are touched
/// only inside its entries and the commit sent only after its
/// begin_commit(): once cancelled, nothing is committed and the answer is
/// Errc::cancelled.
std::optional<Result<std::vector<std::uint64_t>>> put_over_channel(
    FastPath& fast, const ChannelPut& c, std::chrono::milliseconds timeout, bool* defer = nullptr,
    const std::shared_ptr<internal::CallGuard>& guard = nullptr);

/// Stages one object of each of `sizes` (named by `keys`) for this client
/// on its volume, in stage requests over the channel, and maps them
/// writable (stage_state_dict's zero-copy staging: the caller writes in
/// place, and a commit over the channel names them). Errc::unsupported,
/// with nothing staged, when no channel to the volume can be had or its
/// transport maps no memory (another host, shm off); else the volume's
/// refusal (full), with nothing left staged. It may connect the client to
/// its volume first: only the waiting thread (FastPath::defer) calls it.
Result<StagedRegions> stage_over_channel(FastPath& fast, const std::vector<std::string>& keys,
                                         const std::vector<std::uint64_t>& sizes,
                                         std::chrono::milliseconds timeout);

}  // namespace meshstore::client
