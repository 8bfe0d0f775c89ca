#pragma once

// Tensors across the Python boundary, without copying: DLPack capsules in
// (torch, numpy, any producer; strided views included) and _native.Tensor
// out, which exports DLPack and the buffer protocol over the same bytes.

#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "meshstore/tensor.hpp"

namespace meshstore::python {

namespace py = pybind11;

/// A caller's tensor as the store sees it: a view of its memory, and the
/// capsule that keeps that memory alive (keep it until the call completes).
struct ImportedTensor {
  TensorView view;
  py::object owner;
};

/// Reads a "dltensor" capsule (from obj.__dlpack__()) without taking it, or
/// a _native.Tensor as it is:
/// the capsule still owns the memory. `as_bool` marks uint8 bytes that are
/// a bool tensor's (torch and DLPack 0.6 cannot export bool). Raises
/// ValueError naming `what` for what the store cannot carry (complex,
/// lanes, negative strides, an unknown device).
ImportedTensor import_tensor(const py::object& source, bool as_bool, bool for_write,
                             const std::string& what);

/// The tensor Python gets back: contiguous or strided memory and whatever
/// keeps it alive (a meshstore::Tensor, a staged state dict).
struct PyTensor {
  TensorView view;
  std::shared_ptr<const void> owner;
  bool read_only = false;
};

/// A PyTensor owning `t` (what get() answers).
PyTensor from_tensor(Tensor t);

/// Binds _native.Tensor.
void bind_tensor(py::module_& m);

}  // namespace meshstore::python
