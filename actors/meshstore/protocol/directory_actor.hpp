#pragma once

// The directory: what a store publishes on its port. A process that
// connects says hello with its meshstore version and gets the controller,
// the strategy and the strategy's name, from which it knows which volumes
// to host itself.

#include <caf/all.hpp>
#include <string>

#include "meshstore/protocol/atoms.hpp"
#include "meshstore/protocol/controller_actor.hpp"
#include "meshstore/protocol/strategy_actor.hpp"

namespace meshstore::protocol {

using hello_atom = caf::atom_constant<caf::atom("hello")>;

using directory_actor = caf::typed_actor<
    // (client version) -> (controller, strategy, strategy name); fails with
    // Errc::protocol_error when the versions' major.minor differ.
    caf::replies_to<hello_atom, std::string>::with<controller_actor, strategy_actor, std::string>>;

using claim_control_atom = caf::atom_constant<caf::atom("ctl_claim")>;
using set_control_atom = caf::atom_constant<caf::atom("ctl_set")>;

// The directory of a store whose controller runs in another process of a
// ProcMesh (StorePlacement::controller_process): it stays where the store
// was spawned while the controller comes and goes. The controller's
// process claims the store first, learning whether it had a controller
// before (then the new one takes over its index), and then hands over
// its controller and strategy. Until it has them, and from the
// controller's death until the next hands over, hello fails with
// Errc::unavailable.
using relay_directory_actor = directory_actor::extend<
    caf::replies_to<claim_control_atom>::with<bool>,
    caf::replies_to<set_control_atom, controller_actor, strategy_actor>::with<caf::ok_atom>>;

}  // namespace meshstore::protocol
