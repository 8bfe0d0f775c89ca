// Store::Admin: what a store reports of itself (its volumes, its fast
// path, the controller's counters, where it listens) and which transports
// this build has.

#include <algorithm>
#include <chrono>
#include <set>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/client/calls.hpp"
#include "meshstore/client/client.hpp"
#include "meshstore/client/fast_path.hpp"
#include "meshstore/store.hpp"
#include "meshstore/store/reconnect.hpp"
#include "meshstore/store/store_impl.hpp"
#include "meshstore/transports/registry.hpp"

namespace meshstore {

std::uint16_t Store::Admin::port() const noexcept {
  return impl_ ? impl_->port.load() : std::uint16_t{0};
}
std::string Store::Admin::address() const { return impl_ ? impl_->address : std::string(); }

Future<std::vector<VolumeStats>> Store::Admin::stats() { return Impl::volume_stats(impl_.get()); }

Future<std::vector<VolumeStats>> Store::Impl::volume_stats(Impl* impl) {
  client::StatCall call;
  auto fut = Impl::call(impl, protocol::store_stat_atom::value, std::move(call), "stats");
  return fut.then([](const std::vector<client::VolumeStatReply>& in) {
    std::vector<VolumeStats> out;
    for (const auto& r : in) {
      const auto& s = r.stat;
      out.push_back(VolumeStats{s.volume_id, s.bytes_held, s.capacity_bytes, s.objects, s.staged,
                                s.leases, r.unreachable, s.evictions, s.evicted_bytes});
    }
    return out;
  });
}

FastPathStats Store::Admin::fast_path_stats() const {
  return impl_ ? impl_->fast_path_stats() : FastPathStats{};
}

FastPathStats Store::Impl::fast_path_stats() const {
  FastPathStats out;
  auto s = fast->stats();
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
  out.channels = s.channels;
  return out;
}

Future<ControllerCounters> Store::Admin::controller_counters() {
  return Impl::controller_counters(impl_.get());
}

Future<ControllerCounters> Store::Impl::controller_counters(Impl* impl) {
  client::CountersCall call;
  auto fut = Impl::call(impl, protocol::store_counters_atom::value, std::move(call), "counters");
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

std::string Store::Admin::metrics_address() const {
  if (!impl_) return {};
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  return impl_->metrics_server ? impl_->metrics_server->address() : std::string();
}

Status Store::Impl::serve_metrics() {
  if (options.metrics.empty()) return Status();
  // A scrape waits at most this long for the store's answer.
  const auto wait = std::min(options.limits.request_timeout, std::chrono::milliseconds(5000));
  store::MetricsSource source;
  source.volumes = [this, wait]() -> Result<std::vector<VolumeStats>> {
    auto all = volume_stats(this).get(wait);
    if (!all.ok() || hosts_controller) return all;
    std::set<std::string> here;
    {
      std::shared_lock<std::shared_mutex> lock(mu);
      for (const auto& r : registered) here.insert(r.info.volume_id);
    }
    std::vector<VolumeStats> mine;
    for (auto& v : *all) {
      if (here.count(v.volume_id)) mine.push_back(std::move(v));
    }
    return mine;
  };
  if (hosts_controller) {
    source.controller = [this, wait] { return controller_counters(this).get(wait); };
  }
  source.client = [this] { return fast_path_stats(); };
  source.ready_without_volumes = !hosts_controller;
  if (reconnector) {
    source.not_ready = [r = reconnector] {
      auto down = r->down();
      return down.empty() ? down : "not joined to the store's controller: " + down;
    };
  }
  auto server =
      store::MetricsServer::start(options.metrics, std::move(source), options.security.tls);
  if (!server.ok()) return server.status().with_context("StoreOptions: metrics");
  meter = true;
  std::unique_lock<std::shared_mutex> lock(mu);
  metrics_server = std::move(server).value();
  return Status();
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
