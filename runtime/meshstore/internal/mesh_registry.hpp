#pragma once

// Rank 0's mesh registry (mesh_registry.cpp): the messages ranks send it
// (join a mesh, leave, name a door, a named singleton, the rendezvous, a
// failed spawn) and the actor that answers them. Internal: shared by
// mesh.cpp, the ranks' side.

#include <caf/all.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/actor_mesh.hpp"

namespace meshstore::internal {

using mesh_join_atom = caf::atom_constant<caf::atom("mesh_join")>;
using mesh_expire_atom = caf::atom_constant<caf::atom("mesh_exp")>;
using mesh_leave_atom = caf::atom_constant<caf::atom("mesh_leave")>;
using mesh_door_atom = caf::atom_constant<caf::atom("mesh_door")>;
using mesh_single_atom = caf::atom_constant<caf::atom("mesh_one")>;
using mesh_set_atom = caf::atom_constant<caf::atom("mesh_set")>;
using mesh_value_atom = caf::atom_constant<caf::atom("mesh_value")>;
using mesh_fail_atom = caf::atom_constant<caf::atom("mesh_fail")>;

// Rank 0's registry: collects each mesh's actors by rank and answers every
// joiner once all ranks are in (or, after the timeout, an error naming the
// ranks still missing).
using registry_actor = caf::typed_actor<
    caf::replies_to<mesh_join_atom, std::string, std::int32_t, std::vector<caf::actor>,
                    std::vector<std::string>>::with<std::vector<caf::actor>>,
    caf::reacts_to<mesh_expire_atom, std::string>,
    caf::replies_to<mesh_leave_atom, std::int32_t>::with<bool>,
    caf::replies_to<mesh_door_atom, std::int32_t, std::string>::with<std::vector<std::string>>,
    caf::replies_to<mesh_single_atom, std::string, std::string, std::vector<std::string>,
                    caf::message>::with<caf::actor>,
    caf::replies_to<mesh_set_atom, std::string, std::string, caf::actor>::with<bool>,
    caf::replies_to<mesh_value_atom, std::string>::with<std::string, caf::actor>,
    caf::reacts_to<mesh_fail_atom, std::string, std::int32_t, caf::error>>;

struct Pending {
  std::vector<caf::actor> slots;
  std::vector<caf::typed_response_promise<std::vector<caf::actor>>> waiting;
  // The actor interface the first joiner declared, and its rank.
  std::vector<std::string> interface;
  std::int32_t interface_rank = -1;
};

struct RegistryState {
  static inline const char* name = "meshstore.mesh_registry";
  std::map<std::string, Pending> pending;
  std::map<std::string, std::vector<caf::actor>> complete;
  // Meshes whose ranks disagreed on the actor interface: every rank of
  // them, earlier or later, gets this error.
  std::map<std::string, caf::error> failed;
  // By rank > 0: where the later ranks connect to it (from_env).
  std::map<std::int32_t, std::string> doors;
  // Named singletons (ProcMesh::get_or_spawn under from_env), made here.
  struct Single {
    std::string type;
    std::vector<std::string> interface;
    caf::actor actor;
  };
  std::map<std::string, Single> singles;
  // The rendezvous: values by key, and the reads waiting for a key.
  std::map<std::string, std::pair<std::string, caf::actor>> values;
  std::map<std::string, std::vector<caf::typed_response_promise<std::string, caf::actor>>>
      value_waiters;
};

// The registry of a mesh of `world` ranks: a mesh not complete within
// `timeout` fails, naming the missing ranks; `owner` is told of ranks that
// leave in good order.
registry_actor::behavior_type registry_impl(registry_actor::stateful_pointer<RegistryState> self,
                                            int world, std::chrono::milliseconds timeout,
                                            std::weak_ptr<MeshCaller> owner);

}  // namespace meshstore::internal
