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

}  // namespace meshstore::protocol
