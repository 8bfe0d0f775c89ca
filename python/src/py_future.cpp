#include "py_future.hpp"

#include <Python.h>

#include <cmath>
#include <sstream>
#include <string>
#include <thread>

#include "meshstore/status.hpp"

namespace meshstore::python {

namespace {

// meshstore._errors.from_status(code, name, message) -> exception instance.
// Set once at import; deliberately never released (a static Python object
// destroyed after the interpreter would crash the exit).
PyObject* error_factory = nullptr;

}  // namespace

bool interpreter_finalizing() noexcept { return !Py_IsInitialized() || _Py_IsFinalizing(); }

namespace {
unsigned long main_thread_ident = 0;  // set at import, under the GIL
}  // namespace

void note_main_thread() {
  main_thread_ident =
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
}

void retake_gil(PyThreadState* saved) {
  if (interpreter_finalizing() && PyThread_get_thread_ident() != main_thread_ident) {
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  PyEval_RestoreThread(saved);
}

void set_error_factory(py::object fn) {
  Py_XDECREF(error_factory);
  error_factory = fn.release().ptr();
}

[[noreturn]] void raise_status(const Status& status) {
  if (!error_factory) throw std::runtime_error(status.to_string());
  // A message may quote bytes that are not UTF-8 (a malformed file's): they
  // come through escaped rather than failing the conversion.
  const std::string& text = status.message();
  PyObject* message =
      PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "backslashreplace");
  if (!message) throw py::error_already_set();
  py::object exc = py::reinterpret_borrow<py::object>(error_factory)(
      static_cast<int>(status.code()), std::string(errc_name(status.code())),
      py::reinterpret_steal<py::object>(message));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}

PendingCall::~PendingCall() {
  // on_done() dropped the Python objects under the GIL; anything left means
  // the interpreter was finalizing then: leak rather than touch it.
  if (keepalive_.empty() && callbacks_.empty()) return;
  if (interpreter_finalizing()) {
    for (auto& o : keepalive_) o.release();
    for (auto& o : callbacks_) o.release();
    return;
  }
  py::gil_scoped_acquire gil;
  keepalive_.clear();
  callbacks_.clear();
}

void PendingCall::add_done_callback(py::object fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) {
      callbacks_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

void PendingCall::keep_alive(py::object obj) { keepalive_.push_back(std::move(obj)); }

void PendingCall::on_done() {
  if (interpreter_finalizing()) {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    return;  // the destructor leaks what is left
  }
  py::gil_scoped_acquire gil;
  std::vector<py::object> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    callbacks.swap(callbacks_);
  }
  keepalive_.clear();
  for (auto& fn : callbacks) {
    try {
      fn();
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("meshstore future callback");
    }
  }
}

namespace {

// Waits in slices so that Ctrl-C (KeyboardInterrupt) still reaches a
// program blocked in result().
bool wait_interruptibly(const PendingCall& call, double timeout_s) {
  using namespace std::chrono;
  const bool forever = timeout_s < 0 || std::isinf(timeout_s);
  const auto deadline =
      steady_clock::now() + duration_cast<nanoseconds>(duration<double>(forever ? 0 : timeout_s));
  for (;;) {
    auto slice = nanoseconds(milliseconds(100));
    if (!forever) slice = std::min(slice, deadline - steady_clock::now());
    const bool ready = without_gil([&] { return call.wait_for(std::max(slice, nanoseconds(0))); });
    if (ready) return true;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (!forever && steady_clock::now() >= deadline) return false;
  }
}

double parse_timeout(const py::object& timeout) {
  if (timeout.is_none()) return -1;
  const double t = timeout.cast<double>();
  if (std::isnan(t) || t < 0) {
    throw py::value_error("timeout must be None or a number of seconds >= 0, not " +
                          py::repr(timeout).cast<std::string>());
  }
  return t;
}

[[noreturn]] void raise_wait_timeout(double timeout_s) {
  std::ostringstream text;
  text << "the call did not complete within " << timeout_s
       << " s; it is still running (wait again, or await it)";
  PyErr_SetString(PyExc_TimeoutError, text.str().c_str());
  throw py::error_already_set();
}

}  // namespace

void bind_future(py::module_& m) {
  m.def("_set_error_factory", &set_error_factory);
  py::class_<PyFuture>(m, "Future",
                       "The pending result of a store call (meshstore.Future wraps it).")
      .def("done", [](const PyFuture& f) { return f.call->ready(); })
      .def(
          "result",
          [](const PyFuture& f, py::object timeout) {
            const double t = parse_timeout(timeout);
            if (!f.call->ready() && !wait_interruptibly(*f.call, t)) raise_wait_timeout(t);
            return f.call->value();
          },
          py::arg("timeout") = py::none())
      .def(
          "wait",
          [](const PyFuture& f, py::object timeout) {
            const double t = parse_timeout(timeout);
            return f.call->ready() || wait_interruptibly(*f.call, t);
          },
          py::arg("timeout") = py::none())
      .def("cancel",
           [](const PyFuture& f) { return without_gil([&] { return f.call->cancel(); }); })
      .def("add_done_callback",
           [](const PyFuture& f, py::object fn) { f.call->add_done_callback(std::move(fn)); });
}

}  // namespace meshstore::python
