#pragma once

// Puts on the caller's thread over the client's channel to its volume
// (docs/architecture.md, "Puts on the caller's thread"): every put a
// channel takes whose bytes do not fit one request (a whole tensor or
// object, a state dict, a version) is written straight into objects the
// volume staged for it and committed in one request.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meshstore/actors/client.hpp"
#include "meshstore/result.hpp"

namespace meshstore::actors {

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
};

/// Puts `c` when its client has a channel (ring or tcp) to its volume: the
/// items are written straight into objects the volume staged for them
/// (kept under the slot from the put before for a layout put again, else
/// staged with one request), mapped and copied where the channel's
/// transport maps them (split over the copy engine, this thread taking a
/// share), else sent with it, then committed in one request, which also
/// stages the next put's objects for a layout put again.
/// nullopt: nothing committed, the caller puts it through the actors (no
/// channel yet, a GPU or strided or sharded source, a full volume, a
/// precondition that no longer holds). Else the outcome: the versions, one
/// per item (the location cache has the records), or the channel's error
/// with the commit on its way. With `defer`, a put whose bytes are sent
/// (tcp) and more than limits::kStagedAheadBytes is left alone: nullopt
/// with `*defer` set, for the caller to run it again, without `defer`, on
/// the client's waiting thread (FastPath::defer), which may wait that long.
std::optional<Result<std::vector<std::uint64_t>>> put_over_channel(
    FastPath& fast, const ChannelPut& c, std::chrono::milliseconds timeout, bool* defer = nullptr);

}  // namespace meshstore::actors
