// Store::Admin: what a store reports of itself (its volumes, its fast
// path, the controller's counters, where it listens) and which transports
// this build has.

#include <string>
#include <utility>
#include <vector>

#include "meshstore/client/calls.hpp"
#include "meshstore/client/client.hpp"
#include "meshstore/client/fast_path.hpp"
#include "meshstore/store.hpp"
#include "meshstore/store/store_impl.hpp"
#include "meshstore/transports/registry.hpp"

namespace meshstore {

std::uint16_t Store::Admin::port() const noexcept {
  return impl_ ? impl_->port.load() : std::uint16_t{0};
}
std::string Store::Admin::address() const { return impl_ ? impl_->address : std::string(); }

Future<std::vector<VolumeStats>> Store::Admin::stats() {
  client::StatCall call;
  auto fut = Impl::call(impl_.get(), protocol::store_stat_atom::value, std::move(call), "stats");
  return fut.then([](const std::vector<client::VolumeStatReply>& in) {
    std::vector<VolumeStats> out;
    for (const auto& r : in) {
      const auto& s = r.stat;
      out.push_back(VolumeStats{s.volume_id, s.bytes_held, s.capacity_bytes, s.objects, s.staged,
                                s.leases, r.unreachable});
    }
    return out;
  });
}

FastPathStats Store::Admin::fast_path_stats() const {
  FastPathStats out;
  if (!impl_) return out;
  auto s = impl_->fast->stats();
  out.hits = s.hits;
  out.misses = s.misses;
  out.stale = s.stale;
  out.rings = s.rings;
  out.puts = s.puts;
  out.lease_free_reads = s.lease_free_reads;
  out.lease_free_stale = s.lease_free_stale;
  out.direct_reads = s.direct_reads;
  out.direct_state_dicts = s.direct_batches;
  out.state_dict_puts = s.state_dict_puts;
  out.resent_commits = s.resent_commits;
  return out;
}

Future<ControllerCounters> Store::Admin::controller_counters() {
  client::CountersCall call;
  auto fut =
      Impl::call(impl_.get(), protocol::store_counters_atom::value, std::move(call), "counters");
  return fut.then([](const std::vector<std::uint64_t>& v) -> Result<ControllerCounters> {
    using C = protocol::ControllerCounter;
    if (v.size() < static_cast<std::size_t>(C::count_)) {
      return Status(Errc::protocol_error,
                    "controller answered " + std::to_string(v.size()) + " counters");
    }
    auto at = [&](C c) { return v[static_cast<std::size_t>(c)]; };
    ControllerCounters out;
    out.notify_put = at(C::notify_put);
    out.notify_put_batch = at(C::notify_put_batch);
    out.locate = at(C::locate);
    out.exists = at(C::exists);
    out.keys = at(C::keys);
    out.remove = at(C::remove);
    out.streams = at(C::streams);
    out.stream_readers = at(C::stream_readers);
    out.stream_subscribes = at(C::stream_subscribe);
    out.pinned_locates = at(C::pinned_locate);
    return out;
  });
}

std::vector<std::string> Store::Admin::available_transports() {
  return transports::builtin_registry().names();
}

std::vector<std::pair<std::string, Status>> Store::Admin::transport_status() {
  std::vector<std::pair<std::string, Status>> out;
  const auto& registry = transports::builtin_registry();
  for (const auto& name : registry.names()) {
    auto f = registry.find(name);
    out.emplace_back(name, f.ok() && f->available ? f->available() : f.status());
  }
  return out;
}

std::vector<std::pair<std::string, Status>> Store::Admin::gpu_transport_status() {
  std::vector<std::pair<std::string, Status>> out;
  const auto& registry = transports::builtin_registry();
  for (const auto& name : registry.names()) {
    auto f = registry.find(name);
    if (!f.ok()) {
      out.emplace_back(name, f.status());
    } else if (!f->gpu_direct) {
      out.emplace_back(name, Status(Errc::unsupported, name + " copies host memory only"));
    } else {
      out.emplace_back(name, f->gpu_direct());
    }
  }
  return out;
}

}  // namespace meshstore
