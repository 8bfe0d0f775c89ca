#include "meshstore/actors/client.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/byte_budget.hpp"
#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/placement.hpp"
#include "meshstore/transports/copy_engine.hpp"
#include "meshstore/transports/registry.hpp"

namespace meshstore::actors {
namespace {

using internal::from_caf_error;

/// A volume the client can move bytes to and from.
struct VolumeConn {
  wire::VolumeInfo info;
  storage_volume_actor handle;
  std::shared_ptr<transports::Transport> transport;
};

using ConnResult = Result<std::shared_ptr<VolumeConn>>;
using ConnCallback = std::function<void(const ConnResult&)>;

struct ClientState {
  static inline const char* name = "meshstore.client";

  ClientConfig cfg;
  std::uint64_t next_lease_id = 1;  // lease ids are this client's to choose
  controller_actor controller;
  strategy_actor strategy;
  // Volume connections by id, and callers waiting for one being set up.
  std::unordered_map<std::string, std::shared_ptr<VolumeConn>> conns;
  std::unordered_map<std::string, std::vector<ConnCallback>> conn_waiters;
  // The strategy's answer for this client (the volume puts go to).
  std::string home_volume;
  std::vector<ConnCallback> home_waiters;
  bool home_pending = false;
  // key -> last record seen; validated by the volume on every read.
  std::unordered_map<std::string, wire::KeyRecord> locations;
  // Requests waiting on each peer, failed at once if the peer goes down
  // (CAF 0.17 itself would only time them out).
  std::map<caf::actor_addr, std::map<std::uint64_t, std::function<void(caf::error&)>>> waiting;
  std::set<caf::actor_addr> monitored;
  std::uint64_t next_wait = 1;
  // Why the controller or strategy is gone; empty while they live.
  std::string control_down;
  // Streamed reads following a writer, by state dict key.
  std::multimap<std::string, std::shared_ptr<struct StreamOp>> streams;
  std::shared_ptr<spdlog::logger> log = log::get("client");
};

using client_pointer = caf::stateful_actor<ClientState>*;

/// Runs `k(result)` inside the client actor once `fut` completes, whatever
/// thread completes it. Dropped (with its captures) if the client is gone.
template <class T, class F>
void await(client_pointer self, Future<T> fut, F k) {
  caf::actor_addr addr = self->address();
  fut.on_complete([addr, k](const Result<T>& r) {
    auto hdl = caf::actor_cast<caf::actor>(addr);
    if (!hdl) return;
    caf::anon_send(hdl, run_atom::value, internal::Closure{[k, r]() mutable { k(r); }});
  });
}

/// Completes once every input has completed (so no transfer still touches
/// a caller's buffer), with the first error in input order, if any.
Future<void> settle_all(std::vector<Future<void>> futures) {
  return when_all(std::move(futures)).then([](const std::vector<Result<void>>& results) -> Status {
    for (const auto& r : results) {
      if (!r.ok()) return r.status();
    }
    return Status();
  });
}

using internal::cuda::on_device;

// -- GPU memory over transports that cannot copy it ----------------------
//
// For such transports (tcp, rpc, cma, rdma) a caller's GPU tensor moves
// through page-locked host memory in pieces: each piece's device copy runs
// on a copy engine thread and its transfer starts as soon as it is done, so
// the device copy of one piece overlaps the transfer of another
// (docs/gpu.md). shm and cuda-ipc copy GPU memory themselves, in one copy.

constexpr std::size_t kDevicePiece = std::size_t{64} << 20;

// Page-locked staging memory in flight, process-wide: a state dict of
// 100 GB put over tcp holds at most this much at once; pieces beyond it wait
// their turn (without blocking a thread).
constexpr std::size_t kStagingInFlight = std::size_t{1} << 30;

internal::ByteBudget& staging_budget() {
  static auto* budget = new internal::ByteBudget(kStagingInFlight);  // outlives late completions
  return *budget;
}

Status no_pinned_memory(std::size_t n) {
  return Status(Errc::out_of_capacity,
                "no host memory for " + std::to_string(n) + " bytes to stage a GPU tensor through");
}

// Runs `move(offset, length, buffer)` for each piece of `n` bytes, each with
// its own page-locked buffer, as the staging budget admits them; completes
// once every piece has settled. After a piece fails, pieces not started yet
// are skipped.
template <class F>
Future<void> by_pieces(std::size_t n, F move) {
  std::vector<Future<void>> parts;
  auto failed = std::make_shared<std::atomic<bool>>(false);
  for (std::size_t off = 0; off < n; off += kDevicePiece) {
    const std::size_t len = std::min(kDevicePiece, n - off);
    auto promise =
        std::make_shared<Promise<void>>(Status(Errc::internal, "a GPU staging piece was dropped"));
    parts.push_back(promise->future());
    staging_budget().admit(len, [move, off, len, promise, failed] {
      auto done = [len, promise, failed](const Result<void>& r) {
        if (!r.ok()) failed->store(true);
        staging_budget().release(len);
        promise->set(r);
      };
      if (failed->load()) {
        return done(Status(Errc::transport_error, "skipped after another piece failed"));
      }
      auto buf = internal::cuda::pinned(len);
      if (!buf) return done(no_pinned_memory(len));
      move(off, len, std::move(buf)).on_complete(done);
    });
  }
  return settle_all(std::move(parts));
}

// Copies `n` bytes between GPU and host memory on a copy engine thread.
Future<void> device_copy(void* dst, const void* src, std::size_t n, const char* what) {
  return transports::CopyEngine::instance().run_checked(
      [dst, src, n, what] { return internal::cuda::copy_bytes(dst, src, n).with_context(what); });
}

// Writes `n` bytes of GPU memory at `src` into `region` over `c`.
Future<void> write_from_device(const std::shared_ptr<VolumeConn>& c, const wire::RegionRef& region,
                               const std::byte* src, std::size_t n) {
  return by_pieces(n, [c, region, src](std::size_t off, std::size_t len,
                                       std::shared_ptr<std::byte> buf) {
    return device_copy(buf.get(), src + off, len, "GPU to host").then([c, region, off, buf, len]() {
      return c->transport->write(region, off, buf.get(), len).then([buf] {});
    });
  });
}

// Reads `n` bytes of `region` over `c` into GPU memory at `dst`.
Future<void> read_into_device(const std::shared_ptr<VolumeConn>& c, const wire::RegionRef& region,
                              std::byte* dst, std::size_t n) {
  return by_pieces(
      n, [c, region, dst](std::size_t off, std::size_t len, std::shared_ptr<std::byte> buf) {
        std::byte* to = dst + off;
        return c->transport->read(region, off, buf.get(), len).then([buf, to, len]() {
          return device_copy(to, buf.get(), len, "host to GPU").then([buf] {});
        });
      });
}

// Calls `f` with a reply's values, once: the first of reply, error or
// peer-down wins; later ones are dropped.
template <class F, class Args>
struct OnReply;
template <class F, class... Args>
struct OnReply<F, caf::detail::type_list<Args...>> {
  std::shared_ptr<bool> done;
  std::function<void()> settle;
  F f;
  void operator()(Args... xs) {
    if (*done) return;
    *done = true;
    settle();
    f(std::forward<Args>(xs)...);
  }
};

/// A request to `peer` that fails with Errc::unavailable as soon as the
/// peer is known to be down, instead of waiting for its timeout. Used as
/// `ask(self, peer, args...).then(on_reply, on_error)`, like CAF's request.
template <class Handle, class... Ts>
struct Ask {
  client_pointer self;
  Handle peer;
  std::tuple<Ts...> args;
  caf::actor also;                       // a second peer whose death fails the request too
  std::chrono::milliseconds timeout{0};  // 0: the configured request timeout

  /// A deadline other than the configured request timeout.
  Ask& within(std::chrono::milliseconds t) {
    timeout = t;
    return *this;
  }

  /// Fails the request at once also if `other` goes down (the peer will
  /// ask it on our behalf).
  Ask& also_watch(caf::actor other) {
    also = std::move(other);
    return *this;
  }

