#pragma once

// A meshstore::Future seen from Python (_native.Future): waits release the
// GIL; completion takes the GIL on the completing thread (a store thread)
// only to drop the Python objects the call kept alive and to run Python
// callbacks (asyncio wakes its loop from one with call_soon_threadsafe).

#include <pybind11/pybind11.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "meshstore/future.hpp"
#include "meshstore/status.hpp"

namespace meshstore::python {

namespace py = pybind11;

/// True once the interpreter is shutting down: no thread may take the GIL
/// then (it would hang), so Python references are leaked instead.
bool interpreter_finalizing() noexcept;

/// Remembers the interpreter's main thread (at import): the thread that
/// finalizes it, the one without_gil never parks.
void note_main_thread();

/// Takes the GIL back after PyEval_SaveThread. At interpreter exit Python
/// ends any other thread that takes the GIL (pthread_exit: a forced
/// unwind, which std::terminate()s the process when it crosses a
/// destructor such as py::gil_scoped_release's, or any noexcept frame), so
/// such a thread parks here instead, never to run Python again; the
/// process's exit ends it.
void retake_gil(PyThreadState* saved);

/// Runs f() with the GIL released, then takes it back with retake_gil: what
/// py::gil_scoped_release does, safe for a thread still waiting when the
/// interpreter exits (a daemon thread blocked in a future's result()).
template <class F>
auto without_gil(F&& f) -> decltype(f()) {
  PyThreadState* saved = PyEval_SaveThread();
  try {
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
      retake_gil(saved);
    } else {
      auto r = f();
      retake_gil(saved);
      return r;
    }
  } catch (...) {
    retake_gil(saved);
    throw;
  }
}

/// Runs f() without the GIL when this thread holds it (and the
/// interpreter is not exiting, when no other thread may take the GIL):
/// for dropping what may hold the last reference to the process's actor
/// runtime, whose shutdown waits for every actor and runtime thread, one
/// of which may be waiting for the GIL (a call's completion handing Python
/// its value, a hook's last reference going) while Python frees the
/// object with the GIL held: a deadlock.
template <class F>
void without_gil_if_held(F&& f) {
  if (interpreter_finalizing() || PyGILState_Check() == 0) {
    f();
    return;
  }
  without_gil(std::forward<F>(f));
}

/// A holder's deleter that deletes with without_gil_if_held.
template <class T>
struct DeleteWithoutGil {
  void operator()(T* p) const {
    if (p != nullptr) without_gil_if_held([p] { delete p; });
  }
};

/// Raises the Python exception for `status` (meshstore.Error and its
/// subclasses, made by the factory meshstore/_errors.py registers).
[[noreturn]] void raise_status(const Status& status);

/// The part of a pending call Python sees, whatever its value type.
class PendingCall : public std::enable_shared_from_this<PendingCall> {
 public:
  virtual ~PendingCall();
  virtual bool ready() const = 0;
  /// Waits (GIL released by the caller) at most `timeout`; true when ready.
  virtual bool wait_for(std::chrono::nanoseconds timeout) const = 0;
  /// The value as a Python object, or raises; only once ready, GIL held.
  virtual py::object value() const = 0;
  /// Future::cancel (GIL released by the caller: it may wait for copies,
  /// and completing runs the done callbacks, which take the GIL).
  virtual bool cancel() const = 0;

  /// Runs `fn()` once the call completes: on the completing thread with the
  /// GIL taken, or at once (here) when it already has. GIL held.
  void add_done_callback(py::object fn);
  /// Keeps `obj` alive until the call completes (the buffers it reads or
  /// writes), even if every Python reference to the future goes.
  void keep_alive(py::object obj);
  /// Keeps a C++ object alive as long as the call (a StateDict it fills).
  void keep_alive_native(std::shared_ptr<const void> obj) { native_keepalive_.push_back(obj); }

 protected:
  /// Called once by the subclass when the underlying future completes, on
  /// the completing thread (GIL not held).
  void on_done();

 private:
  void release_python_locked();  // GIL held
  std::mutex mu_;                // guards done_ and callbacks_' membership
  bool done_ = false;
  std::vector<py::object> callbacks_;
  std::vector<py::object> keepalive_;
  std::vector<std::shared_ptr<const void>> native_keepalive_;
};

template <class T>
class Pending final : public PendingCall {
 public:
  /// Turns the value into a Python object (GIL held); unused for void.
  using Convert = std::function<py::object(const std::conditional_t<std::is_void_v<T>, bool, T>&)>;

  static std::shared_ptr<Pending> make(Future<T> fut, Convert convert) {
    return std::shared_ptr<Pending>(new Pending(std::move(fut), std::move(convert)));
  }
  /// Starts listening for completion; call after keep_alive().
  void arm() {
    auto self = std::static_pointer_cast<Pending>(shared_from_this());
    fut_.on_complete([self](const Result<T>&) { self->on_done(); });
  }
  bool ready() const override { return fut_.ready(); }
  bool wait_for(std::chrono::nanoseconds timeout) const override { return fut_.wait_for(timeout); }
  bool cancel() const override { return fut_.cancel(); }
  py::object value() const override {
    const auto r = fut_.get();
    if (!r.ok()) raise_status(r.status());
    if constexpr (std::is_void_v<T>) {
      return py::none();
    } else {
      return convert_(r.value());
    }
  }

 private:
  Pending(Future<T> fut, Convert convert) : fut_(std::move(fut)), convert_(std::move(convert)) {}
  Future<T> fut_;
  Convert convert_;
};

/// The Python object: a handle on a PendingCall.
struct PyFuture {
  std::shared_ptr<PendingCall> call;
};

/// Wraps `fut` for Python, keeping `keep` (Python objects: the buffers the
/// call uses) alive until it completes.
template <class T, class Convert>
PyFuture wrap(Future<T> fut, Convert convert, std::vector<py::object> keep = {},
              std::shared_ptr<const void> native_keep = nullptr) {
  auto p = Pending<T>::make(std::move(fut), std::move(convert));
  for (auto& k : keep) p->keep_alive(std::move(k));
  if (native_keep) p->keep_alive_native(std::move(native_keep));
  p->arm();
  return PyFuture{p};
}

inline PyFuture wrap_void(Future<void> fut, std::vector<py::object> keep = {},
                          std::shared_ptr<const void> native_keep = nullptr) {
  return wrap(std::move(fut), nullptr, std::move(keep), std::move(native_keep));
}

/// Binds _native.Future.
void bind_future(py::module_& m);

}  // namespace meshstore::python
