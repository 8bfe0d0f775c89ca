// Streamed reads of a state dict, while its writer still fills it.

#include "meshstore/state_dicts/stream.hpp"

#include <memory>
#include <unordered_map>
#include <vector>

namespace meshstore::state_dicts {

Future<void> stream_into(const caf::actor_addr& client, const std::string& key, StateDict* dst,
                         const std::string& op, std::chrono::milliseconds wait,
                         const CacheSlot& slot, bool cast) {
  auto planned = std::make_shared<std::shared_ptr<IntoPlan>>();
  client::StreamCall c;
  c.op = op;
  c.key = key;
  c.wait = wait;
  // Runs in the client actor once the writer's manifest is known.
  c.plan = [=](const std::string& manifest,
               const std::vector<wire::KeyRecord>& records) -> Result<std::vector<TensorView>> {
    auto snap = std::make_shared<Snapshot>();
    snap->bytes = manifest;
    auto m = decode_manifest(manifest, key);
    if (!m.ok()) return m.status().with_context(op);
    snap->manifest = std::move(m).value();
    client::GetCall into;
    // A stream reads whole objects into destinations: no scatters.
    auto plan = plan_into(key, dst, op, std::move(snap), into, nullptr, cast, false);
    if (!plan.ok()) return plan.status();
    *planned = std::move(plan).value();
    if ((*planned)->casts) {
      // Converted entries are read once committed: follow the stream to its
      // commit, reading nothing.
      return std::vector<TensorView>(records.size());
    }
    std::unordered_map<std::string, TensorView> where;
    for (std::size_t i = 0; i < into.keys.size(); ++i) where.emplace(into.keys[i], into.dsts[i]);
    std::vector<TensorView> out;
    std::size_t matched = 0;
    for (const auto& r : records) {
      auto it = where.find(r.key);
      if (it != where.end()) ++matched;
      out.push_back(it == where.end() ? TensorView() : it->second);
    }
    if (matched != where.size()) {
      return Status(Errc::protocol_error,
                    op + " '" + key + "': the writer's records lack entries of its manifest");
    }
    return out;
  };
  return call_client(client, protocol::store_stream_atom::value, std::move(c),
                     op + " '" + key + "'")
      .then([=](std::uint32_t kind) -> Future<void> {
        if (kind == static_cast<std::uint32_t>(protocol::StreamKind::committed) ||
            (*planned && (*planned)->casts)) {
          return read_state_dict_into(client, key, *dst, op, slot, nullptr, cast);
        }
        auto s = finish_into(**planned, dst);
        if (!s.ok()) return make_error_future<void>(s);
        return make_ready_future();
      });
}

}  // namespace meshstore::state_dicts