  template <class F, class G>
  void then(F on_reply, G on_error) {
    auto& st = self->state;
    auto done = std::make_shared<bool>(false);
    std::vector<caf::actor_addr> addrs{peer.address()};
    if (st.monitored.insert(addrs.front()).second) self->monitor(peer);
    if (also) {
      addrs.push_back(also.address());
      if (st.monitored.insert(addrs.back()).second) self->monitor(also);
    }
    const auto token = st.next_wait++;
    for (const auto& addr : addrs) {
      st.waiting[addr][token] = [done, on_error](caf::error& e) mutable {
        if (*done) return;
        *done = true;
        on_error(e);
      };
    }
    auto client = self;
    auto settle = [client, addrs, token] {
      for (const auto& addr : addrs) {
        auto it = client->state.waiting.find(addr);
        if (it == client->state.waiting.end()) continue;
        it->second.erase(token);
        if (it->second.empty()) client->state.waiting.erase(it);
      }
    };
    using Traits = caf::detail::get_callable_trait<F>;
    std::apply(
        [&](auto&... xs) {
          self->request(peer, timeout.count() > 0 ? timeout : st.cfg.request_timeout, xs...)
              .then(OnReply<F, typename Traits::arg_types>{done, settle, std::move(on_reply)},
                    [done, settle, on_error](caf::error& e) mutable {
                      if (*done) return;
                      *done = true;
                      settle();
                      on_error(e);
                    });
        },
        args);
  }
};

template <class Handle, class... Ts>
Ask<Handle, std::decay_t<Ts>...> ask(client_pointer self, const Handle& peer, Ts&&... xs) {
  return Ask<Handle, std::decay_t<Ts>...>{self, peer, std::make_tuple(std::forward<Ts>(xs)...),
                                          caf::actor(), std::chrono::milliseconds(0)};
}

void controller_gone(client_pointer self, const std::string& why);

// A monitored peer went down: fail what waits on it, forget connections and
// locations through it.
void peer_down(client_pointer self, const caf::down_msg& msg) {
  auto& st = self->state;
  st.monitored.erase(msg.source);
  std::string name = "peer";
  if (msg.source == st.controller.address()) {
    name = "the controller";
  } else if (msg.source == st.strategy.address()) {
    name = "the strategy";
  }
  for (auto it = st.conns.begin(); it != st.conns.end();) {
    if (it->second->handle.address() != msg.source) {
      ++it;
      continue;
    }
    const std::string id = it->first;
    name = "volume '" + id + "'";
    if (st.home_volume == id) st.home_volume.clear();
    for (auto loc = st.locations.begin(); loc != st.locations.end();) {
      const auto& shards = loc->second.shards;
      const bool there = std::any_of(shards.begin(), shards.end(),
                                     [&](const wire::ShardRecord& s) { return s.volume_id == id; });
      loc = there ? st.locations.erase(loc) : std::next(loc);
    }
    it = st.conns.erase(it);
  }
  const std::string why = name + " went down (" + caf::to_string(msg.reason) + ")";
  if (name == "the controller" || name == "the strategy") st.control_down = why;
  if (name == "the controller") controller_gone(self, why);
  st.log->warn("client rank {}: {}", st.cfg.me.rank, why);
  auto w = st.waiting.find(msg.source);
  if (w == st.waiting.end()) return;
  auto waiters = std::move(w->second);
  st.waiting.erase(w);
  auto err = internal::to_caf_error(Status(Errc::unavailable, why));
  for (auto& [token, fail] : waiters) fail(err);
}

std::string describe(const std::string& op, const std::vector<std::string>& keys) {
  if (keys.size() == 1) return op + " '" + keys.front() + "'";
  return op + " of " + std::to_string(keys.size()) + " keys" +
         (keys.empty() ? std::string() : " (first '" + keys.front() + "')");
}

// -- volume connections --------------------------------------------------

void finish_conn(client_pointer self, const std::string& id, const ConnResult& r) {
  auto waiters = std::move(self->state.conn_waiters[id]);
  self->state.conn_waiters.erase(id);
  if (r.ok()) self->state.conns[id] = *r;
  for (auto& w : waiters) w(r);
}

// Asks the volume for its endpoints and opens the chosen transport.
void connect(client_pointer self, const wire::VolumeInfo& info,
             const storage_volume_actor& handle) {
  ask(self, handle, endpoints_atom::value)
      .then(
          [=](const std::vector<transports::EndpointInfo>& offered) {
            auto& st = self->state;
            auto& registry = transports::builtin_registry();
            auto chosen = transports::select_transport(registry, offered, st.cfg.forced_transport,
                                                       info.volume_id);
            if (!chosen.ok()) return finish_conn(self, info.volume_id, chosen.status());
            auto factory = registry.find(chosen->transport);
            if (!factory.ok()) return finish_conn(self, info.volume_id, factory.status());
            transports::ClientContext ctx{&self->system(), st.cfg.transport_config};
            auto transport = factory->make_client(ctx, *chosen);
            if (!transport.ok()) {
              return finish_conn(
                  self, info.volume_id,
                  transport.status().with_context("volume '" + info.volume_id + "'"));
            }
            st.log->info("client rank {} -> volume '{}': transport {}", st.cfg.me.rank,
                         info.volume_id, chosen->transport);
            auto conn = std::make_shared<VolumeConn>();
            conn->info = info;
            conn->handle = handle;
            conn->transport = std::shared_ptr<transports::Transport>(std::move(transport).value());
            finish_conn(self, info.volume_id, conn);
          },
          [=](caf::error& e) {
            finish_conn(self, info.volume_id,
                        from_caf_error(e, "endpoints of volume '" + info.volume_id + "'"));
          });
}

// Calls `k` with the connection to volume `id`, setting it up on first use.
void with_volume(client_pointer self, const std::string& id, ConnCallback k) {
  auto& st = self->state;
  if (auto it = st.conns.find(id); it != st.conns.end()) return k(it->second);
  auto& waiters = st.conn_waiters[id];
  waiters.push_back(std::move(k));
  if (waiters.size() > 1) return;  // already being set up
  ask(self, st.controller, volume_atom::value, id)
      .then([=](const wire::VolumeInfo& info,
                const storage_volume_actor& handle) { connect(self, info, handle); },
            [=](caf::error& e) {
              auto s = from_caf_error(e, "volume '" + id + "'");
              // Every caller learnt the id from the controller or the strategy
              // moments ago: a volume the controller no longer knows went down
              // (its down message reached the controller before ours reached
              // us) or left.
              if (s.code() == Errc::not_found) {
                s = Status(Errc::unavailable, "volume '" + id + "' went down or left the store");
              }
              finish_conn(self, id, s);
            });
}

void select_home(client_pointer self, std::function<void(const ConnResult&)> finish,
                 std::chrono::steady_clock::time_point deadline);

// Calls `k` with the connection to the volume the strategy picks for us.
void with_home_volume(client_pointer self, ConnCallback k) {
  auto& st = self->state;
  if (!st.home_volume.empty()) {
    return with_volume(self, st.home_volume, [self, k = std::move(k)](const ConnResult& r) {
      if (!r.ok()) self->state.home_volume.clear();  // ask the strategy next time
      k(r);
    });
  }
  st.home_waiters.push_back(std::move(k));
  if (st.home_pending) return;
  st.home_pending = true;
  auto finish = [self](const ConnResult& r) {
    auto& st = self->state;
    st.home_pending = false;
    auto waiters = std::move(st.home_waiters);
    st.home_waiters.clear();
    for (auto& w : waiters) w(r);
  };
  select_home(self, finish, std::chrono::steady_clock::now() + st.cfg.request_timeout);
}

// Asks the strategy for this client's volume. While the strategy answers
// Errc::unavailable (the volume this client should use has not registered
// yet: ranks start in any order), asks again every 50 ms until `deadline`.
void select_home(client_pointer self, std::function<void(const ConnResult&)> finish,
                 std::chrono::steady_clock::time_point deadline) {
  auto& st = self->state;
  ask(self, st.strategy, select_atom::value, st.cfg.me)
      .then(
          [=](const wire::VolumeInfo& info, const storage_volume_actor&) {
            // Remembered only once connected: a volume that died in the
            // meantime must not stay this client's home.
            with_volume(self, info.volume_id,
                        [self, finish, id = info.volume_id](const ConnResult& r) {
                          if (r.ok()) self->state.home_volume = id;
                          finish(r);
                        });
          },
          [=](caf::error& e) {
            auto s = from_caf_error(e, "strategy select");
            const bool retry =
                s.code() == Errc::unavailable && self->state.control_down.empty() &&
                std::chrono::steady_clock::now() + std::chrono::milliseconds(50) < deadline;
            if (!retry) return finish(s);
            self->delayed_send(self, std::chrono::milliseconds(50), run_atom::value,
                               internal::Closure{[=] { select_home(self, finish, deadline); }});
          });
}

// -- put -----------------------------------------------------------------

struct PutOp {
  PutCall call;
  std::string what;
  std::shared_ptr<VolumeConn> conn;
  std::vector<wire::RegionRef> regions;
  std::vector<Tensor> packed;  // contiguous copies of strided sources
  // Shards of sharded keys (PutItem::slice): committed with put_shards.
  bool sharded = false;
  // A put announced as a stream: which records' fills were reported.
  bool streaming = false;
  std::vector<bool> reported;

