// The client's removals.

#include "meshstore/client/remove.hpp"

#include <string>
#include <vector>

#include "meshstore/client/ask.hpp"
#include "meshstore/client/locations.hpp"

namespace meshstore::client {

using internal::from_caf_error;

void handle_remove(client_pointer self, RemoveCall call) {
  auto& st = self->state;
  for (const auto& k : call.keys) st.locations->erase(k);
  auto promise = call.promise;
  if (call.single) {
    const auto key = call.keys.front();
    ask(self, st.controller, protocol::remove_atom::value, key)
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
    ask(self, st.controller, protocol::replace_atom::value, std::vector<wire::KeyRecord>{},
        call.keys, call.reuse)
        .then([=](const std::vector<std::uint64_t>&) { promise->set_value(call.keys.size()); },
              [=](caf::error& e) { promise->set_error(from_caf_error(e, what)); });
    return;
  }
  ask(self, st.controller, protocol::remove_batch_atom::value, call.keys)
      .then(on_reply, [=](caf::error& e) { promise->set_error(from_caf_error(e, what)); });
}

}  // namespace meshstore::client
