#include "meshstore/store/volume_hosting.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "meshstore/controller/controller.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/protocol/actor_types.hpp"
#include "meshstore/protocol/wire_glue.hpp"
#include "meshstore/store/options.hpp"
#include "meshstore/transports/registry.hpp"
#include "meshstore/version.hpp"
#include "meshstore/volume/volume.hpp"

namespace meshstore::store {

std::string resolve_host(const StoreOptions& o) {
  if (!o.placement.host.empty()) return o.placement.host;
  if (const char* h = std::getenv("MESHSTORE_HOST"); h && *h) return h;
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

Status ask_directory(caf::actor_system& sys, const protocol::directory_actor& directory,
                     std::chrono::milliseconds timeout, const std::string& what, VolumeHost* h,
                     const caf::actor_addr& gone) {
  caf::scoped_actor self{sys};
  Status out;
  self->request(directory, timeout, protocol::hello_atom::value, std::string(meshstore::version()))
      .receive(
          [&](protocol::controller_actor& c, protocol::strategy_actor& s, std::string& name) {
            h->controller = std::move(c);
            h->strategy = std::move(s);
            h->strategy_name = std::move(name);
          },
          [&](caf::error& e) { out = internal::from_caf_error(e, what); });
  if (out.ok() && gone && h->controller.address() == gone) {
    out = Status(Errc::unavailable,
                 what + ": the directory still names the controller that went down");
  }
  return out;
}

std::string control_door(const VolumeHost& h) {
  if (h.is_server || !h.door) return {};
  auto door = h.runtime->door(h.data_host);
  if (door.ok()) return *door;
  log::get("store")->warn("no direct connections to this process's volumes: {}",
                          door.status().to_string());
  return {};
}

Result<std::vector<protocol::storage_volume_actor>> host_volumes(
    const VolumeHost& h, std::vector<caf::actor>* owned, std::vector<wire::VolumeInfo>* infos) {
  const StoreOptions& options = *h.options;
  auto& sys = h.runtime->system();
  std::vector<protocol::storage_volume_actor> volumes;
  controller::ProcessRole role{h.is_server, options.placement.local_rank, h.host};
  for (auto info : controller::volumes_for(h.strategy_name, role, options.placement.num_volumes)) {
    volume::VolumeConfig vc;
    vc.volume_id = info.volume_id;
    vc.host = h.host;
    vc.capacity_bytes = options.limits.volume_capacity_bytes;
    vc.transport_config = transport_config(options);
    vc.bind_host = h.data_host;
    vc.pool_bytes = options.limits.volume_pool_bytes;
    vc.ring_spin = options.transport.fast_path_spin;
    // A volume outside the server's process outlives its controller: its
    // commits wait for the one the store reconnects to, answered well
    // before their client's own timeout.
    if (h.awaits_failover) {
      vc.await_controller =
          std::min(options.limits.reconnect_timeout, options.limits.request_timeout * 3 / 4);
    }
    if (!options.transport.shared_memory_volumes) {
      // cuda-ipc moves host objects through the volume's shared memory, so
      // it goes with shm: offered, it would outrank cma where CUDA works and
      // then fail every host read.
      for (const auto& name : transports::builtin_registry().names()) {
        if (name != "shm" && name != "cuda-ipc") vc.transports.push_back(name);
      }
    }
    auto spawned = volume::spawn_storage_volume(sys, vc);
    if (!spawned.ok()) return spawned.status();
    owned->push_back(caf::actor_cast<caf::actor>(*spawned));
    info.capacity_bytes = vc.capacity_bytes;
    info.control = control_door(h);
    info.transports =
        vc.transports.empty() ? transports::builtin_registry().names() : vc.transports;
    const std::string what = "register volume '" + info.volume_id + "'";
    const auto timeout = options.limits.request_timeout;
    MESHSTORE_RETURN_IF_ERROR(ask_ok(sys, h.controller, timeout, what,
                                     protocol::register_volume_atom::value, info, *spawned));
    MESHSTORE_RETURN_IF_ERROR(ask_ok(sys, h.strategy, timeout, what,
                                     protocol::register_volume_atom::value, info, *spawned));
    volumes.push_back(std::move(spawned).value());
    if (infos) infos->push_back(info);
  }
  return volumes;
}

}  // namespace meshstore::store
