#pragma once

// Conversions between Python's arguments and the Store's types, for
// _native.Store: options from keyword arguments, tensors, values and
// state dicts in and out.

#include <pybind11/pybind11.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/store.hpp"

namespace meshstore::python {

namespace py = pybind11;

/// A positive number of seconds, at most 1e9: `name`'s value, else
/// ValueError naming it.
std::chrono::milliseconds seconds_arg(const py::handle& v, const char* name);
/// StoreOptions from Store()'s keyword arguments (unknown ones refused).
StoreOptions store_options(const py::dict& kw);
/// StateDictPutOptions from put_state_dict's keyword arguments.
StateDictPutOptions put_options(const py::dict& kw);

py::object tensor_out(const Tensor& t);
py::object object_out(const StoredObject& o);
py::object value_out(const Value& v);
/// A state dict as [(name, tensor or value)].
py::list state_dict_out(const StateDict& sd);
/// The value entries of a state dict read in place (the tensors are the
/// caller's own).
py::list values_out(const StateDict& sd);

/// A state dict built from Python's entries, and the objects that keep its
/// tensors' memory alive.
struct BuiltStateDict {
  std::shared_ptr<StateDict> sd = std::make_shared<StateDict>();
  std::vector<py::object> keep;
};
/// entries: [(name, kind, payload, as_bool)], kind one of "t" (tensor), "b"
/// (bytes), "s" (str), "i" (int), "f" (float), "?" (bool).
BuiltStateDict state_dict_in(const py::list& entries, bool for_write, const std::string& what);

Result<TensorSlice> slice_in(const Shape& global, const Shape& offsets, const Shape& local);
TensorSlice slice_or_raise(const Shape& g, const Shape& o, const Shape& l, const std::string& what);
/// [(name, dtype, shape)] as TensorSpecs.
std::vector<TensorSpec> specs_in(const py::list& specs, const std::string& what);

/// A batch [(key, source, as_bool)] as the store's (key, view) pairs, and
/// the capsules that keep them alive.
struct ImportedBatch {
  std::vector<std::pair<std::string, TensorView>> views;
  std::vector<py::object> keep;
};
ImportedBatch import_batch(const py::list& items, bool for_write, const char* op);

}  // namespace meshstore::python
