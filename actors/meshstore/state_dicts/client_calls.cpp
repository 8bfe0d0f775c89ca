// The first read the state-dict engine's chains make: a manifest.

#include "meshstore/state_dicts/client_calls.hpp"

#include <memory>

namespace meshstore::state_dicts {

using client::single_get;

Result<Snapshot> decode_snapshot(const Tensor& t, const std::string& key, const std::string& op) {
  Snapshot snap;
  snap.bytes.assign(static_cast<const char*>(t.data()), t.nbytes());
  auto m = decode_manifest(snap.bytes, key);
  if (!m.ok()) return m.status().with_context(op);
  snap.manifest = std::move(m).value();
  return snap;
}

Future<Snapshot> manifest_of(const caf::actor_addr& client, const std::string& key,
                             const std::string& op) {
  auto p = std::make_shared<Promise<Snapshot>>(Status(Errc::shutdown, op + ": dropped"));
  call_client(client, protocol::store_get_atom::value, single_get(op, client::GetMode::tensor, key),
              op + " '" + key + "'")
      .on_complete([=](const Result<client::GetOutput>& r) {
        if (r.ok()) return (void)p->set(decode_snapshot(r->tensors.front(), key, op));
        if (r.status().code() == Errc::not_found) {
          // What the key's miss said of a volume it may have been on.
          const auto& why = r.status().message();
          const auto note = why.find("; it may have been on volume");
          return (void)p->set_error(
              Status(Errc::not_found, op + ": no state dict '" + key + "'" +
                                          (note == std::string::npos ? "" : why.substr(note))));
        }
        if (r.status().code() == Errc::wrong_kind) {
          return (void)p->set_error(
              Status(Errc::wrong_kind, op + ": '" + key + "' holds an object, not a state dict"));
        }
        p->set_error(r.status());
      });
  return p->future();
}

}  // namespace meshstore::state_dicts
