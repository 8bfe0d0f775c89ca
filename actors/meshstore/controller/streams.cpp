// The streams readers follow: events as a writer fills objects, and how a
// stream ends (committed, aborted).
#include "meshstore/controller/controller_state.hpp"
#include "meshstore/protocol/wire_glue.hpp"

namespace meshstore::actors::controller_detail {

void send_event(controller_pointer self, const caf::actor_addr& reader, const std::string& key,
                const std::vector<std::uint64_t>& filled, StreamEnd end, const std::string& why) {
  if (auto hdl = caf::actor_cast<caf::actor>(reader)) {
    caf::anon_send(hdl, stream_event_atom::value, key, filled, static_cast<std::uint32_t>(end),
                   why);
  }
}

void end_stream(controller_pointer self, const std::string& key, StreamEnd end,
                const std::string& why) {
  auto& st = self->state;
  auto it = st.streams.find(key);
  if (it == st.streams.end()) return;
  for (const auto& reader : it->second.readers) send_event(self, reader, key, {}, end, why);
  st.streams.erase(it);
}

void streams_committed(controller_pointer self, const std::string& key) {
  auto& st = self->state;
  end_stream(self, key, StreamEnd::committed, "");
  auto w = st.waiters.find(key);
  if (w == st.waiters.end()) return;
  for (auto& waiter : w->second) {
    waiter.reply.deliver(static_cast<std::uint32_t>(StreamKind::committed), std::string(),
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
    end_stream(self, key, StreamEnd::aborted,
               "its writer went down (" + caf::to_string(msg.reason) + ")");
  }
  return true;
}

}  // namespace meshstore::actors::controller_detail