  void fail(const Status& s) { call.promise->set_error(s.with_context(what)); }
};

// Drops the cached locations of every key starting with one of `prefixes`
// (a state dict's keys, about to be replaced or retired).
void forget_locations_under(ClientState& st, const std::vector<std::string>& prefixes) {
  for (const auto& p : prefixes) {
    for (auto it = st.locations.begin(); it != st.locations.end();) {
      it = it->first.compare(0, p.size(), p) == 0 ? st.locations.erase(it) : std::next(it);
    }
  }
}

// Gives staged (uncommitted) regions back to their volume for reuse.
void give_back(client_pointer self, const storage_volume_actor& volume,
               const std::vector<wire::RegionRef>& regions,
               const std::vector<wire::RegionRef>& more = {}) {
  std::vector<std::uint64_t> ids;
  for (const auto& r : regions) ids.push_back(r.region_id);
  for (const auto& r : more) ids.push_back(r.region_id);
  if (!ids.empty()) self->send(volume, release_atom::value, ids);
}

// Gives a put's staged regions back to the volume: its own and the ones
// written in place (PutCall::staged_items), which share its volume.
void release_staged(client_pointer self, const std::shared_ptr<PutOp>& op) {
  if (op->conn) give_back(self, op->conn->handle, op->regions, op->call.staged.regions);
}

// The records a put commits: the items written in place first, then the
// others, whose objects are op->regions when staged already, else left for
// the volume to fill (stage_commit).
std::vector<wire::KeyRecord> put_records(const std::shared_ptr<PutOp>& op) {
  std::vector<wire::KeyRecord> records;
  records.reserve(op->call.staged_items.size() + op->call.items.size());
  auto add = [&](const PutItem& item, const wire::RegionRef* region) {
    wire::KeyRecord r;
    r.key = item.key;
    r.kind = item.kind;
    r.dtype = item.view.dtype();
    r.shape = item.slice ? item.slice->global_shape() : item.view.shape();
    if (!op->call.replace_under.empty()) r.group = op->call.replace_under.front();
    r.shards.push_back(wire::ShardRecord{item.slice ? *item.slice : TensorSlice::full(r.shape),
                                         op->conn->info.volume_id, region ? region->region_id : 0,
                                         region ? region->nbytes : item.view.nbytes(),
                                         item.replicas, item.checksum});
    records.push_back(std::move(r));
  };
  for (std::size_t i = 0; i < op->call.staged_items.size(); ++i) {
    add(op->call.staged_items[i], &op->call.staged.regions[i]);
  }
  for (std::size_t i = 0; i < op->call.items.size(); ++i) {
    add(op->call.items[i], i < op->regions.size() ? &op->regions[i] : nullptr);
  }
  return records;
}

// Remembers where the committed keys live, so a get of them locates nothing.
void cache_committed(client_pointer self, std::vector<wire::KeyRecord> records,
                     const std::vector<std::uint64_t>& versions) {
  auto& st = self->state;
  if (st.locations.size() + records.size() > st.cfg.max_cached_locations) st.locations.clear();
  for (std::size_t i = 0; i < records.size() && i < versions.size(); ++i) {
    records[i].version = versions[i];
    st.locations[records[i].key] = std::move(records[i]);
  }
}

// The stream of a put that will not commit ends; its readers are told why.
void abort_stream(client_pointer self, const std::shared_ptr<PutOp>& op, const Status& why) {
  if (!op->streaming) return;
  op->streaming = false;
  self->send(self->state.controller, stream_abort_atom::value, op->call.replace_under.front(),
             why.to_string());
}

// Tells the controller (and so the stream's readers) that record `i` of a
// streamed put is filled; each record once.
void report_filled(client_pointer self, const std::shared_ptr<PutOp>& op,
                   std::vector<std::uint64_t> records) {
  if (!op->streaming) return;
  std::vector<std::uint64_t> fresh;
  for (auto i : records) {
    if (i < op->reported.size() && !op->reported[i]) {
      op->reported[i] = true;
      fresh.push_back(i);
    }
  }
  if (!fresh.empty()) {
    self->send(self->state.controller, stream_progress_atom::value, op->call.replace_under.front(),
               fresh);
  }
}

void commit_put(client_pointer self, const std::shared_ptr<PutOp>& op) {
  auto records = put_records(op);
  auto& st = self->state;
  auto on_error = [=](caf::error& e) {
    // Release the staged objects only when the controller answered
    // and refused. After a timeout it may still have committed them,
    // and releasing would leave the key pointing at freed objects;
    // they stay staged instead, and the volume drops them once this
    // client is gone (VolumeConfig::orphan_grace).
    auto s = from_caf_error(e, "commit at controller");
    // Only the controller's own refusal (a meshstore error other than our
    // peer-down/timeout verdicts) proves nothing was committed.
    const bool refused = e.category() == internal::kErrorCategory && s.code() != Errc::timeout &&
                         s.code() != Errc::unavailable;
    if (refused) release_staged(self, op);
    abort_stream(self, op, s);
    op->fail(s);
  };
  if (op->sharded) {
    // Shards commit at the controller once they cover their keys.
    for (const auto& r : records) st.locations.erase(r.key);
    const bool group = !op->call.group_members.empty();
    if (group) forget_locations_under(st, op->call.replace_under);
    ask(self, st.controller, put_shards_atom::value, records,
        group ? op->call.replace_under.front() : std::string(), op->call.group_members,
        op->call.group_layout)
        .then(
            [=](const std::vector<std::uint64_t>& versions) {
              op->call.promise->set_value(versions);
            },
            on_error);
    return;
  }
  if (!op->call.replace_under.empty()) {
    forget_locations_under(st, op->call.replace_under);
    ask(self, st.controller, replace_atom::value, records, op->call.replace_under, true)
        .then(
            [=](const std::vector<std::uint64_t>& versions) mutable {
              cache_committed(self, std::move(records), versions);
              op->call.promise->set_value(versions);
            },
            on_error);
    return;
  }
  ask(self, st.controller, notify_put_batch_atom::value, records)
      .then(
          [=](const std::vector<std::uint64_t>& versions) mutable {
            cache_committed(self, std::move(records), versions);
            op->call.promise->set_value(versions);
          },
          on_error);
}

void handle_put(client_pointer self, PutCall call) {
  auto op = std::make_shared<PutOp>();
  std::vector<std::string> keys;
  for (const auto& i : call.items) keys.push_back(i.key);
  op->what = describe(call.op, keys);
  op->call = std::move(call);
  op->sharded = !op->call.group_members.empty() ||
                std::any_of(op->call.items.begin(), op->call.items.end(),
                            [](const PutItem& i) { return i.slice.has_value(); });
  with_home_volume(self, [=](const ConnResult& conn) {
    if (!conn.ok()) return op->fail(conn.status());
    op->conn = *conn;
    if (op->call.staged_items.size() != op->call.staged.regions.size()) {
      return op->fail(Status(Errc::internal, "staged items and regions differ in number"));
    }
    if (!op->call.staged_items.empty() && op->conn->info.volume_id != op->call.staged.volume_id) {
      // This client's volume changed (the old one went down) since the
      // staging; its regions cannot be committed elsewhere.
      return op->fail(Status(Errc::unavailable, "the staged memory lies on volume '" +
                                                    op->call.staged.volume_id +
                                                    "', no longer this client's volume"));
    }
    std::vector<wire::StageRequest> reqs;
    std::uint64_t total = 0;
    bool device = false;  // GPU tensors never travel inline
    for (const auto& item : op->call.items) {
      total += item.view.nbytes();
      if (on_device(item.view)) device = true;
    }
    const auto caps = op->conn->transport->capabilities();
    // Small calls carry their bytes in the stage request: no transfer.
    const bool inline_data = total <= wire::kInlineBytes && !device;
    for (const auto& item : op->call.items) {
      wire::StageRequest r;
      r.key = item.key;
      r.nbytes = item.view.nbytes();
      // cuda-ipc: a device tensor's object goes to the same GPU of the volume.
      if (caps.device_memory && on_device(item.view)) r.device = item.view.device().index;
      if (inline_data) {
        r.has_data = true;
        r.data.resize(r.nbytes);
        if (r.nbytes > 0) pack_to(item.view, r.data.data());
      }
      reqs.push_back(std::move(r));
    }
    if (inline_data && op->call.replace_under.empty() && !op->sharded) {
      // One round trip: the volume stages the bytes and commits at the
      // controller; a refusal leaves nothing staged.
      auto records = put_records(op);
      ask(self, op->conn->handle, stage_commit_atom::value, reqs, records,
          caf::actor_cast<caf::actor>(self->state.controller))
          .also_watch(caf::actor_cast<caf::actor>(self->state.controller))
          .then(
              [=](const std::vector<std::uint64_t>& versions,
                  const std::vector<std::uint64_t>& objects) mutable {
                if (versions.size() != records.size() || objects.size() != records.size()) {
                  return op->fail(Status(Errc::protocol_error,
                                         "volume committed " + std::to_string(versions.size()) +
                                             " versions for " + std::to_string(records.size()) +
                                             " keys"));
                }
                for (std::size_t i = 0; i < records.size(); ++i) {
                  records[i].shards.front().object_id = objects[i];
                }
                cache_committed(self, std::move(records), versions);
                op->call.promise->set_value(versions);
              },
              [=](caf::error& e) {
                op->fail(from_caf_error(
                    e, "stage and commit at volume '" + op->conn->info.volume_id + "'"));
              });
      return;
    }
    ask(self, op->conn->handle, stage_atom::value, reqs)
        .then(
            [=](const std::vector<wire::RegionRef>& regions) {
              op->regions = regions;
              if (regions.size() != op->call.items.size()) {
                release_staged(self, op);
                return op->fail(Status(Errc::protocol_error,
                                       "volume staged " + std::to_string(regions.size()) +
                                           " objects for " + std::to_string(op->call.items.size()) +
                                           " keys"));
              }
              if (inline_data) return commit_put(self, op);  // the bytes came with the stage
              // The records index the items after the ones written in place.
              const std::uint64_t first = op->call.staged_items.size();
              if (!op->call.stream_manifest.empty() && !op->call.replace_under.empty()) {
                // Readers may copy each object as soon as it is filled.
                op->streaming = true;
                op->reported.assign(first + regions.size(), false);
                std::vector<std::uint64_t> filled;
                for (std::uint64_t i = 0; i < first; ++i) filled.push_back(i);
                for (std::size_t i = 0; i < regions.size(); ++i) {
                  if (op->call.items[i].view.nbytes() == 0) filled.push_back(first + i);
                }
                for (auto i : filled) op->reported[i] = true;
                self->send(self->state.controller, stream_open_atom::value,
                           op->call.replace_under.front(), op->call.stream_manifest,
                           put_records(op), filled);
              }
              std::vector<Future<void>> writes;
              writes.reserve(regions.size());
              for (std::size_t i = 0; i < regions.size(); ++i) {
                const auto& view = op->call.items[i].view;
                const void* src = view.data();
                if (on_device(view) && !view.is_contiguous()) {
                  // The store packs these on their device before the call.
                  writes.push_back(make_error_future<void>(
                      Status(Errc::internal, "a non-contiguous GPU view reached the client")));
                  continue;
                }
                if (on_device(view) && !caps.device_copies) {
                  writes.push_back(write_from_device(
                      op->conn, regions[i], static_cast<const std::byte*>(src), view.nbytes()));
                } else {
                  if (!view.is_contiguous()) {
                    auto tmp = Tensor::empty(view.dtype(), view.shape());
                    if (!tmp.ok()) {
                      writes.push_back(make_error_future<void>(tmp.status()));
                      continue;
                    }
                    pack_to(view, tmp->data());
                    src = tmp->data();
                    op->packed.push_back(std::move(tmp).value());
                  }
                  writes.push_back(op->conn->transport->write(
                      regions[i], 0, static_cast<const std::byte*>(src), view.nbytes()));
                }
                if (op->streaming) {
                  // Registered before settle_all's own callback, so this
                  // report reaches the actor before the commit does.
                  await(self, writes.back(), [=](const Result<void>& r) {
                    if (r.ok()) report_filled(self, op, {first + i});
                  });
                }
              }
              await(self, settle_all(std::move(writes)), [=](const Result<void>& r) {
                op->packed.clear();
                if (!r.ok()) {
                  release_staged(self, op);
                  abort_stream(self, op, r.status().with_context(op->what));
                  return op->fail(r.status());
                }
                std::vector<std::uint64_t> all;
                for (std::uint64_t i = 0; i < op->reported.size(); ++i) all.push_back(i);
                report_filled(self, op, std::move(all));
                commit_put(self, op);
              });
            },
            [=](caf::error& e) {
              op->fail(from_caf_error(e, "stage at volume '" + op->conn->info.volume_id + "'"));
            });
  });
}

// Stages regions at the home volume and maps them writable (zero-copy
// publishing); all or nothing.
void handle_stage(client_pointer self, StageCall call) {
  const std::string what = describe(call.op, call.keys);
  auto promise = call.promise;
  auto c = std::make_shared<StageCall>(std::move(call));
  with_home_volume(self, [=](const ConnResult& conn_or) {
    if (!conn_or.ok()) {
      promise->set_error(conn_or.status().with_context(what));
      return;
    }
    auto conn = *conn_or;
    if (!conn->transport->capabilities().maps_memory) {
      promise->set_error(Status(Errc::unsupported,
                                what + ": volume '" + conn->info.volume_id + "' is reached over " +
                                    std::string(conn->transport->name()) +
                                    ", which cannot map its memory into this process"));
      return;
    }
    std::vector<wire::StageRequest> reqs;
    for (std::size_t i = 0; i < c->keys.size(); ++i) {
      wire::StageRequest r;
      r.key = c->keys[i];
      r.nbytes = c->nbytes[i];
      reqs.push_back(std::move(r));
    }
    ask(self, conn->handle, stage_atom::value, reqs)
        .then(
            [=](const std::vector<wire::RegionRef>& regions) {
              StagedRegions out;
              out.volume_id = conn->info.volume_id;
              out.regions = regions;
              if (regions.size() != reqs.size()) {
                give_back(self, conn->handle, regions);
                promise->set_error(Status(Errc::protocol_error,
                                          what + ": volume staged " +
                                              std::to_string(regions.size()) + " objects for " +
                                              std::to_string(reqs.size()) + " keys"));
                return;
              }
              for (const auto& r : regions) {
                auto mem = conn->transport->map_writable(r);
                if (!mem.ok()) {
                  give_back(self, conn->handle, regions);
                  promise->set_error(mem.status().with_context(what));
                  return;
                }
                out.memory.push_back(std::move(mem).value());
              }
              promise->set_value(std::move(out));
            },
            [=](caf::error& e) {
              promise->set_error(
                  from_caf_error(e, what + ": stage at volume '" + conn->info.volume_id + "'"));
            });
  });
}

// Gives staged regions back uncommitted. A volume this client no longer
// talks to reclaims them itself when the client goes.
void handle_release_staged(client_pointer self, const ReleaseStagedCall& call) {
  auto it = self->state.conns.find(call.staged.volume_id);
  if (it != self->state.conns.end() && it->second) {
    give_back(self, it->second->handle, call.staged.regions);
  }
}

// -- get -----------------------------------------------------------------

// Copies the elements of `region` (a box inside both) from a row-major
// buffer holding box `from` to one holding box `to`.
// `src` holds box `from` minus its first `skip` elements (a range read of it).
void copy_box(const std::byte* src, const TensorSlice& from, std::byte* dst, const TensorSlice& to,
              const TensorSlice& region, std::size_t elsize, std::int64_t skip = 0) {
  const std::size_t nd = region.global_shape().size();
  if (region.empty()) return;
  if (nd == 0) {
    std::memcpy(dst, src, elsize);
    return;
  }
  const auto sstr = contiguous_strides(from.local_shape());
  const auto dstr = contiguous_strides(to.local_shape());
  const std::size_t run = static_cast<std::size_t>(region.local_shape()[nd - 1]) * elsize;
  Shape idx(nd, 0);  // position inside `region`, the last dim fixed at 0
  for (;;) {
    std::int64_t so = 0, d = 0;
    for (std::size_t k = 0; k < nd; ++k) {
      const auto g = region.offsets()[k] + idx[k];
      so += (g - from.offsets()[k]) * sstr[k];
      d += (g - to.offsets()[k]) * dstr[k];
    }
    std::memcpy(dst + d * static_cast<std::int64_t>(elsize),
                src + (so - skip) * static_cast<std::int64_t>(elsize), run);
    std::size_t k = nd - 1;
    for (;;) {
      if (k == 0) return;
      --k;
      if (++idx[k] < region.local_shape()[k]) break;
      idx[k] = 0;
    }
  }
}

// Element offset, in the row-major box `from`, of global position `at`.
std::int64_t offset_in(const TensorSlice& from, const Shape& at) {
  const auto strides = contiguous_strides(from.local_shape());
  std::int64_t off = 0;
  for (std::size_t k = 0; k < at.size(); ++k) off += (at[k] - from.offsets()[k]) * strides[k];
  return off;
}

// Where a read into `dst` lands: `dst` itself when contiguous (and, with
// `host_only`, in host memory), else a contiguous host temporary queued in
// `unpack`, copied into `dst` afterwards by finish_unpack().
Result<std::byte*> contiguous_target(const TensorView& dst,
                                     std::vector<std::pair<Tensor, TensorView>>& unpack,
                                     bool host_only = false) {
  if (dst.is_contiguous() && !(host_only && on_device(dst))) {
    return static_cast<std::byte*>(dst.data());
  }
  auto tmp = Tensor::empty(dst.dtype(), dst.shape());
  if (!tmp.ok()) return tmp.status();
  auto* p = static_cast<std::byte*>(tmp->data());
  unpack.emplace_back(std::move(tmp).value(), dst);
  return p;
}

// Copies the temporaries of contiguous_target() into their destinations:
// GPU ones with CUDA (strided views by a kernel), the others by the CPU.
Status finish_unpack(std::vector<std::pair<Tensor, TensorView>>& unpack) {
  Status first;
  for (auto& [tmp, dst] : unpack) {
    if (on_device(dst)) {
      auto s = internal::cuda::to_device(dst, static_cast<const std::byte*>(tmp.data()));
      if (!s.ok() && first.ok()) first = s.with_context("host to " + dst.device().to_string());
    } else {
      unpack_from(tmp.data(), dst);
    }
  }
  unpack.clear();
  return first;
}

struct ReadTarget {
  std::uint64_t object_id = 0;
  std::byte* dst = nullptr;
  std::size_t nbytes = 0;
  // `dst` is GPU memory.
  bool device = false;
  // Sharded reads: copy only `region` of this shard (box `from`) into
  // `dst`, which is laid out as box `to`, instead of the whole object.
  struct Box {
    TensorSlice from, to, region;
    std::size_t elsize = 1;
  };
  std::optional<Box> box;
  // GetMode::view: where the tensor goes (dst is then null), and its type.
  Tensor* view = nullptr;
  DType dtype = DType::uint8;
  Shape shape;
};

// Closes a read lease when the last zero-copy view of it goes, from any
// thread: the close goes through the client actor (leases are keyed by
// their client). Holds only weak references: views may outlive the store.
struct LeaseGuard {
  caf::actor_addr client;
  caf::actor_addr volume;
  std::uint64_t lease_id = 0;
  ~LeaseGuard() {
    auto hdl = caf::actor_cast<caf::actor>(client);
    if (!hdl) return;
    auto self = caf::actor_cast<client_pointer>(hdl);  // runs only inside that actor
    caf::anon_send(hdl, run_atom::value, internal::Closure{[self, volume = volume, id = lease_id] {
                     auto v = caf::actor_cast<storage_volume_actor>(volume);
                     if (v) self->send(v, close_read_atom::value, id);
                   }});
  }
};

// Fills each view target with a read-only tensor over the mapped region, or
// returns false (nothing filled) when the transport cannot map.
Result<bool> map_views(client_pointer self, const std::shared_ptr<VolumeConn>& c,
                       const wire::ReadLease& lease, std::vector<ReadTarget>& targets) {
  std::vector<std::shared_ptr<std::byte>> mapped;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    auto m = c->transport->map_read_only(lease.regions[i]);
    if (!m.ok()) {
      if (m.status().code() == Errc::unsupported) return false;
      return m.status();
    }
    mapped.push_back(std::move(m).value());
  }
  auto guard = std::make_shared<LeaseGuard>();
  guard->client = self->address();
  guard->volume = c->handle.address();
  guard->lease_id = lease.lease_id;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    auto memory = std::move(mapped[i]);
    std::byte* p = memory.get();
    std::shared_ptr<std::byte> storage(p, [memory, guard](std::byte*) mutable {
      memory.reset();
      guard.reset();
    });
    *targets[i].view = Tensor::wrap(std::move(storage), targets[i].dtype, targets[i].shape, true);
  }
  return true;
}

