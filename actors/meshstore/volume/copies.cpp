// A volume copies objects of another volume (copy_from_atom, from the
// controller: copies of whole keys, StoreOptions::placement.replicas). It
// reads them the way a client would: a lease at the other volume, then the
// transport a client here would choose for it (shm or cma on one host, tcp
// or rdma across hosts), straight into objects it staged for the
// controller, which commits them with the key or discards them.
#include <atomic>
#include <cstring>
#include <mutex>

#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/internal/connect.hpp"
#include "meshstore/transports/registry.hpp"
#include "meshstore/volume/state.hpp"

namespace meshstore::volume {

namespace {

// How long a request to the source volume may take (its endpoints, a lease).
constexpr std::chrono::milliseconds kControlTimeout{30000};

// The transfers of one copy, counted down by the transports' threads.
struct Transfers {
  std::atomic<std::size_t> left{0};
  std::mutex mu;
  Status first;  // the first failure
};

// The transport to volume `from` (opened once, then kept).
void with_link(volume_pointer self, const caf::actor& from,
               std::function<void(Result<std::shared_ptr<transports::Transport>>)> k) {
  auto& st = self->state;
  if (auto it = st.links.find(from.address()); it != st.links.end()) return k(it->second);
  self->request(from, kControlTimeout, protocol::endpoints_atom::value)
      .then(
          [self, from, k](const std::vector<transports::EndpointInfo>& offered) {
            auto& st = self->state;
            auto& registry = transports::builtin_registry();
            auto chosen = transports::select_transport(registry, offered, "", "copy source");
            if (!chosen.ok()) return k(chosen.status());
            auto factory = registry.find(chosen->transport);
            if (!factory.ok()) return k(factory.status());
            transports::ClientContext ctx{&self->system(), st.config.transport_config};
            auto made = factory->make_client(ctx, *chosen);
            if (!made.ok()) return k(made.status());
            std::shared_ptr<transports::Transport> link(std::move(made).value());
            st.links[from.address()] = link;
            k(link);
          },
          [k](caf::error& e) { k(internal::from_caf_error(e, "endpoints")); });
}

// Copies the leased regions into the staged objects of copy `token`, on
// the transport's threads; the last transfer to end tells the volume.
void transfer(volume_pointer self, std::uint64_t token, transports::Transport& link,
              const wire::ReadLease& lease) {
  auto& copy = self->state.copying.at(token);
  auto count = std::make_shared<Transfers>();
  count->left = lease.regions.size();
  const caf::actor_addr me = self->address();
  for (std::size_t i = 0; i < lease.regions.size(); ++i) {
    auto* dst = copy.regions[i]->data();
    link.read(lease.regions[i], 0, dst, lease.regions[i].nbytes)
        .on_complete([count, me, token](const Result<void>& r) {
          if (!r.ok()) {
            std::lock_guard<std::mutex> lock(count->mu);
            if (count->first.ok()) count->first = r.status();
          }
          if (--count->left != 0) return;
          auto volume = caf::actor_cast<caf::actor>(me);
          if (!volume) return;  // gone: its staged objects with it
          caf::anon_send(volume, protocol::copied_atom::value, token,
                         static_cast<std::int32_t>(count->first.code()), count->first.message());
        });
  }
}

// The lease on the source's objects came: small ones carry their bytes.
void leased(volume_pointer self, std::uint64_t token, const wire::ReadLease& lease) {
  auto& st = self->state;
  auto it = st.copying.find(token);
  if (it == st.copying.end()) return;
  auto& copy = it->second;
  if (lease.regions.size() != copy.regions.size()) {
    return copied(self, token, static_cast<std::int32_t>(Errc::protocol_error),
                  "the source leased " + std::to_string(lease.regions.size()) + " objects for " +
                      std::to_string(copy.regions.size()));
  }
  copy.lease = lease.lease_id;
  for (std::size_t i = 0; i < lease.regions.size(); ++i) {
    if (lease.regions[i].nbytes != copy.regions[i]->size()) {
      return copied(self, token, static_cast<std::int32_t>(Errc::protocol_error),
                    "object " + std::to_string(lease.regions[i].region_id) + " holds " +
                        std::to_string(lease.regions[i].nbytes) + " bytes, not " +
                        std::to_string(copy.regions[i]->size()));
    }
  }
  if (lease.lease_id == 0) {  // small: inline
    for (std::size_t i = 0; i < lease.data.size() && i < copy.regions.size(); ++i) {
      std::memcpy(copy.regions[i]->data(), lease.data[i].data(), lease.data[i].size());
    }
    return copied(self, token, 0, "");
  }
  with_link(self, copy.from, [self, token, lease](auto link) {
    if (!link.ok()) {
      return copied(self, token, static_cast<std::int32_t>(link.status().code()),
                    link.status().message());
    }
    if (self->state.copying.count(token) == 0) return;
    transfer(self, token, **link, lease);
  });
}

}  // namespace

caf::result<std::vector<std::uint64_t>> copy_from(volume_pointer self, const CopySource& from,
                                                  const std::vector<std::uint64_t>& ids,
                                                  const std::vector<std::uint64_t>& sizes,
                                                  const std::vector<std::string>& keys) {
  auto& st = self->state;
  if (!from.handle || ids.empty() || ids.size() != sizes.size() || ids.size() != keys.size()) {
    return internal::to_caf_error(Status(
        Errc::invalid_argument, "copy_from: a source and as many sizes and keys as objects"));
  }
  std::vector<wire::StageRequest> reqs(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    reqs[i].key = keys[i];
    reqs[i].nbytes = sizes[i];
  }
  auto staged = stage(self, reqs, caf::actor_cast<caf::actor>(self->current_sender()));
  if (!staged.ok()) return internal::to_caf_error(staged.status());
  const auto token = st.next_copy++;
  auto& copy = st.copying[token];
  copy.from = from.handle;
  copy.reply = self->make_response_promise<std::vector<std::uint64_t>>();
  for (const auto& ref : *staged) {
    copy.ids.push_back(ref.region_id);
    copy.regions.push_back(st.objects.at(ref.region_id).region);
  }
  // Straight to the source's process, not through the one that
  // introduced it (a server restarted since does not route for it).
  auto open = [self, token, source = from.handle, ids] {
    const std::uint64_t lease_id = token;
    self->request(source, kControlTimeout, protocol::open_read_atom::value, ids, lease_id, true)
        .then([self, token](wire::ReadLease& lease) { leased(self, token, lease); },
              [self, token](caf::error& e) {
                const auto s = internal::from_caf_error(e, "open_read at the source");
                copied(self, token, static_cast<std::int32_t>(s.code()), s.message());
              });
  };
  if (from.handle.node() == self->node()) {
    open();
  } else {
    internal::reach_door(self, st.doors, from.door, kControlTimeout,
                         "volume '" + st.config.volume_id + "': a copy's source", open);
  }
  return copy.reply;
}

void copied(volume_pointer self, std::uint64_t token, std::int32_t code, const std::string& why) {
  auto& st = self->state;
  auto it = st.copying.find(token);
  if (it == st.copying.end()) return;
  auto copy = std::move(it->second);
  st.copying.erase(it);
  if (copy.lease != 0) {
    // From this volume: the source knows the lease by its owner.
    self->send(caf::actor_cast<protocol::storage_volume_actor>(copy.from),
               protocol::close_read_atom::value, copy.lease);
  }
  if (code == 0) return (void)copy.reply.deliver(std::move(copy.ids));
  // Nothing half-copied stays.
  st.drop_all(copy.ids, true);
  copy.reply.deliver(
      internal::to_caf_error(Status(static_cast<Errc>(code), why)
                                 .with_context("volume '" + st.config.volume_id + "': copy")));
}

}  // namespace meshstore::volume
