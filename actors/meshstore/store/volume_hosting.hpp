#pragma once

// Hosting a store's volumes in a process: what a Store does for its own
// process (Store::Impl::host_volumes) and what a volume node of a store
// spawned on a ProcMesh does (store_mesh.cpp, "meshstore.volumes").

#include <caf/all.hpp>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/protocol/controller_actor.hpp"
#include "meshstore/protocol/directory_actor.hpp"
#include "meshstore/protocol/storage_volume_actor.hpp"
#include "meshstore/protocol/strategy_actor.hpp"
#include "meshstore/status.hpp"
#include "meshstore/store_options.hpp"

namespace meshstore::store {

// This process's host identity: StoreOptions::placement.host, else
// MESHSTORE_HOST, else the hostname.
std::string resolve_host(const StoreOptions& o);

// Asks `target` (local or remote) and waits for an ok_atom.
template <class Handle, class... Ts>
Status ask_ok(caf::actor_system& sys, const Handle& target, std::chrono::milliseconds timeout,
              const std::string& what, Ts&&... xs) {
  caf::scoped_actor self{sys};
  Status out;
  self->request(target, timeout, std::forward<Ts>(xs)...)
      .receive([](caf::ok_atom) {},
               [&](caf::error& e) { out = internal::from_caf_error(e, what); });
  return out;
}

// What a process needs to host its volumes of a store.
struct VolumeHost {
  internal::ActorRuntime* runtime = nullptr;
  const StoreOptions* options = nullptr;  // placement, limits, transport
  std::string host;                       // resolve_host
  std::string data_host;                  // the interface its data listeners (tcp) bind to
  protocol::controller_actor controller;
  protocol::strategy_actor strategy;
  std::string strategy_name;
  bool is_server = false;  // the controller's own process
  // The store reconnects to a restarted server (StoreOptions::limits.
  // reconnect_timeout): commits wait for its controller (VolumeConfig::
  // await_controller).
  bool awaits_failover = false;
  // Whether clients in other processes are to connect here directly (a
  // door). Not in a mesh whose processes are connected to each other
  // already: a second connection between two connected processes breaks
  // CAF 0.17's TLS links.
  bool door = true;
};

// Asks the store's `directory` for its controller, strategy and strategy
// name (a version check: an incompatible store refuses), into `*h`;
// failures read "`what`: ...". With `gone` (the controller that went
// down), an answer that still names it is `unavailable`: a relay
// directory may not have heard of the death yet, and a request to the
// dead controller would only time out.
Status ask_directory(caf::actor_system& sys, const protocol::directory_actor& directory,
                     std::chrono::milliseconds timeout, const std::string& what, VolumeHost* h,
                     const caf::actor_addr& gone = caf::actor_addr());

// Where other clients connect to this process directly for its volumes
// (VolumeInfo::control); empty for a server's, whose volumes share its
// process with the directory every client reached already, and without
// `door`.
std::string control_door(const VolumeHost& h);

// Spawns the volumes the strategy places in this process and registers
// each with the controller and the strategy. Every volume spawned is
// appended to `*owned` as it is made, also when a later one fails, so
// that the caller stops it; with `infos`, what each registered as.
Result<std::vector<protocol::storage_volume_actor>> host_volumes(
    const VolumeHost& h, std::vector<caf::actor>* owned,
    std::vector<wire::VolumeInfo>* infos = nullptr);

}  // namespace meshstore::store
