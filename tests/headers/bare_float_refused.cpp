// Must not compile: a bare double in a mesh call (actor_mesh.hpp, Exact).
// style.bare_float_refused builds this file and passes only when the
// compiler stops at refuse_bare_floats' static_assert.
#include "meshstore/actor_mesh.hpp"

using scale_atom = caf::atom_constant<caf::atom("scale")>;
using scale_actor = caf::typed_actor<caf::replies_to<scale_atom, double>::with<double>>;

meshstore::Future<double> scale(const meshstore::ActorMesh<scale_actor>& mesh) {
  return mesh.call_one<double>(scale_atom::value, 0.5);
}
