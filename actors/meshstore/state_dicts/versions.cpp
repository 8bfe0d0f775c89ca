// Versions of a state dict under a prefix: publishing, retiring, and
// reading the latest or the next one.

#include "meshstore/state_dicts/versions.hpp"

#include <algorithm>

#include "meshstore/client/calls.hpp"
#include "meshstore/client/channel_put.hpp"
#include "meshstore/client/fast_path.hpp"
#include "meshstore/state_dicts/client_calls.hpp"
#include "meshstore/state_dicts/put_plan.hpp"
#include "meshstore/state_dicts/stream.hpp"

namespace meshstore::state_dicts {

using client::bytes_item;

namespace {

// A reader waiting for the next version looks at the pointer again this often.
constexpr std::chrono::milliseconds kStreamWaitSlice{1000};

// The cache slot of the versions under `prefix` (no key holds a NUL).
CacheSlot versions_slot(const std::shared_ptr<ManifestCache>& cache, const std::string& prefix) {
  return CacheSlot{cache, std::string(1, '\0') + prefix};
}

}  // namespace

std::string version_key(const std::string& prefix, std::uint64_t v) {
  return prefix + "/v" + std::to_string(v);
}

Status publish_conflict(const std::string& op, const std::string& prefix, std::uint64_t next,
                        const Status& why) {
  if (why.code() != Errc::conflict) return why;
  return Status(Errc::conflict,
                op + " '" + prefix + "': another writer published under '" + prefix +
                    "' at the same time, so version " + std::to_string(next) +
                    " was not published (" + why.message() +
                    "); one writer per prefix, or read latest_version and try again");
}

namespace {

// The version pointer's put moving `prefix` to version `next`, only from
// the commit this client saw it at (`seq`: compare-and-set).
client::PutItem pointer_item(const std::string& prefix, std::uint64_t next, std::uint64_t seq) {
  auto item = bytes_item(prefix, std::to_string(next), wire::ObjectKind::object);
  item.expect_version = seq;
  item.points_to = next;
  return item;
}

// The version that falls out of the newest `keep` once `next` is
// published, retired in the same controller step as the pointer's move.
std::vector<std::string> retired_by(const std::string& prefix, std::uint64_t next, int keep) {
  if (next <= static_cast<std::uint64_t>(keep)) return {};
  return {version_key(prefix, next - static_cast<std::uint64_t>(keep))};
}

// Removes version `next` of `prefix`, which no reader was pointed at,
// after another writer moved the pointer first (`why`, the refusal), and
// answers the publish's conflict.
Future<std::uint64_t> withdraw_version(const caf::actor_addr& client, const std::string& prefix,
                                       std::uint64_t next, const std::string& op,
                                       const Status& why) {
  client::RemoveCall withdraw;
  withdraw.under = true;
  withdraw.keys.push_back(version_key(prefix, next));
  auto p = std::make_shared<Promise<std::uint64_t>>(Status(Errc::shutdown, op + ": dropped"));
  call_client(client, protocol::store_remove_atom::value, std::move(withdraw),
              op + " '" + prefix + "': withdrawing version " + std::to_string(next))
      .on_complete([=](const Result<std::size_t>&) {
        p->set_error(publish_conflict(op, prefix, next, why));
      });
  return p->future();
}

}  // namespace

Future<std::uint64_t> point_and_retire(const caf::actor_addr& client, const std::string& prefix,
                                       std::uint64_t next, int keep, const std::string& op,
                                       Pointer from, const std::weak_ptr<client::FastPath>& fast,
                                       std::chrono::milliseconds timeout) {
  auto live = fast.lock();
  if (!live) return client::closed_future<std::uint64_t>(op + " '" + prefix + "'");
  client::FastPath* raw = live.get();
  return on_waiting_thread<std::uint64_t>(*raw, op, [=]() -> Result<std::uint64_t> {
    client::ChannelPut c;
    c.items.push_back(pointer_item(prefix, next, from.seq));
    c.groups.emplace_back();
    c.prefixes = retired_by(prefix, next, keep);
    c.slot = std::string(2, '\0') + prefix;  // no key holds a NUL
    c.what = op + " '" + prefix + "'";
    c.whole_key = true;  // counted as a put of one key: the pointer
    c.refusals_final = true;
    auto moved = final_outcome(client::put_over_channel(*raw, c, timeout), c.what);
    // Moved; refused (a conflict: another writer moved it first, so
    // this version is withdrawn, from this waiting thread); or the
    // channel failed with the commit on its way (moved or not is
    // unknown: said, never retried).
    if (moved.ok()) return Result<std::uint64_t>(next);
    if (moved.status().code() != Errc::conflict) return moved.status();
    // (Answered once the version is gone, or its removal's time is
    // up; the conflict either way.)
    auto withdrawn = withdraw_version(client, prefix, next, op, moved.status());
    if (!withdrawn.wait_for(timeout)) {
      return Result<std::uint64_t>(publish_conflict(op, prefix, next, moved.status()));
    }
    return withdrawn.get();
  });
}

namespace {

// Puts version `key` of a publish (fenced: it commits only if no other
// writer stored it first). Over the client's channel from its waiting
// thread (this runs on the client actor's, which the channel may need),
// one commit request, its lent items (direct publishing) lent first
// (put_named).
Future<void> put_version(const caf::actor_addr& client, const std::string& key,
                         std::shared_ptr<PreparedPut> prepared,
                         const std::weak_ptr<client::FastPath>& fast,
                         std::chrono::milliseconds timeout, const std::string& op) {
  if (auto s = name_put(key, *prepared, std::uint64_t{0}); !s.ok()) {
    return make_error_future<void>(s);
  }
  return put_named(client, prepared, fast, timeout);
}

}  // namespace

Future<std::uint64_t> publish_prepared(const caf::actor_addr& client, const std::string& prefix,
                                       std::shared_ptr<PreparedPut> prepared, int keep,
                                       const std::string& op,
                                       const std::weak_ptr<client::FastPath>& fast,
                                       std::chrono::milliseconds timeout) {
  auto done = std::make_shared<Promise<std::uint64_t>>(Status(Errc::shutdown, op + ": dropped"));
  pointer_at(client, prefix, op).on_complete([=](const Result<Pointer>& ptr) {
    if (!ptr.ok()) {
      if (prepared->call.loan) prepared->call.loan->token.reset();  // nothing will be put
      return (void)done->set_error(ptr.status());
    }
    const std::uint64_t next = ptr->value + 1;
    put_version(client, version_key(prefix, next), prepared, fast, timeout, op)
        .on_complete([=, from = *ptr](const Result<void>& put) {
          if (!put.ok()) {
            return (void)done->set_error(publish_conflict(op, prefix, next, put.status()));
          }
          point_and_retire(client, prefix, next, keep, op, from, fast, timeout)
              .on_complete([=](const Result<std::uint64_t>& v) { done->set(v); });
        });
  });
  return done->future();
}

Future<Pointer> pointer_at(const caf::actor_addr& client, const std::string& prefix,
                           const std::string& op, bool with_version) {
  // Located at the controller: successive reads never go back a version.
  client::LatestCall call;
  call.prefix = prefix;
  call.with_version = with_version;
  return call_client(client, protocol::store_latest_atom::value, std::move(call),
                     op + " '" + prefix + "'")
      .then([=](const wire::KeyRecord& r) -> Result<Pointer> {
        if (!r.found() && !r.lost_on.empty()) {
          return Status(Errc::unavailable, op + ": the version pointer '" + prefix +
                                               "' was stored on volume '" + r.lost_on +
                                               "', which went down; publish again");
        }
        if (!r.found()) return Pointer{0, 0, wire::maybe_lost_note(r)};
        if (r.points_to == 0) {
          return Status(Errc::wrong_kind,
                        op + ": '" + prefix + "' is not a version pointer (it holds " +
                            (r.kind == wire::ObjectKind::tensor ? "a tensor" : "an object") +
                            " that no publish wrote)");
        }
        return Pointer{r.points_to, r.version, {}};
      });
}

Future<std::uint64_t> pointer_of(const caf::actor_addr& client, const std::string& prefix,
                                 const std::string& op) {
  return pointer_at(client, prefix, op).then([](const Pointer& ptr) { return ptr.value; });
}

Future<std::uint64_t> read_latest_into(const caf::actor_addr& client, const std::string& prefix,
                                       StateDict* dst, const std::string& op, LatestTries tries,
                                       const std::shared_ptr<ManifestCache>& cache, bool cast,
                                       const std::shared_ptr<client::FastPath>& fast,
                                       std::uint64_t known) {
  auto read = [=](std::uint64_t v, const std::string& note) -> Future<std::uint64_t> {
    if (v == 0) {
      return make_error_future<std::uint64_t>(
          Status(Errc::not_found, op + ": nothing published under '" + prefix + "'" + note));
    }
    auto p = std::make_shared<Promise<std::uint64_t>>();
    read_state_dict_into(client, version_key(prefix, v), *dst, op, versions_slot(cache, prefix),
                         nullptr, cast, fast)
        .on_complete([=](const Result<void>& r) {
          if (r.ok()) return (void)p->set_value(v);
          if (r.status().code() != Errc::not_found) return (void)p->set_error(r.status());
          // Gone as it was read: follow the pointer again. A reader loses
          // that race only to a newer version, so while the pointer moves
          // it keeps following (bounded); a version gone with none after
          // it (withdrawn) fails after kMaxStateDictAttempts looks.
          LatestTries next = tries;
          ++next.all;
          if (tries.lost == 0 || v <= tries.lost) ++next.stuck;
          next.lost = v;
          if (next.stuck < kMaxStateDictAttempts && next.all < kMaxLatestChase) {
            read_latest_into(client, prefix, dst, op, next, cache, cast, fast, 0)
                .on_complete([p](const Result<std::uint64_t>& n) { p->set(n); });
            return;
          }
          p->set_error(Status(Errc::not_found,
                              op + " '" + prefix + "': version " + std::to_string(v) +
                                  ", the latest, is gone (withdrawn by its direct publisher, "
                                  "or retired as it was read); get_next_state_dict_into "
                                  "waits for the next (" +
                                  r.status().message() + ")"));
        });
    return p->future();
  };
  if (known != 0) return read(known, "");
  // The pointer and where its version lies in one request: the read that
  // follows goes straight to the volumes' memory where it can.
  return pointer_at(client, prefix, op, true).then([=](const Pointer& ptr) {
    return read(ptr.value, ptr.note);
  });
}

Future<std::uint64_t> read_next_into(const caf::actor_addr& client, const std::string& prefix,
                                     StateDict* dst, std::uint64_t after, const std::string& op,
                                     std::chrono::steady_clock::time_point deadline,
                                     const std::shared_ptr<ManifestCache>& cache, bool cast,
                                     const std::shared_ptr<client::FastPath>& fast,
                                     std::uint64_t known) {
  auto look = known > after ? make_ready_future(Pointer{known, 0, {}})
                            : pointer_at(client, prefix, op, true);
  return look.then([=](const Pointer& ptr) -> Future<std::uint64_t> {
    const std::uint64_t latest = ptr.value;
    auto p = std::make_shared<Promise<std::uint64_t>>(
        Status(Errc::shutdown, op + " '" + prefix + "': the store was closed"));
    auto again = [=] {
      read_next_into(client, prefix, dst, after, op, deadline, cache, cast, fast, 0)
          .on_complete([p](const Result<std::uint64_t>& n) { p->set(n); });
    };
    if (latest > after) {
      // Read the version this look named, not the pointer again: a second
      // look may be served from a location cached before the pointer moved,
      // and name an older version.
      read_state_dict_into(client, version_key(prefix, latest), *dst, op,
                           versions_slot(cache, prefix), nullptr, cast, fast)
          .on_complete([=](const Result<void>& r) {
            if (r.ok()) return (void)p->set_value(latest);
            // Gone before it could be read: retired (a newer one exists) or
            // withdrawn by a direct publisher's reclaim (the next one will):
            // wait for one after it.
            if (r.status().code() == Errc::not_found &&
                std::chrono::steady_clock::now() < deadline) {
              read_next_into(client, prefix, dst, std::max(after, latest), op, deadline, cache,
                             cast, fast, 0)
                  .on_complete([p](const Result<std::uint64_t>& n) { p->set(n); });
              return;
            }
            p->set_error(r.status());
          });
      return p->future();
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return make_error_future<std::uint64_t>(
          Status(Errc::timeout, op + " '" + prefix + "': no version after " +
                                    std::to_string(after) + " was published in time"));
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    const auto slice = std::min<std::chrono::milliseconds>(left, kStreamWaitSlice);
    // Never a version the caller has seen, even if this look lagged behind.
    const std::uint64_t next = std::max(latest, after) + 1;
    stream_into(client, version_key(prefix, next), dst, op, slice, versions_slot(cache, prefix),
                cast)
        .on_complete([=](const Result<void>& r) {
          if (r.ok()) return (void)p->set_value(next);
          // Nothing yet, or the version went before it could be read: look again.
          const auto code = r.status().code();
          if (code == Errc::timeout || code == Errc::not_found) return again();
          p->set_error(r.status());
        });
    return p->future();
  });
}

std::optional<Result<std::uint64_t>> publish_on_caller_thread(
    client::FastPath& fast, const std::string& prefix, const PreparedPut& prepared, int keep,
    const std::string& op, std::chrono::milliseconds timeout, bool* defer) {
  if (!takes_caller_thread(prepared.call)) return std::nullopt;
  // The pointer as this client last saw it, if nobody moved it since (its
  // object is still the current one): else it is read afresh at the
  // controller (publish_prepared). Over
  // tcp, where the tag cannot be read, as last seen: the commit moves it
  // only from there, and is refused if another writer moved it meanwhile.
  auto last = fast.pointer_here(prefix);
  if (!last) last = fast.pointer_last_seen(prefix);
  if (!last) return std::nullopt;
  const std::uint64_t next = last->value + 1;
  PreparedPut named = prepared;  // publish_prepared names its own on a fallback
  const std::string key = version_key(prefix, next);
  if (auto s = name_put(key, named, 0); !s.ok()) return Result<std::uint64_t>(s);
  client::ChannelPut c;
  c.items = std::move(named.call.items);
  c.groups.assign(c.items.size(), key);
  // The pointer moves in the same commit, only from where this client
  // left it; the version that falls out is retired in the same step.
  c.items.push_back(pointer_item(prefix, next, last->seq));
  c.groups.push_back(std::string());
  c.prefixes = retired_by(prefix, next, keep);
  c.slot = std::string(1, '\0') + prefix;  // no key holds a NUL
  c.what = op + " '" + prefix + "'";
  c.stream_key = key;  // the version's readers may stream it
  c.stream_manifest = named.call.stream_manifest;
  auto done = client::put_over_channel(fast, c, timeout, defer);
  if (!done) return std::nullopt;
  if (!done->ok()) return Result<std::uint64_t>(done->status());
  return Result<std::uint64_t>(next);
}

}  // namespace meshstore::state_dicts
