#pragma once

// The messages of process meshes: a launched worker joining its controller
// (hello), the controller asking a worker to spawn or stop, and a host
// agent starting processes for a controller and passing their output and
// exits back. Internal: shared by proc_mesh.cpp and host_agent.cpp.

#include <caf/all.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "meshstore/mesh_values.hpp"

namespace meshstore::internal::proc {

// What a launched worker finds in its environment.
inline constexpr const char* kControllerEnv = "MESHSTORE_PROC_CONTROLLER";  // host:port
inline constexpr const char* kTokenEnv = "MESHSTORE_PROC_TOKEN";
inline constexpr const char* kRankEnv = "MESHSTORE_PROC_RANK";
inline constexpr const char* kWorldEnv = "MESHSTORE_PROC_WORLD";

using proc_hello_atom = caf::atom_constant<caf::atom("p_hello")>;
using proc_spawn_atom = caf::atom_constant<caf::atom("p_spawn")>;
using proc_stop_atom = caf::atom_constant<caf::atom("p_stop")>;

// A worker's process actor: spawns members of registered actor types on
// the controller's request.
using proc_actor =
    caf::typed_actor<caf::replies_to<proc_spawn_atom, std::string, std::string,
                                     std::vector<std::string>, caf::message>::with<caf::actor>,
                     caf::replies_to<proc_stop_atom>::with<bool>>;
// The controller's actor, which launched workers join: hello (token,
// rank, pid, the worker's actor, its door: "HOST:PORT" or empty) answers
// the doors of the workers that joined before it, which it connects to
// before it serves (docs/internals/connections.md, "Direct connections").
using controller_actor =
    caf::typed_actor<caf::replies_to<proc_hello_atom, std::string, std::int32_t, std::int32_t,
                                     proc_actor, std::string>::with<std::vector<std::string>>>;

using agent_launch_atom = caf::atom_constant<caf::atom("a_launch")>;
using agent_signal_atom = caf::atom_constant<caf::atom("a_signal")>;
using agent_stop_atom = caf::atom_constant<caf::atom("a_stop")>;
using agent_relaunch_atom = caf::atom_constant<caf::atom("a_relaunch")>;
using proc_output_atom = caf::atom_constant<caf::atom("p_output")>;
using proc_exit_atom = caf::atom_constant<caf::atom("p_exit")>;

// The controller's end of an agent's processes: their output lines (rank,
// is_stderr, line) and their exits (rank, why).
using sink_actor =
    caf::typed_actor<caf::reacts_to<proc_output_atom, std::int32_t, bool, std::string>,
                     caf::reacts_to<proc_exit_atom, std::int32_t, std::string>>;
// A host agent: launch (sink, program, args, env as K=V, first rank,
// count) starts ranks first..first+count-1 and answers a job id; signal (job, rank, signal);
// relaunch (job, rank) starts an exited rank again (the controller decided); stop (job, grace in
// ms) answers once the job's processes are gone.
using agent_actor = caf::typed_actor<
    caf::replies_to<agent_launch_atom, sink_actor, std::string, std::vector<std::string>,
                    std::vector<std::string>, std::int32_t, std::int32_t>::with<std::uint64_t>,
    caf::replies_to<agent_signal_atom, std::uint64_t, std::int32_t, std::int32_t>::with<bool>,
    caf::reacts_to<agent_relaunch_atom, std::uint64_t, std::int32_t>,
    caf::replies_to<agent_stop_atom, std::uint64_t, std::int64_t>::with<bool>>;

inline void add_proc_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<proc_actor>("meshstore::proc_actor");
  cfg.add_message_type<controller_actor>("meshstore::proc_controller_actor");
  cfg.add_message_type<sink_actor>("meshstore::proc_sink_actor");
  cfg.add_message_type<agent_actor>("meshstore::agent_actor");
  // Their messages cross processes: no float inside (mesh_values.hpp, Exact).
  refuse_floats_in_interface<proc_actor>();
  refuse_floats_in_interface<controller_actor>();
  refuse_floats_in_interface<sink_actor>();
  refuse_floats_in_interface<agent_actor>();
}

}  // namespace meshstore::internal::proc