struct GetOp {
  GetCall call;
  std::string what;
  int attempt = 0;
  bool use_cache = true;
  GetOutput out;
  // Set when a volume no longer had an object we located: a concurrent
  // overwrite or remove released it, so locating afresh will help.
  bool stale = false;
  // Once a read has lost that race, it locates with a pin (the controller
  // holds the located objects back from release until it unpins), so
  // writers replacing the key continuously cannot starve it.
  bool pin_next = false;
  std::uint64_t pin = 0;           // the pin held, 0 for none
  client_pointer owner = nullptr;  // the client running it, which holds the pin
  // For strided destinations: the contiguous staging tensor and its target.
  std::vector<std::pair<Tensor, TensorView>> unpack;

  // Ends the pin, if any (the controller would end it at its deadline).
  void unpin() {
    if (pin == 0) return;
    owner->send(owner->state.controller, unpin_atom::value, pin);
    pin = 0;
  }
  void fail(const Status& s) {
    unpin();
    call.promise->set_error(s.with_context(what));
  }
  // For errors whose message already names the key.
  void fail_named(const Status& s) {
    unpin();
    call.promise->set_error(s.with_context(call.op));
  }
};

// Calls `k` with the records of `keys`: from the cache when allowed and
// complete, else from the controller.
void locate(client_pointer self, const std::vector<std::string>& keys, bool use_cache,
            std::function<void(Result<std::vector<wire::KeyRecord>>)> k) {
  auto& st = self->state;
  if (use_cache) {
    std::vector<wire::KeyRecord> cached;
    for (const auto& key : keys) {
      auto it = st.locations.find(key);
      if (it == st.locations.end()) break;
      cached.push_back(it->second);
    }
    if (cached.size() == keys.size()) return k(std::move(cached));
  }
  ask(self, st.controller, locate_atom::value, keys)
      .then(
          [=](std::vector<wire::KeyRecord>& records) {
            auto& st = self->state;
            if (st.locations.size() + records.size() > st.cfg.max_cached_locations)
              st.locations.clear();
            for (const auto& r : records) {
              if (r.found()) {
                st.locations[r.key] = r;
              } else {
                st.locations.erase(r.key);
              }
            }
            k(std::move(records));
          },
          [=](caf::error& e) { k(from_caf_error(e, "locate at controller")); });
}

