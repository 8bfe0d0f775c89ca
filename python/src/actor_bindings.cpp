// _native.ProcMesh and _native.ActorMesh: Python actors (meshstore.actor)
// on the C++ runtime. A Python actor mesh is an ActorMesh<py_actor>: each
// member is a CAF actor holding its Python instance; a message names an
// endpoint and carries its pickled arguments, and the member hands the
// call to the process's actor loop (meshstore/actor/_runtime.py: one
// asyncio loop on a thread of its own), which runs the endpoint and
// completes the reply. No runtime thread runs Python code or waits for it.

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/proc_mesh.hpp"
#include "py_future.hpp"

namespace meshstore::python {
namespace {

using py_call_atom = caf::atom_constant<caf::atom("py_call")>;
// A Python actor: (the call's context, endpoint, pickled arguments) ->
// the pickled reply ("V" + value or "E" + the endpoint's exception).
using py_actor = caf::typed_actor<
    caf::replies_to<CallContext, py_call_atom, std::string, std::string>::with<std::string>>;

// The Python side of one mesh's members: their instances by rank, and the
// runner that starts an endpoint call on the actor loop. Released with
// the GIL (or leaked once the interpreter is exiting).
struct PyMembers {
  std::vector<py::object> instances;
  py::object runner;
  ~PyMembers() {
    if (interpreter_finalizing()) {
      for (auto& i : instances) i.release();
      runner.release();
      return;
    }
    py::gil_scoped_acquire gil;
    instances.clear();
    runner = py::object();
  }
};

// Hands one call to the actor loop; `done` gets the reply. On a runtime
// thread: takes the GIL only to post.
Status post_call(const PyMembers& members, int rank, const CallContext& ctx,
                 const std::string& endpoint, const std::string& args,
                 std::shared_ptr<Promise<std::string>> done) {
  if (interpreter_finalizing()) {
    return Status(Errc::shutdown, "the Python interpreter is exiting");
  }
  py::gil_scoped_acquire gil;
  try {
    auto complete =
        py::cpp_function([done](py::bytes reply) { done->set_value(std::string(reply)); });
    members.runner(members.instances.at(static_cast<std::size_t>(rank)), rank, ctx.rank, ctx.dims,
                   ctx.sizes, endpoint, py::bytes(args), complete);
  } catch (const py::error_already_set& e) {
    return Status(Errc::internal, "endpoint '" + endpoint + "': " + e.what());
  }
  return Status();
}

py_actor::behavior_type py_member(py_actor::pointer self, int rank,
                                  std::shared_ptr<PyMembers> members) {
  return {
      [=](const CallContext& ctx, py_call_atom, const std::string& endpoint,
          const std::string& args) -> caf::result<std::string> {
        auto done = std::make_shared<Promise<std::string>>();
        if (auto s = post_call(*members, rank, ctx, endpoint, args, done); !s.ok()) {
          return actor_error(s);
        }
        auto rp = self->make_response_promise<std::string>();
        // No bound of its own: the caller's request has one.
        on_ready(
            self, done->future(),
            [rp](const Result<std::string>& r) mutable {
              if (r.ok()) {
                rp.deliver(*r);
              } else {
                rp.deliver(actor_error(r.status()));
              }
            },
            std::chrono::hours(24 * 365));
        return rp;
      },
  };
}

// Python's slice arguments: (dim, index) or (dim, begin, end, step).
std::vector<std::pair<std::string, Select>> selects_of(const std::vector<py::tuple>& args) {
  std::vector<std::pair<std::string, Select>> out;
  for (const auto& t : args) {
    const auto dim = t[0].cast<std::string>();
    if (t.size() == 2) {
      out.emplace_back(dim, Select(t[1].cast<int>()));
    } else {
      out.emplace_back(dim, Select(t[1].cast<int>(), t[2].cast<int>(), t[3].cast<int>()));
    }
  }
  return out;
}

py::list dims_of(const Extent& e) {
  py::list out;
  for (const auto& [name, size] : e.dims()) out.append(py::make_tuple(name, size));
  return out;
}

// A member's reply for Python: (True, bytes), or (False, (code, name, message))
// for a runtime error (the member gone, the mesh stopped).
py::tuple reply_of(const Result<std::string>& r) {
  if (r.ok()) return py::make_tuple(true, py::bytes(*r));
  return py::make_tuple(
      false, py::make_tuple(static_cast<int>(r.status().code()),
                            std::string(errc_name(r.status().code())), r.status().message()));
}

template <class T>
T must(Result<T> r) {
  if (!r.ok()) raise_status(r.status());
  return std::move(r).value();
}

using Mesh = ActorMesh<py_actor>;

void bind_actor_mesh(py::module_& m) {
  py::class_<Mesh>(m, "ActorMesh")
      .def_property_readonly("size", &Mesh::size)
      .def("dims", [](const Mesh& a) { return dims_of(a.extent()); })
      .def("ranks", [](const Mesh& a) { return a.extent().ranks(); })
      .def("slice", [](const Mesh& a,
                       const std::vector<py::tuple>& s) { return must(a.slice(selects_of(s))); })
      .def("call_one",
           [](const Mesh& a, const std::string& ep, py::bytes args) {
             return wrap(a.call_one<std::string>(py_call_atom::value, ep, std::string(args)),
                         [](const std::string& s) { return py::object(py::bytes(s)); });
           })
      .def("choose",
           [](const Mesh& a, const std::string& ep, py::bytes args) {
             return wrap(a.choose<std::string>(py_call_atom::value, ep, std::string(args)),
                         [](const std::string& s) { return py::object(py::bytes(s)); });
           })
      .def("call",
           [](const Mesh& a, const std::string& ep, py::bytes args) {
             return wrap(a.call<std::string>(py_call_atom::value, ep, std::string(args)),
                         [](const ValueMesh<std::string>& vm) {
                           py::list out;
                           for (const auto& r : vm) out.append(reply_of(r));
                           return py::object(out);
                         });
           })
      .def("requests",
           [](const Mesh& a, const std::string& ep, py::bytes args) {
             // One future per member, in member order: what stream() waits on.
             std::vector<PyFuture> out;
             const std::string payload(args);
             for (int i = 0; i < a.size(); ++i) {
               out.push_back(wrap(a.ask<std::string>(i, py_call_atom::value, ep, payload),
                                  [](const std::string& s) { return py::object(py::bytes(s)); }));
             }
             return out;
           })
      .def("tell", [](const Mesh& a, const std::string& ep, py::bytes args) {
        if (auto s = a.tell(py_call_atom::value, ep, std::string(args)); !s.ok()) raise_status(s);
      });
}

void bind_proc_mesh(py::module_& m) {
  py::class_<ProcMesh>(m, "ProcMesh")
      .def_static("local",
                  [](const std::vector<std::pair<std::string, int>>& shape, py::object on_failure) {
                    MeshOptions o;
                    // An unhandled failure goes to Python's hook (the GIL taken
                    // on the runtime's thread); it answers whether it handled it.
                    auto hook = std::make_shared<py::object>(std::move(on_failure));
                    o.on_failure = [hook](const MeshFailure& f) {
                      if (interpreter_finalizing()) return true;
                      py::gil_scoped_acquire gil;
                      try {
                        return (*hook)(f.mesh, f.rank, f.why.to_string()).cast<bool>();
                      } catch (const py::error_already_set&) {
                        return false;
                      }
                    };
                    return must(without_gil([&] { return ProcMesh::local(shape, o); }));
                  })
      .def_property_readonly("size", &ProcMesh::size)
      .def("dims", [](const ProcMesh& p) { return dims_of(p.extent()); })
      .def("slice", [](const ProcMesh& p,
                       const std::vector<py::tuple>& s) { return must(p.slice(selects_of(s))); })
      .def("spawn",
           [](ProcMesh& p, const std::string& name, std::vector<py::object> instances,
              py::object runner) {
             auto members = std::make_shared<PyMembers>();
             members->instances = std::move(instances);
             members->runner = std::move(runner);
             return must(without_gil([&] { return p.spawn<py_actor>(name, py_member, members); }));
           })
      .def("stop", [](ProcMesh& p) { without_gil([&] { p.stop(); }); });
}

}  // namespace

void bind_actors(py::module_& m) {
  bind_actor_mesh(m);
  bind_proc_mesh(m);
}

}  // namespace meshstore::python
