// The streams readers follow: events as a writer fills objects, and how a
// stream ends (committed, aborted).
#include "meshstore/controller/controller_state.hpp"
#include "meshstore/protocol/wire_glue.hpp"

namespace meshstore::controller {

void send_event(controller_pointer self, const caf::actor_addr& reader, const std::string& key,
                const std::vector<std::uint64_t>& filled, protocol::StreamEnd end,
                const std::string& why) {
  if (auto hdl = caf::actor_cast<caf::actor>(reader)) {
    caf::anon_send(hdl, protocol::stream_event_atom::value, key, filled,
                   static_cast<std::uint32_t>(end), why);
  }
}

void end_stream(controller_pointer self, const std::string& key, protocol::StreamEnd end,
                const std::string& why) {
  auto& st = self->state;
  auto it = st.streams.find(key);
  if (it == st.streams.end()) return;
  for (const auto& reader : it->second.readers) send_event(self, reader, key, {}, end, why);
  st.streams.erase(it);
}

void streams_committed(controller_pointer self, const std::string& key) {
  auto& st = self->state;
  end_stream(self, key, protocol::StreamEnd::committed, "");
  auto w = st.waiters.find(key);
  if (w == st.waiters.end()) return;
  for (auto& waiter : w->second) {
    waiter.reply.deliver(static_cast<std::uint32_t>(protocol::StreamKind::committed), std::string(),
                         std::vector<wire::KeyRecord>(), std::vector<std::uint64_t>());
  }
  st.waiters.erase(w);
}

bool writer_down(controller_pointer self, const caf::down_msg& msg) {
  auto& st = self->state;
  if (st.writers.erase(msg.source) == 0) return false;
  std::vector<std::string> doomed;
  for (const auto& [key, stream] : st.streams) {
    if (stream.writer == msg.source) doomed.push_back(key);
  }
  for (const auto& key : doomed) {
    end_stream(self, key, protocol::StreamEnd::aborted,
               "its writer went down (" + caf::to_string(msg.reason) + ")");
  }
  return true;
}

void open_stream(controller_pointer self, const std::string& key, std::string manifest,
                 std::vector<wire::KeyRecord> records, std::vector<std::uint64_t> filled) {
  auto& st = self->state;
  // A second write of the same state dict ends the first one's stream.
  end_stream(self, key, protocol::StreamEnd::aborted, "a newer write of it began");
  auto writer = caf::actor_cast<caf::actor>(self->current_sender());
  if (!writer) return;  // already gone
  if (st.writers.insert(writer.address()).second) self->monitor(writer);
  st.count(protocol::ControllerCounter::streams);
  auto& stream = st.streams[key];
  stream.writer = writer.address();
  stream.manifest = std::move(manifest);
  stream.records = std::move(records);
  stream.filled = std::move(filled);
  auto w = st.waiters.find(key);
  if (w == st.waiters.end()) return;
  for (auto& waiter : w->second) {
    waiter.reply.deliver(static_cast<std::uint32_t>(protocol::StreamKind::streaming),
                         stream.manifest, stream.records, stream.filled);
    stream.readers.insert(waiter.reader);
    st.count(protocol::ControllerCounter::stream_readers);
  }
  st.waiters.erase(w);
}

void stream_progress(controller_pointer self, const std::string& key,
                     const std::vector<std::uint64_t>& filled) {
  auto it = self->state.streams.find(key);
  if (it == self->state.streams.end()) return;
  auto& stream = it->second;
  stream.filled.insert(stream.filled.end(), filled.begin(), filled.end());
  for (const auto& reader : stream.readers) {
    send_event(self, reader, key, filled, protocol::StreamEnd::none, "");
  }
}

void abort_stream(controller_pointer self, const std::string& key, const std::string& why) {
  auto it = self->state.streams.find(key);
  const auto& sender = self->current_sender();
  if (it == self->state.streams.end() || !sender || it->second.writer != sender->address()) {
    return;  // ended already, or another writer's
  }
  end_stream(self, key, protocol::StreamEnd::aborted, why);
}

SubscribeReply subscribe(controller_pointer self, const std::string& key, std::uint64_t wait_ms) {
  auto& st = self->state;
  st.count(protocol::ControllerCounter::stream_subscribe);
  auto reader = caf::actor_cast<caf::actor>(self->current_sender());
  if (auto it = st.streams.find(key); it != st.streams.end()) {
    if (reader) it->second.readers.insert(reader.address());
    st.count(protocol::ControllerCounter::stream_readers);
    return {static_cast<std::uint32_t>(protocol::StreamKind::streaming), it->second.manifest,
            it->second.records, it->second.filled};
  }
  const bool committed = st.index.count(key) != 0;
  if (committed || wait_ms == 0 || !reader) {
    return {static_cast<std::uint32_t>(committed ? protocol::StreamKind::committed
                                                 : protocol::StreamKind::absent),
            std::string(), std::vector<wire::KeyRecord>(), std::vector<std::uint64_t>()};
  }
  const auto id = st.next_waiter++;
  auto rp = self->make_response_promise<std::uint32_t, std::string, std::vector<wire::KeyRecord>,
                                        std::vector<std::uint64_t>>();
  st.waiters[key].push_back(ControllerState::Waiter{id, reader.address(), rp});
  self->delayed_send(self, std::chrono::milliseconds(wait_ms), protocol::stream_expire_atom::value,
                     key, id);
  return rp;
}

void expire_waiter(controller_pointer self, const std::string& key, std::uint64_t id) {
  auto& st = self->state;
  auto w = st.waiters.find(key);
  if (w == st.waiters.end()) return;
  auto& list = w->second;
  for (auto it = list.begin(); it != list.end(); ++it) {
    if (it->id != id) continue;
    it->reply.deliver(static_cast<std::uint32_t>(protocol::StreamKind::absent), std::string(),
                      std::vector<wire::KeyRecord>(), std::vector<std::uint64_t>());
    list.erase(it);
    break;
  }
  if (list.empty()) st.waiters.erase(w);
}

}  // namespace meshstore::controller