// Copies a target's box out of its (leased) region: straight from the
// mapping where the transport maps memory (host regions only: a region in
// GPU memory, over cuda-ipc, has no mapping), else through a range read of
// the bytes from the box's first element to its last.
Future<void> read_box(const std::shared_ptr<VolumeConn>& c, const wire::RegionRef& region,
                      const ReadTarget& t) {
  const auto b = *t.box;
  std::byte* dst = t.dst;
  if (c->transport->capabilities().maps_memory && region.device < 0) {
    auto mem = c->transport->map_writable(region);
    if (!mem.ok()) return make_error_future<void>(mem.status());
    auto src = std::move(mem).value();
    auto& engine = transports::CopyEngine::instance();
    auto in_src = b.region.relative_to(b.from);
    auto in_dst = b.region.relative_to(b.to);
    if (in_src.ok() && in_dst.ok() && in_src->is_contiguous_in_global() &&
        in_dst->is_contiguous_in_global()) {
      // One run in both (whole rows of a row shard): one copy, split over
      // the engine's threads.
      const auto n = static_cast<std::size_t>(b.region.numel()) * b.elsize;
      const auto from = static_cast<std::size_t>(in_src->global_flat_offset()) * b.elsize;
      const auto to = static_cast<std::size_t>(in_dst->global_flat_offset()) * b.elsize;
      return engine.copy(dst + to, src.get() + from, n, std::size_t{8} << 20).then([src] {});
    }
    // Strided: the rows (first dimension) split over the engine's threads.
    // (A 0-dim box is one run, copied above.)
    const std::int64_t rows = b.region.local_shape()[0];
    const std::int64_t pieces = std::max<std::int64_t>(
        1, std::min<std::int64_t>(engine.threads(),
                                  static_cast<std::int64_t>(b.region.numel() * b.elsize >> 20)));
    std::vector<Future<void>> parts;
    for (std::int64_t p = 0; p < pieces; ++p) {
      const auto [lo, hi] = chunk_range(rows, pieces, p);
      if (lo == hi) continue;
      Shape off = b.region.offsets(), len = b.region.local_shape();
      off[0] += lo;
      len[0] = hi - lo;
      auto part = TensorSlice::make(b.region.global_shape(), off, len);
      if (!part.ok()) return make_error_future<void>(part.status());
      parts.push_back(engine.run(
          [src, b, dst, part = *part] { copy_box(src.get(), b.from, dst, b.to, part, b.elsize); }));
    }
    return settle_all(std::move(parts));
  }
  Shape last = b.region.offsets();
  for (std::size_t k = 0; k < last.size(); ++k) last[k] += b.region.local_shape()[k] - 1;
  const std::int64_t lo = offset_in(b.from, b.region.offsets());
  const std::int64_t hi = offset_in(b.from, last) + 1;
  const auto n = static_cast<std::size_t>(hi - lo) * b.elsize;
  auto tmp = std::make_shared<std::vector<std::byte>>();
  try {
    tmp->resize(n);
  } catch (const std::bad_alloc&) {
    return make_error_future<void>(Status(
        Errc::out_of_capacity, "cannot allocate " + std::to_string(n) + " bytes to read a box"));
  }
  return c->transport->read(region, static_cast<std::uint64_t>(lo) * b.elsize, tmp->data(), n)
      .then(
          [tmp, b, dst, lo] { copy_box(tmp->data(), b.from, dst, b.to, b.region, b.elsize, lo); });
}

// Pins the objects at one volume, reads them, unpins. Sets `*stale` when the
// volume no longer has one of them.
Future<void> read_from_volume(client_pointer self, const std::string& volume_id,
                              std::vector<ReadTarget> targets, std::shared_ptr<bool> stale) {
  auto promise =
      std::make_shared<Promise<void>>(Status(Errc::shutdown, "client stopped during a read"));
  auto fut = promise->future();
  with_volume(self, volume_id, [=](const ConnResult& conn) {
    if (!conn.ok()) return (void)promise->set_error(conn.status());
    auto c = *conn;
    std::vector<std::uint64_t> ids;
    for (const auto& t : targets) ids.push_back(t.object_id);
    const std::uint64_t lease_id = self->state.next_lease_id++;
    ask(self, c->handle, open_read_atom::value, ids, lease_id)
        .then(
            [=](const wire::ReadLease& lease) mutable {
              if (lease.regions.size() != targets.size()) {
                if (lease.lease_id != 0)
                  self->send(c->handle, close_read_atom::value, lease.lease_id);
                return (void)promise->set_error(Status(
                    Errc::protocol_error,
                    "volume '" + volume_id + "' answered " + std::to_string(lease.regions.size()) +
                        " regions for " + std::to_string(targets.size()) + " objects"));
              }
              if (!lease.data.empty()) {
                // A small read: the bytes came inline and nothing is pinned.
                for (std::size_t i = 0; i < targets.size(); ++i) {
                  if (i >= lease.data.size() || lease.data[i].size() != targets[i].nbytes) {
                    return (void)promise->set_error(
                        Status(Errc::protocol_error, "volume '" + volume_id + "' answered " +
                                                         std::to_string(lease.data.size()) +
                                                         " inline objects of the wrong size"));
                  }
                  if (targets[i].view) {
                    auto t = Tensor::empty(targets[i].dtype, targets[i].shape);
                    if (!t.ok()) return (void)promise->set_error(t.status());
                    *targets[i].view = std::move(t).value();
                    targets[i].dst = static_cast<std::byte*>(targets[i].view->data());
                  }
                  if (const auto& b = targets[i].box) {
                    copy_box(reinterpret_cast<const std::byte*>(lease.data[i].data()), b->from,
                             targets[i].dst, b->to, b->region, b->elsize);
                  } else if (targets[i].device) {
                    if (auto s = internal::cuda::copy_bytes(targets[i].dst, lease.data[i].data(),
                                                            targets[i].nbytes);
                        !s.ok()) {
                      return (void)promise->set_error(s);
                    }
                  } else {
                    std::memcpy(targets[i].dst, lease.data[i].data(), targets[i].nbytes);
                  }
                }
                return (void)promise->set_value();
              }
              if (!targets.empty() && targets.front().view) {
                // Zero-copy where the transport maps regions; the lease stays
                // open until the last view goes. Else a copy, like get().
                auto views = map_views(self, c, lease, targets);
                if (!views.ok() || *views) {
                  if (!views.ok()) self->send(c->handle, close_read_atom::value, lease.lease_id);
                  return (void)promise->set(views.ok() ? Result<void>() : views.status());
                }
                for (auto& t : targets) {
                  auto copy = Tensor::empty(t.dtype, t.shape);
                  if (!copy.ok()) {
                    self->send(c->handle, close_read_atom::value, lease.lease_id);
                    return (void)promise->set_error(copy.status());
                  }
                  *t.view = std::move(copy).value();
                  t.dst = static_cast<std::byte*>(t.view->data());
                }
              }
              std::vector<Future<void>> reads;
              for (std::size_t i = 0; i < targets.size() && i < lease.regions.size(); ++i) {
                const auto& t = targets[i];
                if (lease.regions[i].nbytes != t.nbytes) {
                  reads.push_back(make_error_future<void>(Status(
                      Errc::protocol_error, "object " + std::to_string(t.object_id) + " holds " +
                                                std::to_string(lease.regions[i].nbytes) +
                                                " bytes, the index says " +
                                                std::to_string(t.nbytes))));
                  continue;
                }
                if (t.box) {
                  reads.push_back(read_box(c, lease.regions[i], t));
                  continue;
                }
                if (t.device && !c->transport->capabilities().device_copies) {
                  reads.push_back(read_into_device(c, lease.regions[i], t.dst, t.nbytes));
                  continue;
                }
                reads.push_back(c->transport->read(lease.regions[i], 0, t.dst, t.nbytes));
              }
              await(self, settle_all(std::move(reads)), [=](const Result<void>& r) {
                self->send(c->handle, close_read_atom::value, lease.lease_id);
                promise->set(r);
              });
            },
            [=](caf::error& e) {
              auto s = from_caf_error(e, "open_read at volume '" + volume_id + "'");
              if (s.code() == Errc::not_found) *stale = true;
              // The volume may still grant the lease after our timeout: close
              // it (messages between two actors stay in order).
              if (s.code() == Errc::timeout)
                self->send(c->handle, close_read_atom::value, lease_id);
              promise->set_error(std::move(s));
            });
  });
  return fut;
}

