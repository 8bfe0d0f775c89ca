#pragma once

// Planning a state dict's put: its manifest, its small tensors packed into
// buckets, casts and boxes, as one put call the client commits at once.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "meshstore/client/client.hpp"
#include "meshstore/future.hpp"
#include "meshstore/state_dict.hpp"
#include "meshstore/state_dicts/client_calls.hpp"
#include "meshstore/status.hpp"
#include "meshstore/store.hpp"

namespace meshstore::client {
class FastPath;
}  // namespace meshstore::client

namespace meshstore::state_dicts {

// A state dict's put, built while the caller's call runs (the views are the
// caller's; small tensors are packed now) and sent later: item keys are
// relative ("" for the manifest, "/NAME" for entries, "#packed" for the
// blob) until put_prepared() gives them their key.
struct PreparedPut {
  client::StateDictPut call;
};

// One rank's part of a sharded state dict (put_sharded_state_dict).
struct ShardedPart {
  const std::map<std::string, RankShard>* layout = nullptr;
  std::int64_t rank = 0;
};

// Builds the put of `sd` (for `part`'s rank when sharded) while the
// caller's call runs; `op` names the call in errors.
Result<std::shared_ptr<PreparedPut>> prepare_put(const StateDict& sd, const std::string& op,
                                                 const StateDictPutOptions& options,
                                                 const ShardedPart& part = {});

// prepare_put of a whole state dict with the layout of an earlier put as a
// hint: when `hint` lays `sd` out exactly as prepare_put would (the same
// names in order, stored dtypes, shapes and value sizes; the caller keys
// hints by layout_key, which holds the options), its manifest is used
// rather than laid out again (1,000 entries: no allocation per entry).
// `*laid_out` is the layout used, to keep for the next put.
Result<std::shared_ptr<PreparedPut>> prepare_put(const StateDict& sd, const std::string& op,
                                                 const StateDictPutOptions& options,
                                                 std::shared_ptr<const Snapshot> hint,
                                                 std::shared_ptr<const Snapshot>* laid_out);
// The key a put's layout is kept under: `key` and the options that shape it.
std::string layout_key(const std::string& key, const StateDictPutOptions& options);

// Gives a prepared put its key: the items' keys (checked), the group's
// members, the prefix it replaces; with `manifest_version`, the manifest's
// precondition (put_prepared_expecting).
Status name_put(const std::string& key, PreparedPut& p,
                std::optional<std::uint64_t> manifest_version = std::nullopt);
// Puts a put named by name_put over the client's channel (`fast`), from
// its waiting thread: its lent items (direct publishing) lent first
// through the client actor at `client` (client::lend_items), and given
// back if it does not commit. The commit also removes, in the same step,
// every key the previous version owned and this one does not, so no
// reader sees stale names next to new ones. Errc::shutdown once `fast` is
// gone.
Future<void> put_named(const caf::actor_addr& client, std::shared_ptr<PreparedPut> p,
                       const std::weak_ptr<client::FastPath>& fast,
                       std::chrono::milliseconds timeout);

// Whether a put of this shape may run on the caller's thread
// (client::put_over_channel) as it is: no lent items (lent first:
// put_named) or in-place items (a staged state dict's commit names those
// itself). Sharded groups and streamed puts take it too.
bool takes_caller_thread(const client::StateDictPut& call);

// put_state_dict's prepared put on the caller's thread, through
// client::put_over_channel (`defer` as there): its manifest only over the
// version this client last saw (refused after another writer's put: put
// again unfenced; a fence `call` carries, a publish's version's, stays,
// and its refusal is the answer). nullopt as there; a refusal is the
// answer (ChannelPut::refusals_final). `lent`: the objects its lent items
// were lent as (client::lend_items), committed with it; a put with lent
// items and none is refused (Errc::internal).
std::optional<Status> put_on_caller_thread(client::FastPath& fast, const client::StateDictPut& call,
                                           std::chrono::milliseconds timeout, bool* defer = nullptr,
                                           const std::vector<wire::RegionRef>* lent = nullptr);

// Names `p` `key` (name_put) and puts it (put_named), committing only while
// the manifest at `key` has commit version `manifest_version` (0: absent),
// Errc::conflict otherwise.
Future<void> put_prepared_expecting(const caf::actor_addr& client, const std::string& key,
                                    std::shared_ptr<PreparedPut> p,
                                    std::optional<std::uint64_t> manifest_version,
                                    const std::weak_ptr<client::FastPath>& fast,
                                    std::chrono::milliseconds timeout);

}  // namespace meshstore::state_dicts
