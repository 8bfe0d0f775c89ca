// _native.Port and _native.PortReceiver: meshstore.actor's Channel, on the
// C++ Port<T> and PortReceiver<T> (mesh_values.hpp) with T = the pickled
// value's bytes. A Port pickles as where its receiver is (node and
// registry name), so it travels in an endpoint's arguments and results,
// and in other ports' values, to any process of the mesh.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "meshstore/actor_mesh.hpp"
#include "meshstore/internal/actor_runtime.hpp"
#include "py_future.hpp"

namespace meshstore::python {
namespace {

using PyPort = Port<std::string>;
using PyReceiver = PortReceiver<std::string>;

// Every process runtime of a program that imports meshstore knows the
// type, so a Port crosses between its processes.
[[maybe_unused]] const bool kPortType = internal::register_process_types(
    [](caf::actor_system_config& cfg) { add_port_type<std::string>(cfg, "meshstore.py_port"); });

// The process's actor runtime (the one its meshes and stores share; made
// here, without the network, when none runs yet).
std::shared_ptr<internal::ActorRuntime> this_runtime(const std::string& who) {
  auto rt = internal::process_runtime(internal::RuntimeOptions{}, who);
  if (!rt.ok()) raise_status(rt.status());
  return std::move(rt).value();
}

// A port as Python holds it: where its actor is (the node and the name
// its receiver registered it under), not a handle (one in a Python object
// that outlives its system would hang the system's shutdown), and the
// runtime it is sent from. The handle is looked up at a send (look_up)
// and kept weakly.
struct PortObject {
  caf::node_id node;
  caf::atom_value name = caf::atom("");
  // Weak: a port an endpoint kept must not hold its process's runtime
  // (a worker's would then outlive its serve loop and slow its exit).
  std::weak_ptr<internal::ActorRuntime> runtime;
  std::mutex mu;
  caf::weak_actor_ptr found;  // guarded by mu
  bool was_found = false;     // guarded by mu: `found` was set once
  std::shared_ptr<internal::ActorRuntime> live() const {
    auto rt = runtime.lock();
    if (!rt) raise_status(Status(Errc::shutdown, "port: this process's actor runtime is gone"));
    return rt;
  }
};

// The receiving end, with its runtime (kept until it is dropped: an open
// port's actor must not outlive its system) and the name its port is
// registered under once port() gave it out.
struct ReceiverObject {
  PyReceiver rx;
  std::shared_ptr<internal::ActorRuntime> runtime;
  std::mutex mu;
  caf::atom_value name = caf::atom("");  // guarded by mu; empty until named
  ~ReceiverObject() { unname(); }
  void unname() {
    std::lock_guard<std::mutex> lock(mu);
    if (name != caf::atom("")) runtime->system().registry().erase(name);
    name = caf::atom("");
  }
};

// A name for a port of this process, unique in it ("msp" and a count in
// base 62: CAF's registry names are atoms of at most 10 characters).
caf::atom_value fresh_name() {
  static std::atomic<std::uint64_t> next{0};
  static const char kDigits[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  std::uint64_t n = next.fetch_add(1);
  std::string s = "msp";
  do {
    s += kDigits[n % 62];
    n /= 62;
  } while (n != 0);
  return caf::atom_from_string(s);
}

std::string port_bytes(caf::actor_system& system, const caf::node_id& node, caf::atom_value name) {
  std::vector<char> buf;
  caf::binary_serializer sink(system, buf);
  auto n = node;
  auto raw = static_cast<std::uint64_t>(name);
  if (auto err = sink(n, raw)) {
    raise_status(Status(Errc::internal, "Port: cannot serialize it: " + system.render(err)));
  }
  return std::string(buf.data(), buf.size());
}

constexpr std::chrono::milliseconds kLookupTimeout{5000};

Status gone() { return internal::port_receiver_gone(); }

// The port's handle when this process knows it without asking: kept from
// an earlier send while its actor lives, or in this process's registry.
// Null when another process must be asked.
Result<PyPort> known_handle(PortObject& p, caf::actor_system& system) {
  std::lock_guard<std::mutex> lock(p.mu);
  if (auto h = caf::actor_cast<caf::strong_actor_ptr>(p.found)) {
    return PyPort(caf::actor_cast<PyPort::handle_type>(h));
  }
  // Found before and expired since: its actor, or the proxy of it that
  // its process's connection kept, is gone.
  if (p.was_found) return gone();
  if (p.node == system.node()) {
    auto h = system.registry().get(p.name);
    if (!h) return gone();
    return PyPort(caf::actor_cast<PyPort::handle_type>(h));
  }
  if (!system.has_middleman()) {
    return Status(Errc::unavailable,
                  "port: its receiver is in another process, and this one's actor runtime has "
                  "no network (open the channel once the meshes it goes to exist)");
  }
  return PyPort();
}

// From inside `self`: looks the port up in its process's registry, as
// CAF's remote_lookup does, but bounded and without blocking a thread. A
// node the middleman does not know (its process went away) fails at once.
void look_up(caf::event_based_actor* self, std::shared_ptr<PortObject> p,
             std::chrono::milliseconds send_timeout, std::function<void(Result<PyPort>)> k) {
  // A lookup is one round trip; a process that does not answer in this
  // long is taken for gone (the middleman keeps knowing a node that died).
  const auto timeout = std::min(send_timeout, kLookupTimeout);
  auto& mm = self->system().middleman();
  self->request(mm.actor_handle(), timeout, caf::get_atom::value, p->node)
      .then(
          [=, &mm](const caf::node_id&, const std::string&, std::uint16_t) {
            auto basp = mm.named_broker<caf::io::basp_broker>(caf::atom("BASP"));
            self->send(basp, caf::forward_atom::value, p->node, caf::atom("ConfigServ"),
                       caf::make_message(caf::get_atom::value, p->name));
            self->become(
                [=](caf::strong_actor_ptr& h) {
                  if (!h) return k(gone());
                  {
                    std::lock_guard<std::mutex> lock(p->mu);
                    p->found = caf::actor_cast<caf::weak_actor_ptr>(h);
                    p->was_found = true;
                  }
                  k(PyPort(caf::actor_cast<PyPort::handle_type>(h)));
                },
                caf::after(timeout) >>
                    [=] {
                      k(Status(Errc::unavailable,
                               "port: its receiver is gone or unreachable (its process did not "
                               "answer a lookup within " +
                                   std::to_string(timeout.count()) + " ms)"));
                    });
          },
          [=](caf::error&) { k(gone()); });
}

// Sends `value` to the port `p` from a short-lived actor of `system`
// (Port::send wants an actor; Python calls from the actor loop's thread,
// or any other), looking its handle up first when needed.
Future<void> send_from_outside(caf::actor_system& system, std::shared_ptr<PortObject> p,
                               std::string value, std::chrono::milliseconds timeout) {
  auto known = known_handle(*p, system);
  if (!known.ok()) return make_error_future<void>(known.status());
  auto done = std::make_shared<Promise<void>>();
  auto out = done->future();
  ForeignThreadGuard guard;
  system.spawn([port = std::move(known).value(), p = std::move(p), value = std::move(value), done,
                timeout](caf::event_based_actor* self) {
    auto send = [self, value, done, timeout](Result<PyPort> to) {
      if (!to.ok()) {
        done->set_error(to.status());
        return self->quit();
      }
      to->send(
          self, value,
          [self, done](const Status& s) {
            if (s.ok()) {
              done->set_value();
            } else {
              done->set_error(s);
            }
            self->quit();
          },
          timeout);
    };
    if (port.valid()) return send(port);
    look_up(self, p, timeout, send);
  });
  return out;
}

// The last reference to the process's runtime goes without the GIL
// (without_gil_if_held, py_future.hpp).
void let_go(std::shared_ptr<internal::ActorRuntime> rt) {
  without_gil_if_held([&] { rt.reset(); });
}

std::shared_ptr<ReceiverObject> new_receiver() {
  return std::shared_ptr<ReceiverObject>(new ReceiverObject(), DeleteWithoutGil<ReceiverObject>());
}

std::shared_ptr<PortObject> port_from_bytes(const std::string& bytes) {
  auto p = std::make_shared<PortObject>();
  auto rt = this_runtime("Port");
  p->runtime = rt;
  auto& system = rt->system();
  std::uint64_t raw = 0;
  caf::binary_deserializer source(system, bytes.data(), bytes.size());
  if (auto err = source(p->node, raw)) {
    const auto why = system.render(err);
    let_go(std::move(rt));
    raise_status(Status(Errc::invalid_argument, "Port: not a port's bytes (" + why + ")"));
  }
  p->name = static_cast<caf::atom_value>(raw);
  let_go(std::move(rt));
  return p;
}

}  // namespace

void bind_ports(py::module_& m) {
  py::class_<PortObject, std::shared_ptr<PortObject>>(m, "Port")
      .def("send",
           [](const std::shared_ptr<PortObject>& p, py::bytes value, double timeout_s) {
             std::string v(value);
             const auto timeout =
                 std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000.0));
             auto rt = p->live();
             return wrap_void(without_gil([&] {
               auto sent = send_from_outside(rt->system(), p, std::move(v), timeout);
               rt.reset();
               return sent;
             }));
           })
      .def("to_bytes",
           [](const PortObject& p) {
             auto rt = p.live();
             auto bytes = port_bytes(rt->system(), p.node, p.name);
             let_go(std::move(rt));
             return py::bytes(bytes);
           })
      .def_static("from_bytes", [](const py::bytes& b) { return port_from_bytes(std::string(b)); });
  py::class_<ReceiverObject, std::shared_ptr<ReceiverObject>>(m, "PortReceiver")
      .def_static(
          "open",
          [](std::size_t capacity) {
            auto r = new_receiver();
            r->runtime = this_runtime("Channel.open");
            auto rx = without_gil([&] { return PyReceiver::open(r->runtime->system(), capacity); });
            if (!rx.ok()) raise_status(rx.status());
            r->rx = std::move(rx).value();
            return r;
          })
      .def("port",
           [](ReceiverObject& r) {
             auto& system = r.runtime->system();
             std::lock_guard<std::mutex> lock(r.mu);
             if (r.name == caf::atom("")) {
               // Named in this process's registry, where a lookup from any
               // process of the mesh finds it.
               r.name = fresh_name();
               system.registry().put(r.name, r.rx.port().handle());
             }
             auto p = std::make_shared<PortObject>();
             p->node = system.node();
             p->name = r.name;
             p->runtime = r.runtime;
             return p;
           })
      .def("recv",
           [](const ReceiverObject& r) {
             return wrap(r.rx.recv(),
                         [](const std::string& s) { return py::object(py::bytes(s)); });
           })
      .def("close", [](ReceiverObject& r) {
        without_gil([&] {
          r.unname();
          r.rx.close();
        });
      });
}

}  // namespace meshstore::python
