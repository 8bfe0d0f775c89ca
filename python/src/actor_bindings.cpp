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

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/proc_mesh.hpp"
#include "meshstore/transports/shm/shm_segment.hpp"
#include "py_future.hpp"
#include "supervision.hpp"

namespace meshstore::python {
namespace {

using py_call_atom = caf::atom_constant<caf::atom("py_call")>;
using py_init_atom = caf::atom_constant<caf::atom("py_init")>;
// A Python actor: (the call's context, endpoint, pickled arguments) ->
// the pickled reply ("V" + value or "E" + the endpoint's exception). A
// member spawned by type name in a worker process makes its instance from
// its spawn's arguments; init waits for that and answers its __init__'s
// reply.
using py_actor = caf::typed_actor<
    caf::replies_to<CallContext, py_call_atom, std::string, std::string>::with<std::string>,
    caf::replies_to<CallContext, py_init_atom>::with<std::string>>;

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

// A Python object that any thread may drop: its last reference goes with
// the GIL taken (or is leaked once the interpreter is exiting).
struct GilObject {
  explicit GilObject(py::object o) : object(std::move(o)) {}
  ~GilObject() {
    if (interpreter_finalizing()) {
      object.release();
      return;
    }
    py::gil_scoped_acquire gil;
    object = py::object();
  }
  py::object object;
};

// Runs `fn` (GIL held) to hand work to the actor loop, which completes
// it; on a runtime thread, which takes the GIL only to post.
template <class F>
Status post(const std::string& what, F&& fn) {
  if (interpreter_finalizing()) {
    return Status(Errc::shutdown, "the Python interpreter is exiting");
  }
  py::gil_scoped_acquire gil;
  try {
    fn();
  } catch (const py::error_already_set& e) {
    return Status(Errc::internal, what + ": " + e.what());
  }
  return Status();
}

// Answers `rp` with `r`.
void deliver(caf::response_promise& rp, const Result<std::string>& r) {
  if (r.ok()) {
    rp.deliver(*r);
  } else {
    rp.deliver(actor_error(r.status()));
  }
}

// The request being handled is answered, through `rp`, with `done`'s
// reply (on the actor, once the loop completed it).
void deliver_when(py_actor::pointer self, caf::response_promise rp,
                  const std::shared_ptr<Promise<std::string>>& done) {
  // No bound of its own: the caller's request has one.
  on_ready(
      self, done->future(), [rp](const Result<std::string>& r) mutable { deliver(rp, r); },
      std::chrono::hours(24 * 365));
}

// Posts endpoint `endpoint`'s call on members->instances[slot] to the
// actor loop: its reply completes the promise returned.
Result<std::shared_ptr<Promise<std::string>>> start_call(const std::shared_ptr<PyMembers>& members,
                                                         int slot, int rank, const CallContext& ctx,
                                                         const std::string& endpoint,
                                                         const std::string& args) {
  auto done = std::make_shared<Promise<std::string>>();
  Status posted = post("endpoint '" + endpoint + "'", [&] {
    auto complete =
        py::cpp_function([done](py::bytes reply) { done->set_value(std::string(reply)); });
    members->runner(members->instances.at(static_cast<std::size_t>(slot)), rank, ctx.rank, ctx.dims,
                    ctx.sizes, endpoint, py::bytes(args), complete);
  });
  if (!posted.ok()) return posted;
  return done;
}

// Monarch's __cleanup__: as a member stops (its mesh or process stopping,
// supervision's stop), its instance's __cleanup__(exc) is posted to the
// actor loop (_runtime.cleanup). No runtime thread waits for it: Python's
// ProcMesh.stop and a worker's end wait there, bounded.
void post_cleanup(const std::shared_ptr<PyMembers>& members, std::size_t slot, const Status& why) {
  static_cast<void>(post("__cleanup__", [&] {
    if (slot >= members->instances.size() || members->instances[slot].is_none()) return;
    py::object exc = why.ok() ? py::object(py::none()) : py::object(py::str(why.to_string()));
    py::module_::import("meshstore.actor._runtime").attr("cleanup")(members->instances[slot], exc);
  }));
}

caf::result<std::string> call_now(py_actor::pointer self, const std::shared_ptr<PyMembers>& members,
                                  int slot, int rank, const CallContext& ctx,
                                  const std::string& endpoint, const std::string& args) {
  auto done = start_call(members, slot, rank, ctx, endpoint, args);
  if (!done.ok()) return actor_error(done.status());
  auto rp = self->make_response_promise<std::string>();
  deliver_when(self, rp, *done);
  return rp;
}

// A local mesh's member: its instance made by the caller.
py_actor::behavior_type py_member(py_actor::pointer self, int rank,
                                  std::shared_ptr<PyMembers> members) {
  on_stop(self, [members, rank](const Status& why) {
    post_cleanup(members, static_cast<std::size_t>(rank), why);
  });
  return {
      [=](const CallContext& ctx, py_call_atom, const std::string& endpoint,
          const std::string& args) -> caf::result<std::string> {
        return call_now(self, members, rank, rank, ctx, endpoint, args);
      },
      [=](const CallContext&, py_init_atom) -> caf::result<std::string> {
        return actor_error(
            Status(Errc::invalid_argument, "init: a local mesh's member is made by its caller"));
      },
  };
}

// A worker's member's making: its __init__'s reply ("V" + None, or "E" +
// the error), and the calls that came before it.
struct Making {
  bool done = false;
  Result<std::string> reply{Status(Errc::internal, "init: not made yet")};
  std::vector<std::function<void()>> waiting;
  bool made() const { return done && reply.ok() && !reply->empty() && reply->front() == 'V'; }
};

// A worker's member, spawned by type name ("meshstore.py_actor") with the
// pickled (class, args, kwargs, dims, sizes): it makes its instance as it
// starts, on the actor loop, so that a member supervision restarts is
// made again from the same arguments. Calls that arrive first wait for
// it; init answers its __init__'s reply, and after an __init__ that
// raised every call answers that error.
py_actor::behavior_type py_member_named(py_actor::pointer self, int rank, std::string made_as) {
  auto members = std::make_shared<PyMembers>();
  auto making = std::make_shared<Making>();
  auto made = std::make_shared<Promise<std::string>>();
  Status posted = post("init", [&] {
    members->instances.emplace_back(py::none());
    members->runner = py::module_::import("meshstore.actor._runtime").attr("run");
    // On the loop: the instance goes in its slot, then the reply.
    auto complete = py::cpp_function([made, members](py::object instance, py::bytes reply) {
      if (!instance.is_none()) members->instances.at(0) = std::move(instance);
      made->set_value(std::string(reply));
    });
    py::module_::import("meshstore.actor._runtime")
        .attr("construct_here")(py::bytes(made_as), rank, complete);
  });
  if (!posted.ok()) made->set_error(posted);
  on_stop(self, [members](const Status& why) { post_cleanup(members, 0, why); });
  on_ready(
      self, made->future(),
      [making](const Result<std::string>& r) {
        making->reply = r;
        making->done = true;
        auto waiting = std::move(making->waiting);
        for (auto& go : waiting) go();
      },
      std::chrono::hours(24 * 365));
  // `k(rp)` once the member is made (now, if it is).
  auto once_made = [self, making](auto k) -> caf::result<std::string> {
    auto rp = self->make_response_promise<std::string>();
    if (making->done) {
      k(rp);
    } else {
      making->waiting.push_back([k, rp]() mutable { k(rp); });
    }
    return rp;
  };
  return {
      [=](const CallContext& ctx, py_call_atom, const std::string& endpoint,
          const std::string& args) -> caf::result<std::string> {
        if (making->made()) return call_now(self, members, 0, rank, ctx, endpoint, args);
        return once_made([=](caf::response_promise rp) {
          if (!making->made()) return deliver(rp, making->reply);
          auto done = start_call(members, 0, rank, ctx, endpoint, args);
          if (!done.ok()) return deliver(rp, done.status());
          deliver_when(self, rp, *done);
        });
      },
      [=](const CallContext&, py_init_atom) -> caf::result<std::string> {
        return once_made([=](caf::response_promise rp) { deliver(rp, making->reply); });
      },
  };
}

// In every process runtime of a program that imports meshstore: workers
// spawn it by name.
[[maybe_unused]] const bool kPyActorType =
    internal::register_process_types([](caf::actor_system_config& cfg) {
      cfg.add_actor_type("meshstore.py_actor", py_member_named);
    });

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

// Every member's reply of a call, in member order (reply_of each).
py::object replies_of(const ValueMesh<std::string>& vm) {
  py::list out;
  for (const auto& r : vm) out.append(reply_of(r));
  return std::move(out);
}

template <class T>
T must(Result<T> r) {
  if (!r.ok()) raise_status(r.status());
  return std::move(r).value();
}

using Mesh = ActorMesh<py_actor>;

// Python's TLS files, (certificate, key, CA) or none.
TlsOptions tls_of(const std::vector<std::string>& files) {
  if (files.empty()) return {};
  if (files.size() != 3) {
    raise_status(Status(Errc::invalid_argument,
                        "TLS: give tls_certificate, tls_key and tls_ca_file together"));
  }
  return TlsOptions{files[0], files[1], files[2]};
}

// Mesh options whose unhandled failures go to Python's hook (the GIL
// taken on the runtime's thread), which answers whether it handled one.
MeshOptions options_with(py::object on_failure, const TlsOptions& tls = {}) {
  MeshOptions o;
  o.tls = tls;
  auto hook = std::make_shared<GilObject>(std::move(on_failure));
  o.on_failure = [hook](const MeshFailure& f) {
    if (interpreter_finalizing()) return true;
    py::gil_scoped_acquire gil;
    try {
      return hook->object(f.mesh, f.rank, f.why.to_string()).cast<bool>();
    } catch (const py::error_already_set&) {
      return false;
    }
  };
  return o;
}

// Meshes are deleted with DeleteWithoutGil (py_future.hpp): a mesh's
// last copy may let go of the process's actor runtime while a peer's reply
// still comes in (a rank's script returning).
void bind_actor_mesh(py::module_& m) {
  py::class_<Mesh, std::unique_ptr<Mesh, DeleteWithoutGil<Mesh>>>(m, "ActorMesh")
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
                         replies_of);
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
      .def("init",
           [](const Mesh& a) { return wrap(a.call<std::string>(py_init_atom::value), replies_of); })
      .def("tell", [](const Mesh& a, const std::string& ep, py::bytes args) {
        if (auto s = a.tell(py_call_atom::value, ep, std::string(args)); !s.ok()) raise_status(s);
      });
}

// Python's (max_relaunches, relaunch window in milliseconds).
using Relaunch = std::pair<int, std::int64_t>;
using Env = std::vector<std::pair<std::string, std::string>>;

// What spawn_procs starts: `program args...` with `env`, relaunched as
// `relaunch` says.
LaunchSpec spec_of(const std::string& program, const std::vector<std::string>& args, const Env& env,
                   const Relaunch& relaunch) {
  LaunchSpec spec;
  spec.program = program;
  spec.args = args;
  spec.env = env;
  spec.max_relaunches = relaunch.first;
  spec.relaunch_window = std::chrono::milliseconds(relaunch.second);
  return spec;
}

// p.spawn<py_actor>(args...), under `supervision` when Python gave one
// (else the ProcMesh's default).
template <class... Args>
Mesh spawn_supervised(ProcMesh& p, const std::optional<PySupervision>& supervision,
                      Args&&... args) {
  std::optional<Supervision> sup;
  if (supervision) sup = supervision_of(*supervision);
  return must(without_gil([&] {
    return sup ? p.spawn<py_actor>(*sup, std::forward<Args>(args)...)
               : p.spawn<py_actor>(std::forward<Args>(args)...);
  }));
}

using PyProcMesh = py::class_<ProcMesh, std::unique_ptr<ProcMesh, DeleteWithoutGil<ProcMesh>>>;

// How a ProcMesh comes to be: this process, launched, through agents, or
// a launched job's ranks.
void bind_proc_mesh_starts(PyProcMesh& cls) {
  cls.def_static("local",
                 [](const std::vector<std::pair<std::string, int>>& shape, py::object on_failure) {
                   return must(without_gil([&] {
                     return ProcMesh::local(shape, options_with(std::move(on_failure)));
                   }));
                 })
      .def_static(
          "launch",
          [](const std::vector<std::pair<std::string, int>>& shape, const std::string& program,
             const std::vector<std::string>& args, const Env& env, py::object on_failure,
             const std::vector<std::string>& tls, const Relaunch& relaunch) {
            const auto spec = spec_of(program, args, env, relaunch);
            const auto o = options_with(std::move(on_failure), tls_of(tls));
            return must(without_gil([&] { return ProcMesh::launch(shape, spec, o); }));
          })
      .def_static(
          "attach",
          [](const std::vector<std::string>& agents,
             const std::vector<std::pair<std::string, int>>& shape, const std::string& program,
             const std::vector<std::string>& args, const Env& env, py::object on_failure,
             const std::string& bind_host, const std::string& advertise_host,
             const std::vector<std::string>& tls, const Relaunch& relaunch) {
            auto spec = spec_of(program, args, env, relaunch);
            spec.bind_host = bind_host;
            spec.advertise_host = advertise_host;
            const auto o = options_with(std::move(on_failure), tls_of(tls));
            return must(without_gil([&] { return ProcMesh::attach(agents, shape, spec, o); }));
          })
      .def_static("from_env", [](py::object on_failure, const std::vector<std::string>& tls) {
        const auto o = options_with(std::move(on_failure), tls_of(tls));
        return must(without_gil([&] { return ProcMesh::from_env(o); }));
      });
}

void bind_proc_mesh(py::module_& m) {
  PyProcMesh cls(m, "ProcMesh");
  bind_proc_mesh_starts(cls);
  cls.def("rank", &ProcMesh::rank)
      .def("is_local", [](const ProcMesh& p) { return internal::proc_is_local(p); })
      .def("pid", &ProcMesh::pid)
      .def("spawn_named",
           [](ProcMesh& p, const std::string& name, py::bytes made_as,
              const std::optional<PySupervision>& supervision) {
             // A worker's members, each made from `made_as` as it starts.
             return spawn_supervised(p, supervision, name, "meshstore.py_actor",
                                     std::string(made_as));
           })
      .def("get_or_spawn_named",
           [](ProcMesh& p, const std::string& name, py::bytes made_as) {
             // The named singleton, made from `made_as` by its first caller
             // on the view's first process (rank 0's under from_env).
             const std::string made(made_as);
             return must(without_gil(
                 [&] { return p.get_or_spawn<py_actor>(name, "meshstore.py_actor", made); }));
           })
      .def_property_readonly("size", &ProcMesh::size)
      .def("dims", [](const ProcMesh& p) { return dims_of(p.extent()); })
      .def("slice", [](const ProcMesh& p,
                       const std::vector<py::tuple>& s) { return must(p.slice(selects_of(s))); })
      .def("spawn",
           [](ProcMesh& p, const std::string& name, std::vector<py::object> instances,
              py::object runner, const std::optional<PySupervision>& supervision) {
             // This process's members, their instances made by the caller.
             auto members = std::make_shared<PyMembers>();
             members->instances = std::move(instances);
             members->runner = std::move(runner);
             return spawn_supervised(p, supervision, name, py_member, members);
           })
      .def("stop", [](ProcMesh& p) { without_gil([&] { p.stop(); }); });
  // The per-process part of this process's /dev/shm names (what
  // `meshstore gc` recognises once the process is gone): actor arguments'
  // tensors travel in segments named with it.
  m.def("shm_prefix", [] { return transports::shm::process_prefix(); });
  // In a worker process (ProcMesh::launch started it): serves its
  // controller until it stops or goes away.
  m.def("serve_procs", [] {
    auto s = without_gil([] { return ProcMesh::serve(); });
    if (!s.ok()) raise_status(s);
  });
}

}  // namespace

void bind_actors(py::module_& m) {
  bind_actor_mesh(m);
  bind_proc_mesh(m);
}

}  // namespace meshstore::python
