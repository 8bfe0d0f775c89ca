// Must not compile: a message type of the user's own whose member is a
// bare double, in a mesh call (actor_mesh.hpp, Exact). The walk of the
// type's inspect() reaches it through a vector of another user type.
// style.float_in_type_refused builds this file and passes only when the
// compiler stops at FloatFinder's static_assert.
#include "meshstore/actor_mesh.hpp"

struct Sample {
  std::int64_t step = 0;
  double loss = 0;  // should be meshstore::Exact<double>
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Sample& s) {
  return f(caf::meta::type_name("Sample"), s.step, s.loss);
}

struct Report {
  std::string run;
  std::vector<Sample> samples;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Report& r) {
  return f(caf::meta::type_name("Report"), r.run, r.samples);
}

using report_atom = caf::atom_constant<caf::atom("report")>;
using sink_actor = caf::typed_actor<caf::replies_to<report_atom, Report>::with<bool>>;

meshstore::Future<bool> report(const meshstore::ActorMesh<sink_actor>& mesh) {
  return mesh.call_one<bool>(report_atom::value, Report{"r", {{1, 0.5}}});
}
