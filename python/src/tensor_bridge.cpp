#include "tensor_bridge.hpp"

#include <dlpack/dlpack.h>
#include <pybind11/stl.h>

#include <cstring>
#include <vector>

#include "meshstore/tensor.hpp"

namespace meshstore::python {

namespace {

constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedCapsuleName = "used_dltensor";

[[noreturn]] void refuse(const std::string& what, const std::string& why) {
  throw py::value_error(what + ": " + why);
}

std::string dl_type_text(const DLDataType& t) {
  static const char* codes[] = {"int", "uint", "float", "opaque", "bfloat", "complex"};
  const std::string code = t.code < 6 ? codes[t.code] : "code " + std::to_string(t.code);
  return code + std::to_string(t.bits) + (t.lanes != 1 ? "x" + std::to_string(t.lanes) : "");
}

DType dtype_from_dl(const DLDataType& t, bool as_bool, const std::string& what) {
  if (t.lanes != 1) refuse(what, "vector dtype " + dl_type_text(t) + " is not supported");
  if (as_bool) {
    if (t.code != kDLUInt || t.bits != 8) refuse(what, "a bool tensor must come as uint8 bytes");
    return DType::boolean;
  }
  switch (t.code) {
    case kDLInt:
      switch (t.bits) {
        case 8:
          return DType::int8;
        case 16:
          return DType::int16;
        case 32:
          return DType::int32;
        case 64:
          return DType::int64;
      }
      break;
    case kDLUInt:
      switch (t.bits) {
        case 8:
          return DType::uint8;
        case 16:
          return DType::uint16;
        case 32:
          return DType::uint32;
        case 64:
          return DType::uint64;
      }
      break;
    case kDLFloat:
      switch (t.bits) {
        case 16:
          return DType::float16;
        case 32:
          return DType::float32;
        case 64:
          return DType::float64;
      }
      break;
    case kDLBfloat:
      if (t.bits == 16) return DType::bfloat16;
      break;
    default:
      break;
  }
  refuse(what, "dtype " + dl_type_text(t) +
                   " is not a meshstore dtype (bool, u/int8-64, float16/32/64, bfloat16)");
}

DLDataType dl_from_dtype(DType d) {
  const auto bits = static_cast<std::uint8_t>(dtype_size(d) * 8);
  switch (d) {
    case DType::int8:
    case DType::int16:
    case DType::int32:
    case DType::int64:
      return {kDLInt, bits, 1};
    case DType::float16:
    case DType::float32:
    case DType::float64:
      return {kDLFloat, bits, 1};
    case DType::bfloat16:
      return {kDLBfloat, 16, 1};
    default:
      // bool (DLPack 0.6 has no bool: meshstore.Tensor.torch() views it
      // back as bool), the unsigned ints, and float8 (opaque bytes).
      return {kDLUInt, bits, 1};
  }
}

Device device_from_dl(const DLDevice& d, const std::string& what) {
  switch (d.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
      return Device::cpu();
    case kDLCUDA:
      return Device::cuda(d.device_id);
    default:
      refuse(what, "device type " + std::to_string(d.device_type) +
                       " is not supported (CPU and CUDA memory are)");
  }
}

// What a capsule we export owns: the tensor's keeper and the arrays the
// DLTensor points into.
struct ExportContext {
  DLManagedTensor managed{};
  std::shared_ptr<const void> owner;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
};

void delete_export(DLManagedTensor* m) { delete static_cast<ExportContext*>(m->manager_ctx); }

// A capsule nobody consumed still owns its tensor.
void capsule_destructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kCapsuleName)) return;  // consumed: not ours
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (m && m->deleter) m->deleter(m);
}

py::object export_dlpack(const PyTensor& t) {
  if (t.read_only) {
    throw py::buffer_error(
        "this tensor is a read-only view of the store's shared memory (get_view), and DLPack "
        "cannot mark memory read-only: a write through it would crash the process. Use "
        "numpy.asarray(t) for a read-only array over the same bytes, or get() for a private "
        "copy");
  }
  auto* ctx = new ExportContext;
  ctx->owner = t.owner;
  ctx->shape.assign(t.view.shape().begin(), t.view.shape().end());
  ctx->strides = t.view.strides().empty() ? contiguous_strides(t.view.shape()) : t.view.strides();
  auto& dl = ctx->managed.dl_tensor;
  dl.data = t.view.data();
  dl.device = t.view.device().type == DeviceType::cuda ? DLDevice{kDLCUDA, t.view.device().index}
                                                       : DLDevice{kDLCPU, 0};
  dl.ndim = static_cast<std::int32_t>(ctx->shape.size());
  dl.dtype = dl_from_dtype(t.view.dtype());
  dl.shape = ctx->shape.data();
  dl.strides = ctx->strides.data();
  dl.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = delete_export;
  PyObject* cap = PyCapsule_New(&ctx->managed, kCapsuleName, capsule_destructor);
  if (!cap) {
    delete ctx;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(cap);
}

// The struct-module format of a dtype for the buffer protocol; none for
// dtypes Python's buffers cannot name (bfloat16, float8: bytes then).
const char* buffer_format(DType d) {
  switch (d) {
    case DType::boolean:
      return "?";
    case DType::uint8:
      return "B";
    case DType::int8:
      return "b";
    case DType::int16:
      return "h";
    case DType::int32:
      return "i";
    case DType::int64:
      return "q";
    case DType::uint16:
      return "H";
    case DType::uint32:
      return "I";
    case DType::uint64:
      return "Q";
    case DType::float16:
      return "e";
    case DType::float32:
      return "f";
    case DType::float64:
      return "d";
    default:
      return nullptr;
  }
}

}  // namespace

