// Streamed reads: following a writer's progress on a state dict.

#include "meshstore/client/stream.hpp"

#include <algorithm>
#include <memory>
#include <utility>

#include "meshstore/client/ask.hpp"
#include "meshstore/client/connections.hpp"
#include "meshstore/client/unpack.hpp"
#include "meshstore/protocol/limits.hpp"

namespace meshstore::client {

using internal::from_caf_error;

// A streamed read (ClientState::streams).
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
  protocol::StreamEnd end = protocol::StreamEnd::none;
  std::string why;  // the writer's abort
  Status failure;   // the first read error
  bool finished = false;
};

namespace {

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
  if (op->leased && op->conn)
    self->send(op->conn->handle, protocol::close_read_atom::value, op->lease_id);
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
  const bool failed = !op->failure.ok() || op->end == protocol::StreamEnd::aborted;
  if (failed) {
    if (op->in_flight > 0) return;  // the destinations are still being written
    if (!op->failure.ok()) return finish_stream(self, op, op->failure);
    return finish_stream(
        self, op, Status(Errc::unavailable, "the writer aborted before its commit: " + op->why));
  }
  if (op->small) {
    if (op->end == protocol::StreamEnd::committed)
      finish_stream(self, op, static_cast<std::uint32_t>(protocol::StreamKind::committed));
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
  if (op->end == protocol::StreamEnd::committed && all_started && op->in_flight == 0) {
    finish_stream(self, op, static_cast<std::uint32_t>(protocol::StreamKind::streaming));
  }
}

// Pins the stream's staged objects at `volume` (a writer's abort, a
// retire or a replace cannot free them under the reads; located with the
// stream, they are read even if a later put superseded them), then
// follows the writer.
void pin_stream(client_pointer self, const std::shared_ptr<StreamOp>& op,
                const std::string& volume) {
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
    ask(self, op->conn->handle, protocol::open_read_atom::value, ids, op->lease_id, true)
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
                self->send(op->conn->handle, protocol::close_read_atom::value, op->lease_id);
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
  op->small = total <= protocol::limits::kInlineBytes;
  if (op->small) return stream_progress(self, op);
  pin_stream(self, op, volume);
}

}  // namespace

void stream_event(client_pointer self, const std::string& key,
                  const std::vector<std::uint64_t>& filled, std::uint32_t end,
                  const std::string& why) {
  auto range = self->state.streams.equal_range(key);
  std::vector<std::shared_ptr<StreamOp>> ops;
  for (auto it = range.first; it != range.second; ++it) ops.push_back(it->second);
  for (auto& op : ops) {
    mark_filled(*op, filled);
    if (end == static_cast<std::uint32_t>(protocol::StreamEnd::committed)) {
      // Committed means filled, reported or not.
      op->filled.assign(op->filled.size(), true);
      op->end = protocol::StreamEnd::committed;
    } else if (end == static_cast<std::uint32_t>(protocol::StreamEnd::aborted)) {
      op->end = protocol::StreamEnd::aborted;
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

void handle_stream(client_pointer self, StreamCall call) {
  auto op = std::make_shared<StreamOp>();
  op->what = call.op + " '" + call.key + "'";
  op->call = std::move(call);
  auto& st = self->state;
  const auto wait_ms = static_cast<std::uint64_t>(std::max<std::int64_t>(0, op->call.wait.count()));
  ask(self, st.controller, protocol::stream_subscribe_atom::value, op->call.key, wait_ms)
      .within(op->call.wait + st.cfg.request_timeout)
      .then(
          [=](std::uint32_t kind, const std::string& manifest,
              const std::vector<wire::KeyRecord>& records,
              const std::vector<std::uint64_t>& filled) {
            if (kind == static_cast<std::uint32_t>(protocol::StreamKind::committed)) {
              return (void)op->call.promise->set_value(kind);
            }
            if (kind != static_cast<std::uint32_t>(protocol::StreamKind::streaming)) {
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

}  // namespace meshstore::client