Status check_record(const GetOp& op, std::size_t i, const wire::KeyRecord& r) {
  const auto& key = op.call.keys[i];
  if (!r.found()) {
    if (!r.lost_on.empty()) {
      return Status(Errc::unavailable, "'" + key + "' was stored on volume '" + r.lost_on +
                                           "', which went down; put it again");
    }
    if (!r.pending.empty()) {
      return Status(Errc::partially_committed,
                    "'" + key + "' is partially committed: " + r.pending);
    }
    if (!r.shards.empty()) {
      // A sharded put in progress: name what its shards do not cover yet.
      std::vector<TensorSlice> missing{TensorSlice::full(r.shape)};
      for (const auto& shard : r.shards) {
        std::vector<TensorSlice> rest;
        for (const auto& m : missing) {
          for (auto& part : m.minus(shard.slice)) rest.push_back(std::move(part));
        }
        missing = std::move(rest);
      }
      std::int64_t absent = 0;
      std::string regions;
      for (std::size_t m = 0; m < missing.size(); ++m) {
        absent += missing[m].numel();
        if (m < 4) {
          auto text = missing[m].to_string();
          regions += (m ? ", " : "") + text.substr(0, text.find(" of "));
        }
      }
      if (missing.size() > 4) regions += " and " + std::to_string(missing.size() - 4) + " more";
      return Status(Errc::partially_committed,
                    "'" + key + "' is partially committed: its shards cover " +
                        std::to_string(shape_numel(r.shape) - absent) + " of " +
                        std::to_string(shape_numel(r.shape)) + " elements of " +
                        shape_to_string(r.shape) + "; missing " + regions);
    }
    return Status(Errc::not_found, "no key '" + key + "'");
  }
  const bool want_object = op.call.mode == GetMode::object;
  if (want_object && r.kind != wire::ObjectKind::object) {
    return Status(Errc::wrong_kind, "'" + key + "' holds a tensor, not an object (use get)");
  }
  if (!want_object && r.kind != wire::ObjectKind::tensor) {
    return Status(Errc::wrong_kind, "'" + key + "' holds an object, not a tensor (use get_object)");
  }
  const auto* box = i < op.call.slices.size() && op.call.slices[i] ? &*op.call.slices[i] : nullptr;
  if (box && box->global_shape() != r.shape) {
    return Status(Errc::out_of_range, "slice " + box->to_string() + " of '" + key +
                                          "' is not in its global shape " +
                                          shape_to_string(r.shape));
  }
  if (op.call.mode == GetMode::into) {
    const auto& dst = op.call.dsts[i];
    const Shape& want = box ? box->local_shape() : r.shape;
    if (dst.dtype() != r.dtype) {
      return Status(Errc::dtype_mismatch, "dtype mismatch for '" + key + "': stored " +
                                              std::string(dtype_name(r.dtype)) + ", destination " +
                                              std::string(dtype_name(dst.dtype())));
    }
    if (dst.shape() != want) {
      return Status(Errc::shape_mismatch,
                    "shape mismatch for '" + key + "': " + (box ? "slice " : "stored ") +
                        shape_to_string(want) + ", destination " + shape_to_string(dst.shape()));
    }
  }
  if (r.shards.empty()) {
    return Status(Errc::protocol_error, "'" + key + "' has a record without shards");
  }
  return Status();
}

// True when key i must be read shard by shard and assembled: a box was
// asked for, or the key is stored in shards.
bool assembled(const GetOp& op, std::size_t i, const wire::KeyRecord& r) {
  const bool boxed =
      i < op.call.slices.size() && op.call.slices[i] && !op.call.slices[i]->is_full();
  return boxed || r.shards.size() != 1 || !r.shards.front().slice.is_full();
}

void start_get(client_pointer self, const std::shared_ptr<GetOp>& op);

void finish_get(client_pointer self, const std::shared_ptr<GetOp>& op, const Result<void>& r) {
  auto& st = self->state;
  op->unpin();
  if (!r.ok()) {
    // A volume no longer had what we located: a concurrent overwrite or
    // remove released it. Locate afresh, pinned this time, and read again.
    if (op->stale && op->attempt < st.cfg.max_read_attempts) {
      for (const auto& k : op->call.keys) st.locations.erase(k);
      op->use_cache = false;
      op->pin_next = true;
      return start_get(self, op);
    }
    if (op->stale) {
      return op->fail(
          Status(Errc::conflict,
                 "gave up after " + std::to_string(op->attempt) +
                     " attempts: every located version was replaced before it could be read"));
    }
    // Whatever failed, the cached locations of these keys are suspect.
    for (const auto& k : op->call.keys) st.locations.erase(k);
    return op->fail(r.status());
  }
  if (auto s = finish_unpack(op->unpack); !s.ok()) return op->fail(s);
  op->call.promise->set_value(std::move(op->out));
}

// Asks the controller for the records of `keys`, pinning the objects
// found until `op` unpins (or the request timeout passes).
void locate_pinned(client_pointer self, const std::shared_ptr<GetOp>& op,
                   std::function<void(Result<std::vector<wire::KeyRecord>>)> k) {
  const auto ttl = static_cast<std::uint64_t>(self->state.cfg.request_timeout.count());
  ask(self, self->state.controller, locate_pinned_atom::value, op->call.keys, ttl)
      .then(
          [=](std::uint64_t pin, std::vector<wire::KeyRecord>& records) {
            op->pin = pin;
            k(std::move(records));  // not cached: the next read needs no pin
          },
          [=](caf::error& e) { k(from_caf_error(e, "locate at controller")); });
}

void start_get(client_pointer self, const std::shared_ptr<GetOp>& op) {
  ++op->attempt;
  op->owner = self;
  auto on_records = [=](Result<std::vector<wire::KeyRecord>> records) {
    if (!records.ok()) return op->fail(records.status());
    if (records->size() != op->call.keys.size()) {
      return op->fail(Status(Errc::protocol_error,
                             "controller answered " + std::to_string(records->size()) +
                                 " records for " + std::to_string(op->call.keys.size()) + " keys"));
    }
    // Check everything before any byte moves: a failed check leaves the
    // caller's destinations untouched.
    for (std::size_t i = 0; i < records->size(); ++i) {
      if (auto s = check_record(*op, i, (*records)[i]); !s.ok()) {
        // A cached record may be stale (another process changed the key's
        // shape, dtype or kind, or removed it): ask the controller once
        // before reporting.
        if (op->use_cache) {
          for (const auto& k : op->call.keys) self->state.locations.erase(k);
          op->use_cache = false;
          --op->attempt;
          return start_get(self, op);
        }
        return op->fail_named(s);
      }
    }
    op->out = GetOutput{};
    op->out.tensors.reserve(records->size());  // view targets point into it
    op->unpack.clear();
    op->stale = false;
    auto stale = std::make_shared<bool>(false);
    std::map<std::string, std::vector<ReadTarget>> by_volume;
    for (std::size_t i = 0; i < records->size(); ++i) {
      const auto& rec = (*records)[i];
      if (assembled(*op, i, rec)) {
        const TensorSlice want = i < op->call.slices.size() && op->call.slices[i]
                                     ? *op->call.slices[i]
                                     : TensorSlice::full(rec.shape);
        std::byte* dst = nullptr;
        if (op->call.mode == GetMode::into) {
          // Boxes are cut out of their shards by host copies: a GPU
          // destination is assembled in host memory, then copied over.
          auto at = contiguous_target(op->call.dsts[i], op->unpack, true);
          if (!at.ok()) return op->fail(at.status());
          dst = *at;
        } else {
          auto t = Tensor::empty(rec.dtype, want.local_shape());
          if (!t.ok()) return op->fail(t.status());
          dst = static_cast<std::byte*>(t->data());
          op->out.tensors.push_back(std::move(t).value());
        }
        // Each distinct box once (replicas are not read twice), and only
        // the shards that overlap the box asked for.
        std::vector<TensorSlice> seen;
        for (const auto& shard : rec.shards) {
          if (std::find(seen.begin(), seen.end(), shard.slice) != seen.end()) continue;
          seen.push_back(shard.slice);
          auto both = shard.slice.intersect(want);
          if (!both || both->empty()) continue;
          ReadTarget target;
          target.object_id = shard.object_id;
          target.dst = dst;
          target.nbytes = shard.nbytes;
          target.box = ReadTarget::Box{shard.slice, want, *both, dtype_size(rec.dtype)};
          by_volume[shard.volume_id].push_back(std::move(target));
        }
        continue;
      }
      const auto& shard = rec.shards.front();
      std::byte* dst = nullptr;
      if (op->call.mode == GetMode::object) {
        try {
          op->out.object.assign(shard.nbytes, '\0');
        } catch (const std::bad_alloc&) {
          return op->fail(
              Status(Errc::out_of_capacity,
                     "cannot allocate " + std::to_string(shard.nbytes) + " bytes for the object"));
        }
        dst = reinterpret_cast<std::byte*>(op->out.object.data());
      } else if (op->call.mode == GetMode::view) {
        op->out.tensors.emplace_back();  // filled by the read
      } else if (op->call.mode == GetMode::tensor) {
        auto t = Tensor::empty(rec.dtype, rec.shape);
        if (!t.ok()) return op->fail(t.status());
        dst = static_cast<std::byte*>(t->data());
        op->out.tensors.push_back(std::move(t).value());
      } else {
        auto at = contiguous_target(op->call.dsts[i], op->unpack);
        if (!at.ok()) return op->fail(at.status());
        dst = *at;
      }
      ReadTarget target;
      target.object_id = shard.object_id;
      target.dst = dst;
      target.nbytes = shard.nbytes;
      // Straight into GPU memory (a strided GPU view was given a host
      // temporary instead).
      target.device = op->call.mode == GetMode::into && on_device(op->call.dsts[i]) &&
                      dst == static_cast<std::byte*>(op->call.dsts[i].data());
      if (op->call.mode == GetMode::view) {
        target.view = &op->out.tensors.back();
        target.dtype = rec.dtype;
        target.shape = rec.shape;
      }
      by_volume[shard.volume_id].push_back(std::move(target));
    }
    std::vector<Future<void>> groups;
    for (auto& [vid, targets] : by_volume) {
      groups.push_back(read_from_volume(self, vid, std::move(targets), stale));
    }
    await(self, settle_all(std::move(groups)), [=](const Result<void>& r) {
      op->stale = *stale;
      finish_get(self, op, r);
    });
  };
  if (op->pin_next) return locate_pinned(self, op, std::move(on_records));
  locate(self, op->call.keys, op->use_cache, std::move(on_records));
}