ImportedTensor import_tensor(const py::object& source, bool as_bool, bool for_write,
                             const std::string& what) {
  if (py::isinstance<PyTensor>(source)) {
    const auto& t = source.cast<const PyTensor&>();
    if (for_write && t.read_only) {
      refuse(what, "the destination is a read-only view of the store's memory (get_view)");
    }
    return ImportedTensor{t.view, source};
  }
  PyObject* cap = source.ptr();
  if (!PyCapsule_CheckExact(cap)) {
    throw py::type_error(what + ": expected a DLPack capsule or a meshstore.Tensor, got " +
                         py::repr(py::type::of(source)).cast<std::string>());
  }
  if (!PyCapsule_IsValid(cap, kCapsuleName)) {
    refuse(what, PyCapsule_IsValid(cap, kUsedCapsuleName)
                     ? "the DLPack capsule was already consumed (call __dlpack__() again)"
                     : "not a DLPack capsule");
  }
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, kCapsuleName));
  const DLTensor& dl = m->dl_tensor;
  if (dl.ndim < 0) refuse(what, "negative ndim");
  Shape shape(dl.shape, dl.shape + dl.ndim);
  Strides strides;
  if (dl.strides) {
    strides.assign(dl.strides, dl.strides + dl.ndim);
    for (std::int32_t i = 0; i < dl.ndim; ++i) {
      if (strides[i] < 0) {
        refuse(what,
               "negative strides (a flipped view) are not supported; pass a contiguous "
               "copy");
      }
      // A dim of size 1 or 0 may carry any stride; normalise it.
      if (shape[i] <= 1) strides[i] = 0;
    }
  }
  const DType dtype = dtype_from_dl(dl.dtype, as_bool, what);
  void* data = static_cast<std::byte*>(dl.data) + dl.byte_offset;
  TensorView view(data, dtype, std::move(shape), std::move(strides),
                  device_from_dl(dl.device, what));
  if (auto s = view.validate(what); !s.ok()) refuse(what, s.message());
  return ImportedTensor{std::move(view), source};
}

PyTensor from_tensor(Tensor t) {
  PyTensor out;
  out.view = t.view();
  out.read_only = t.read_only();
  out.owner = std::make_shared<Tensor>(std::move(t));
  return out;
}

void bind_tensor(py::module_& m) {
  py::class_<PyTensor>(m, "Tensor", py::buffer_protocol(), R"(A tensor the store gave back.

It shares its bytes with whoever reads it: torch.from_dlpack(t) and
numpy.from_dlpack(t) (or numpy.asarray(t)) make no copy. bool tensors go out
as uint8 over DLPack (DLPack 0.6 has no bool): use t.torch() / t.numpy(),
which view them back as bool.)")
      .def_property_readonly(
          "dtype", [](const PyTensor& t) { return std::string(dtype_name(t.view.dtype())); })
      .def_property_readonly("shape",
                             [](const PyTensor& t) { return py::tuple(py::cast(t.view.shape())); })
      .def_property_readonly("nbytes", [](const PyTensor& t) { return t.view.nbytes(); })
      .def_property_readonly("read_only", [](const PyTensor& t) { return t.read_only; })
      .def_property_readonly(
          "data_ptr",
          [](const PyTensor& t) { return reinterpret_cast<std::uintptr_t>(t.view.data()); })
      .def_property_readonly("device",
                             [](const PyTensor& t) { return t.view.device().to_string(); })
      .def(
          "__dlpack__", [](const PyTensor& t, py::object /*stream*/) { return export_dlpack(t); },
          py::arg("stream") = py::none())
      .def("__dlpack_device__",
           [](const PyTensor& t) {
             return t.view.device().type == DeviceType::cuda
                        ? py::make_tuple(static_cast<int>(kDLCUDA), t.view.device().index)
                        : py::make_tuple(static_cast<int>(kDLCPU), 0);
           })
      .def("__len__",
           [](const PyTensor& t) -> std::int64_t {
             if (t.view.shape().empty()) throw py::type_error("len() of a 0-dim tensor");
             return t.view.shape()[0];
           })
      .def("__repr__",
           [](const PyTensor& t) {
             return "meshstore.Tensor(dtype=" + std::string(dtype_name(t.view.dtype())) +
                    ", shape=" + shape_to_string(t.view.shape()) +
                    (t.read_only ? ", read_only=True" : "") + ")";
           })
      .def_buffer([](const PyTensor& t) -> py::buffer_info {
        if (t.view.device().type != DeviceType::cpu) {
          throw py::buffer_error("a " + t.view.device().to_string() +
                                 " tensor has no buffer in host memory; use torch.from_dlpack");
        }
        const char* fmt = buffer_format(t.view.dtype());
        const auto item = static_cast<py::ssize_t>(dtype_size(t.view.dtype()));
        std::vector<py::ssize_t> shape(t.view.shape().begin(), t.view.shape().end());
        const Strides el =
            t.view.strides().empty() ? contiguous_strides(t.view.shape()) : t.view.strides();
        std::vector<py::ssize_t> strides;
        for (auto s : el) strides.push_back(static_cast<py::ssize_t>(s) * item);
        if (!fmt) {
          throw py::buffer_error(std::string(dtype_name(t.view.dtype())) +
                                 " has no buffer-protocol format; use torch.from_dlpack");
        }
        return py::buffer_info(t.view.data(), item, fmt, static_cast<py::ssize_t>(shape.size()),
                               shape, strides, t.read_only);
      });
}

}  // namespace meshstore::python
