#pragma once

// Versions of a state dict under a prefix: the keys "PREFIX/vN", the
// pointer at the latest, publishing and retiring, reading the latest or the
// next one.

#include <caf/all.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "meshstore/future.hpp"
#include "meshstore/state_dict.hpp"
#include "meshstore/state_dicts/read_plan.hpp"

namespace meshstore::client {
class FastPath;
}  // namespace meshstore::client

namespace meshstore::state_dicts {

// The key of version `v` under `prefix`.
std::string version_key(const std::string& prefix, std::uint64_t v);

// A prefix's version pointer as a publisher reads it: the version it names
// (0 when nothing was published) and the pointer object's own commit
// version (0 when it does not exist), the precondition of moving it.
struct Pointer {
  std::uint64_t value = 0;
  std::uint64_t seq = 0;
  std::string note;  // none: why it may be gone (wire::maybe_lost_note)
};

// Where a publish goes: version `version` under `prefix`, keeping the
// newest `keep`, moving the pointer read as `from`. An empty prefix: a
// plain state dict, not a publish.
// With `fast` (the store's fast path, while it lives), the pointer moves
// over the client's channel, from its waiting thread.
struct PublishTarget {
  std::string prefix;
  std::uint64_t version = 0;
  int keep = 1;
  Pointer from;
  std::weak_ptr<client::FastPath> fast;
  std::chrono::milliseconds timeout{0};  // the channel's request timeout
};

// The last steps of a publish, once version `next` is stored (fenced: it
// committed only if no other writer had stored it): move the prefix's
// pointer to it by compare-and-set against the pointer read before (`from`;
// readers find it from now on), then retire the version that fell out of
// the newest `keep`; its memory stays with the volumes for the next
// version's tensors. When another writer moved the pointer in between, the
// version is withdrawn and the publish fails with Errc::conflict. The move
// and the retirement are one commit request over the client's channel
// (`fast`; Errc::shutdown once it is gone), sent from the client's waiting
// thread (the volume commits it: one round trip, no flush).
Future<std::uint64_t> point_and_retire(const caf::actor_addr& client, const std::string& prefix,
                                       std::uint64_t next, int keep, const std::string& op,
                                       Pointer from, const std::weak_ptr<client::FastPath>& fast,
                                       std::chrono::milliseconds timeout);

// The version `prefix` points at (0 when it was never published), as its
// record at the controller names it (KeyRecord::points_to): no object read.
// A prefix holding anything a publish did not write is Errc::wrong_kind.
Future<std::uint64_t> pointer_of(const caf::actor_addr& client, const std::string& prefix,
                                 const std::string& op);
// pointer_of with the pointer's commit version (Pointer), for publishers;
// `with_version`: the records of the version it names come in the same
// answer and go to the client's location cache, for a read to follow.
Future<Pointer> pointer_at(const caf::actor_addr& client, const std::string& prefix,
                           const std::string& op, bool with_version = false);

struct PreparedPut;

// publish_prepared on the caller's thread
// (docs/internals/data-path-small-ops.md, "Versions"), where the pointer this client last
// saw (its own publish, or a read) is still current (FastPath::
// pointer_here): the version, the pointer's move from there and the retirement
// of what falls out of the newest `keep` commit over the volume's ring in
// one request (client::put_over_channel), all or nothing. nullopt: nothing
// was committed, publish_prepared publishes it (another writer moved the
// pointer, no ring, a put announced as a stream, ...). Else N, or the
// ring's error with the commit on its way.
// `defer` as put_over_channel's.
std::optional<Result<std::uint64_t>> publish_on_caller_thread(
    client::FastPath& fast, const std::string& prefix, const PreparedPut& prepared, int keep,
    const std::string& op, std::chrono::milliseconds timeout, bool* defer = nullptr);

// Publishes a prepared put as the next version under `prefix` (fenced, as
// docs/publishing.md "Two writers on one prefix" says): reads the pointer,
// stores "PREFIX/vN" only if no other writer stored it, then moves the
// pointer from the value read and retires what fell out of the newest
// `keep` (point_and_retire). Answers N; the loser of a race gets
// Errc::conflict. When the pointer cannot be read, nothing is put and what
// the put holds (a loan's token) is let go at once. With a live `fast`,
// the pointer moves over the client's channel (point_and_retire).
Future<std::uint64_t> publish_prepared(const caf::actor_addr& client, const std::string& prefix,
                                       std::shared_ptr<PreparedPut> prepared, int keep,
                                       const std::string& op,
                                       const std::weak_ptr<client::FastPath>& fast = {},
                                       std::chrono::milliseconds timeout = {});

// How a publish that lost a race says so: `why` (Errc::conflict from the
// controller) in the words of publishing version `next` under `prefix`.
Status publish_conflict(const std::string& op, const std::string& prefix, std::uint64_t next,
                        const Status& why);

// How far a latest read got: looks that found their version gone while the
// pointer had not moved past the one lost before (`stuck`), looks in all,
// and the version the last look found gone.
struct LatestTries {
  int stuck = 0;
  int all = 0;
  std::uint64_t lost = 0;
};
// Looks a latest read makes at most while the pointer keeps moving.
constexpr int kMaxLatestChase = 1000;

// Reads the version `prefix` points at into `dst`; when that version was
// retired before it could be read, follows the pointer again: as long as
// it moves on (at most kMaxLatestChase looks), and kMaxStateDictAttempts
// looks at a version gone with no newer one. With `fast`,
// the version is read straight from same-host volumes' memory where it can
// be (read_state_dict_into), its locations known from the pointer's locate.
// `known` (else 0): the version the caller read on its own thread
// (FastPath::pointer_here), read without asking the controller first.
Future<std::uint64_t> read_latest_into(const caf::actor_addr& client, const std::string& prefix,
                                       StateDict* dst, const std::string& op, LatestTries tries,
                                       const std::shared_ptr<ManifestCache>& cache,
                                       bool cast = false,
                                       const std::shared_ptr<client::FastPath>& fast = nullptr,
                                       std::uint64_t known = 0);

// Waits for a version newer than `after` under `prefix` and reads it (the
// newest, when several are) into `dst`; answers its number. The wait
// follows version `latest + 1` in slices, so a version published and
// retired between two looks is not waited for in vain. `known`: as for
// read_latest_into, taken for the first look when it is newer than `after`.
Future<std::uint64_t> read_next_into(const caf::actor_addr& client, const std::string& prefix,
                                     StateDict* dst, std::uint64_t after, const std::string& op,
                                     std::chrono::steady_clock::time_point deadline,
                                     const std::shared_ptr<ManifestCache>& cache, bool cast = false,
                                     const std::shared_ptr<client::FastPath>& fast = nullptr,
                                     std::uint64_t known = 0);

}  // namespace meshstore::state_dicts