void handle_get(client_pointer self, GetCall call) {
  auto op = std::make_shared<GetOp>();
  op->what = describe(call.op, call.keys);
  op->use_cache = !call.fresh;
  op->call = std::move(call);
  start_get(self, op);
}

// -- key space -----------------------------------------------------------

// -- streamed reads ------------------------------------------------------

struct StreamOp {
  StreamCall call;
  std::string what;
  std::vector<wire::KeyRecord> records;
  std::vector<std::byte*> targets;                    // per record; null: not read
  std::vector<std::pair<Tensor, TensorView>> unpack;  // strided destinations
  bool small = false;  // little to read: read as usual once committed
  std::shared_ptr<VolumeConn> conn;
  std::uint64_t lease_id = 0;
  bool leased = false;
  std::vector<wire::RegionRef> regions;  // per record, from the lease
  std::vector<bool> filled, started;
  int in_flight = 0;
  StreamEnd end = StreamEnd::none;
  std::string why;  // the writer's abort
  Status failure;   // the first read error
  bool finished = false;
};

void stream_progress(client_pointer self, const std::shared_ptr<StreamOp>& op);

// Records the writer's report that these records are filled.
void mark_filled(StreamOp& op, const std::vector<std::uint64_t>& filled) {
  for (auto i : filled) {
    if (i < op.filled.size()) op.filled[i] = true;
  }
}

void finish_stream(client_pointer self, const std::shared_ptr<StreamOp>& op,
                   const Result<std::uint32_t>& r) {
  op->finished = true;
  auto& st = self->state;
  auto range = st.streams.equal_range(op->call.key);
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second == op) {
      st.streams.erase(it);
      break;
    }
  }
  if (op->leased && op->conn) self->send(op->conn->handle, close_read_atom::value, op->lease_id);
  Status unpacked;
  if (r.ok()) unpacked = finish_unpack(op->unpack);
  op->unpack.clear();
  if (r.ok() && unpacked.ok()) {
    op->call.promise->set_value(*r);
  } else {
    op->call.promise->set_error((r.ok() ? unpacked : r.status()).with_context(op->what));
  }
}

// Starts the reads the writer's progress allows, and ends the call once the
// version committed and every read is done, or after a failure once no read
// touches the destinations any more.
void stream_progress(client_pointer self, const std::shared_ptr<StreamOp>& op) {
  if (op->finished) return;
  const bool failed = !op->failure.ok() || op->end == StreamEnd::aborted;
  if (failed) {
    if (op->in_flight > 0) return;  // the destinations are still being written
    if (!op->failure.ok()) return finish_stream(self, op, op->failure);
    return finish_stream(
        self, op, Status(Errc::unavailable, "the writer aborted before its commit: " + op->why));
  }
  if (op->small) {
    if (op->end == StreamEnd::committed)
      finish_stream(self, op, static_cast<std::uint32_t>(StreamKind::committed));
    return;
  }
  if (!op->leased) return;
  bool all_started = true;
  for (std::size_t i = 0; i < op->records.size(); ++i) {
    if (op->targets[i] == nullptr || op->started[i]) continue;
    if (!op->filled[i]) {
      all_started = false;
      continue;
    }
    op->started[i] = true;
    ++op->in_flight;
    auto read = op->conn->transport->read(op->regions[i], 0, op->targets[i], op->regions[i].nbytes);
    await(self, read, [=](const Result<void>& r) {
      --op->in_flight;
      if (!r.ok() && op->failure.ok()) op->failure = r.status();
      stream_progress(self, op);
    });
  }
  if (op->end == StreamEnd::committed && all_started && op->in_flight == 0) {
    finish_stream(self, op, static_cast<std::uint32_t>(StreamKind::streaming));
  }
}

void stream_event(client_pointer self, const std::string& key,
                  const std::vector<std::uint64_t>& filled, std::uint32_t end,
                  const std::string& why) {
  auto range = self->state.streams.equal_range(key);
  std::vector<std::shared_ptr<StreamOp>> ops;
  for (auto it = range.first; it != range.second; ++it) ops.push_back(it->second);
  for (auto& op : ops) {
    mark_filled(*op, filled);
    if (end == static_cast<std::uint32_t>(StreamEnd::committed)) {
      // Committed means filled, reported or not.
      op->filled.assign(op->filled.size(), true);
      op->end = StreamEnd::committed;
    } else if (end == static_cast<std::uint32_t>(StreamEnd::aborted)) {
      op->end = StreamEnd::aborted;
      op->why = why;
    }
    stream_progress(self, op);
  }
}

void controller_gone(client_pointer self, const std::string& why) {
  std::vector<std::shared_ptr<StreamOp>> ops;
  for (auto& [key, op] : self->state.streams) ops.push_back(op);
  for (auto& op : ops) {
    if (op->failure.ok()) op->failure = Status(Errc::unavailable, why);
    stream_progress(self, op);
  }
}

// The stream is known: plan the destinations, pin the staged objects, and
// follow the writer.
void follow_stream(client_pointer self, const std::shared_ptr<StreamOp>& op,
                   const std::string& manifest, std::vector<wire::KeyRecord> records,
                   const std::vector<std::uint64_t>& filled) {
  auto dsts = op->call.plan(manifest, records);
  if (!dsts.ok()) {
    // The plan's errors name the call and the key already.
    op->finished = true;
    return (void)op->call.promise->set_error(dsts.status());
  }
  if (dsts->size() != records.size()) {
    return finish_stream(
        self, op,
        Status(Errc::internal, "planned " + std::to_string(dsts->size()) + " destinations for " +
                                   std::to_string(records.size()) + " records"));
  }
  std::string volume;
  std::uint64_t total = 0;
  op->targets.assign(records.size(), nullptr);
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    const auto& dst = (*dsts)[i];
    if (dst.data() == nullptr || dst.nbytes() == 0) continue;
    if (r.shards.size() != 1 || r.shards.front().nbytes != dst.nbytes()) {
      return finish_stream(self, op,
                           Status(Errc::protocol_error,
                                  "stream record '" + r.key + "' does not match its destination"));
    }
    if (!volume.empty() && volume != r.shards.front().volume_id) {
      return finish_stream(self, op,
                           Status(Errc::unsupported, "a streamed state dict spread over volumes"));
    }
    volume = r.shards.front().volume_id;
    total += dst.nbytes();
    auto at = contiguous_target(dst, op->unpack, true);
    if (!at.ok()) return finish_stream(self, op, at.status());
    op->targets[i] = *at;
  }
  op->records = std::move(records);
  op->filled.assign(op->records.size(), false);
  op->started.assign(op->records.size(), false);
  mark_filled(*op, filled);
  self->state.streams.emplace(op->call.key, op);
  // A small state dict gains nothing from overlap (and the volume would
  // answer a small pin with bytes not written yet): read it once committed.
  op->small = total <= wire::kInlineBytes;
  if (op->small) return stream_progress(self, op);
  with_volume(self, volume, [=](const ConnResult& conn) {
    if (op->finished) return;
    if (!conn.ok()) {
      op->failure = conn.status();
      return stream_progress(self, op);
    }
    op->conn = *conn;
    std::vector<std::uint64_t> ids;
    std::vector<std::size_t> which;
    for (std::size_t i = 0; i < op->records.size(); ++i) {
      if (op->targets[i] == nullptr) continue;
      ids.push_back(op->records[i].shards.front().object_id);
      which.push_back(i);
    }
    op->lease_id = self->state.next_lease_id++;
    // Pins the staged objects: a writer's abort, a retire or a replace
    // cannot free them under the reads.
    ask(self, op->conn->handle, open_read_atom::value, ids, op->lease_id)
        .then(
            [=](const wire::ReadLease& lease) {
              op->leased = lease.lease_id != 0;
              if (!op->leased || lease.regions.size() != which.size()) {
                op->failure = Status(Errc::protocol_error,
                                     "volume '" + volume + "' did not pin the stream's " +
                                         std::to_string(which.size()) + " objects");
                return stream_progress(self, op);
              }
              op->regions.assign(op->records.size(), wire::RegionRef{});
              for (std::size_t k = 0; k < which.size(); ++k) {
                op->regions[which[k]] = lease.regions[k];
              }
              stream_progress(self, op);
            },
            [=](caf::error& e) {
              auto s = from_caf_error(e, "open_read at volume '" + volume + "'");
              if (s.code() == Errc::timeout)
                self->send(op->conn->handle, close_read_atom::value, op->lease_id);
              if (s.code() == Errc::not_found) {
                // The writer gave its objects back already: it aborted.
                s = Status(Errc::unavailable,
                           "the writer aborted before its commit (its objects are gone)");
              }
              op->failure = s;
              stream_progress(self, op);
            });
  });
}

void handle_stream(client_pointer self, StreamCall call) {
  auto op = std::make_shared<StreamOp>();
  op->what = call.op + " '" + call.key + "'";
  op->call = std::move(call);
  auto& st = self->state;
  const auto wait_ms = static_cast<std::uint64_t>(std::max<std::int64_t>(0, op->call.wait.count()));
  ask(self, st.controller, stream_subscribe_atom::value, op->call.key, wait_ms)
      .within(op->call.wait + st.cfg.request_timeout)
      .then(
          [=](std::uint32_t kind, const std::string& manifest,
              const std::vector<wire::KeyRecord>& records,
              const std::vector<std::uint64_t>& filled) {
            if (kind == static_cast<std::uint32_t>(StreamKind::committed)) {
              return (void)op->call.promise->set_value(kind);
            }
            if (kind != static_cast<std::uint32_t>(StreamKind::streaming)) {
              return (void)op->call.promise->set_error(
                  Status(Errc::timeout, op->what + ": nothing was written within " +
                                            std::to_string(op->call.wait.count()) + " ms"));
            }
            follow_stream(self, op, manifest, records, filled);
          },
          [=](caf::error& e) {
            op->call.promise->set_error(from_caf_error(e, op->what + ": subscribe at controller"));
          });
}

void handle_remove(client_pointer self, RemoveCall call) {
  auto& st = self->state;
  for (const auto& k : call.keys) st.locations.erase(k);
  auto promise = call.promise;
  if (call.single) {
    const auto key = call.keys.front();
    ask(self, st.controller, remove_atom::value, key)
        .then(
            [=](caf::ok_atom) { promise->set_value(1); },
            [=](caf::error& e) { promise->set_error(from_caf_error(e, "remove '" + key + "'")); });
    return;
  }
  const auto what = describe("remove_batch", call.keys);
  auto on_reply = [=](const wire::RemoveReply& r) {
    promise->set_value(static_cast<std::size_t>(r.removed));
  };
  if (call.under) {
    forget_locations_under(st, call.keys);
    ask(self, st.controller, replace_atom::value, std::vector<wire::KeyRecord>{}, call.keys,
        call.reuse)
        .then([=](const std::vector<std::uint64_t>&) { promise->set_value(call.keys.size()); },
              [=](caf::error& e) { promise->set_error(from_caf_error(e, what)); });
    return;
  }
  ask(self, st.controller, remove_batch_atom::value, call.keys).then(on_reply, [=](caf::error& e) {
    promise->set_error(from_caf_error(e, what));
  });
}

void handle_stat(client_pointer self, StatCall call) {
  auto promise = call.promise;
  auto& st = self->state;
  ask(self, st.controller, volumes_atom::value)
      .then(
          [=](const std::vector<wire::VolumeInfo>& infos) {
            std::vector<Future<wire::VolumeStat>> stats;
            for (const auto& info : infos) {
              auto p = std::make_shared<Promise<wire::VolumeStat>>(
                  Status(Errc::shutdown, "client stopped"));
              stats.push_back(p->future());
              with_volume(self, info.volume_id, [=](const ConnResult& conn) {
                if (!conn.ok()) return (void)p->set_error(conn.status());
                ask(self, (*conn)->handle, stat_atom::value)
                    .then([=](const wire::VolumeStat& s) { p->set_value(s); },
                          [=](caf::error& e) {
                            p->set_error(
                                from_caf_error(e, "stat of volume '" + info.volume_id + "'"));
                          });
              });
            }
            gather(std::move(stats))
                .on_complete(
                    [promise](const Result<std::vector<wire::VolumeStat>>& r) { promise->set(r); });
          },
          [=](caf::error& e) { promise->set_error(from_caf_error(e, "stats")); });
}

caf::behavior client_impl(client_pointer self, ClientConfig cfg, controller_actor controller,
                          strategy_actor strategy) {
  self->state.cfg = std::move(cfg);
  self->state.controller = std::move(controller);
  self->state.strategy = std::move(strategy);
  self->set_down_handler([=](caf::down_msg& msg) { peer_down(self, msg); });
  // Once the controller or strategy is gone, every call fails at once.
  auto refused = [self](auto& call) {
    if (self->state.control_down.empty()) return false;
    call.promise->set_error(
        Status(Errc::unavailable, "the store is unreachable: " + self->state.control_down));
    return true;
  };
  return {
      [=](run_atom, internal::Closure& c) { c.fn(); },
      [=](store_put_atom, PutCall& call) {
        if (refused(call)) return;
        handle_put(self, std::move(call));
      },
      [=](store_stage_atom, StageCall& call) {
        if (refused(call)) return;
        handle_stage(self, std::move(call));
      },
      [=](store_release_atom, const ReleaseStagedCall& call) { handle_release_staged(self, call); },
      [=](store_stream_atom, StreamCall& call) {
        if (refused(call)) return;
        handle_stream(self, std::move(call));
      },
      [=](stream_event_atom, const std::string& key, const std::vector<std::uint64_t>& filled,
          std::uint32_t end, const std::string& why) { stream_event(self, key, filled, end, why); },
      [=](store_get_atom, GetCall& call) {
        if (refused(call)) return;
        handle_get(self, std::move(call));
      },
      [=](store_keys_atom, KeysCall& call) {
        if (refused(call)) return;
        auto promise = call.promise;
        const auto prefix = call.prefix;
        ask(self, self->state.controller, keys_atom::value, prefix)
            .then([=](std::vector<std::string>& keys) { promise->set_value(std::move(keys)); },
                  [=](caf::error& e) {
                    promise->set_error(from_caf_error(e, "keys '" + prefix + "'"));
                  });
      },
      [=](store_list_atom, ListCall& call) {
        if (refused(call)) return;
        auto promise = call.promise;
        const auto prefix = call.prefix;
        ask(self, self->state.controller, keys_atom::value, prefix)
            .then(
                [=](std::vector<std::string>& keys) {
                  // Keys removed between the two requests come back unfound
                  // and are left out.
                  ask(self, self->state.controller, locate_atom::value, keys)
                      .then(
                          [=](std::vector<wire::KeyRecord>& records) {
                            records.erase(
                                std::remove_if(records.begin(), records.end(),
                                               [](const wire::KeyRecord& r) { return !r.found(); }),
                                records.end());
                            promise->set_value(std::move(records));
                          },
                          [=](caf::error& e) {
                            promise->set_error(from_caf_error(e, "list '" + prefix + "'"));
                          });
                },
                [=](caf::error& e) {
                  promise->set_error(from_caf_error(e, "list '" + prefix + "'"));
                });
      },
      [=](store_exists_atom, ExistsCall& call) {
        if (refused(call)) return;
        auto promise = call.promise;
        const auto what = describe("exists", call.keys);
        ask(self, self->state.controller, exists_atom::value, call.keys)
            .then([=](std::vector<std::uint64_t>& v) { promise->set_value(std::move(v)); },
                  [=](caf::error& e) { promise->set_error(from_caf_error(e, what)); });
      },
      [=](store_remove_atom, RemoveCall& call) {
        if (refused(call)) return;
        handle_remove(self, std::move(call));
      },
      [=](store_counters_atom, CountersCall& call) {
        if (refused(call)) return;
        auto promise = call.promise;
        ask(self, self->state.controller, counters_atom::value)
            .then([=](std::vector<std::uint64_t>& v) { promise->set_value(std::move(v)); },
                  [=](caf::error& e) { promise->set_error(from_caf_error(e, "counters")); });
      },
      [=](store_stat_atom, StatCall& call) {
        if (refused(call)) return;
        handle_stat(self, std::move(call));
      },
  };
}

}  // namespace

caf::actor spawn_client(caf::actor_system& sys, ClientConfig config, controller_actor controller,
                        strategy_actor strategy) {
  return sys.spawn(client_impl, std::move(config), std::move(controller), std::move(strategy));
}

}  // namespace meshstore::actors
