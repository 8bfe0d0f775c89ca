// The safetensors format for meshstore.safetensors: files mapped and read
// through persistence/'s strict reader, written through its writer. The
// Python module (meshstore/safetensors.py) gives them Hugging Face's names.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "meshstore/safetensors.hpp"
#include "py_future.hpp"
#include "tensor_bridge.hpp"

namespace meshstore::python {

namespace st = safetensors;

namespace {

// The metadata of a header as Python sees it: a dict, or None when the
// header has no "__metadata__" (as Hugging Face's metadata() answers).
py::object metadata_of(const st::Header& h) {
  if (!h.has_metadata) return py::none();
  return py::cast(h.metadata);
}

// The header's tensors in file order: (name, safetensors dtype, shape,
// begin, end), offsets relative to the data.
py::list entries_of(const st::Header& h) {
  py::list out;
  for (const auto& t : h.tensors) {
    out.append(py::make_tuple(t.name, std::string(dtype_safetensors_name(t.dtype)),
                              py::tuple(py::cast(t.shape)), t.begin, t.end));
  }
  return out;
}

// A tensor's bytes as uint8, one trailing dimension of its element size
// where that is over one byte: what a dtype the caller's framework lacks
// comes as.
TensorView as_bytes(const TensorView& v) {
  const auto size = static_cast<std::int64_t>(dtype_size(v.dtype()));
  Shape shape = v.shape();
  if (size > 1) shape.push_back(size);
  return TensorView(v.data(), DType::uint8, shape);
}

// A tensor of `file` for Python: over its mapping, which it keeps alive.
PyTensor tensor_of(const st::File& file, const std::string& name, bool raw) {
  auto v = file.view(name);
  if (!v.ok()) raise_status(v.status());
  PyTensor out;
  out.view = raw ? as_bytes(*v) : *v;
  out.owner = std::make_shared<st::File>(file);  // copies share the mapping
  out.read_only = file.access() == st::File::Access::read_only;
  return out;
}

st::File::Access access_of(bool writable) {
  return writable ? st::File::Access::copy_on_write : st::File::Access::read_only;
}

// [(name, source, as_bool)] as the writer's named views, and the capsules
// that keep their memory alive meanwhile.
struct Named {
  std::vector<st::NamedTensor> tensors;
  std::vector<py::object> owners;
};

Named named_in(const py::list& items, const std::string& what) {
  Named out;
  for (auto h : items) {
    auto item = h.cast<py::tuple>();
    if (item.size() != 3) throw py::value_error(what + ": an item is (name, tensor, as_bool)");
    auto name = item[0].cast<std::string>();
    auto imported =
        import_tensor(item[1], item[2].cast<bool>(), false, what + ": tensor '" + name + "'");
    out.tensors.push_back(st::NamedTensor{std::move(name), imported.view});
    out.owners.push_back(std::move(imported.owner));
  }
  return out;
}

}  // namespace

void bind_safetensors(py::module_& m) {
  py::class_<st::File>(m, "SafetensorsFile", "A safetensors file, mapped and validated.")
      .def_static(
          "open",
          [](const std::string& path, bool writable) {
            auto f = without_gil([&] { return st::File::open(path, access_of(writable)); });
            if (!f.ok()) raise_status(f.status());
            return std::move(f).value();
          },
          py::arg("path"), py::arg("writable"))
      .def_property_readonly("path", &st::File::path)
      .def_property_readonly("size", &st::File::size)
      .def_property_readonly(
          "writable",
          [](const st::File& f) { return f.access() == st::File::Access::copy_on_write; })
      .def("entries", [](const st::File& f) { return entries_of(f.header()); })
      .def("metadata", [](const st::File& f) { return metadata_of(f.header()); })
      .def(
          "tensor",
          [](const st::File& f, const std::string& name, bool raw) {
            return tensor_of(f, name, raw);
          },
          py::arg("name"), py::arg("raw") = false,
          "Tensor `name` over the mapping; raw: as uint8 bytes (see as_bytes).");

  m.def(
      "safetensors_write",
      [](const std::string& path, const py::list& items,
         const std::map<std::string, std::string>& metadata) {
        const std::string what = "save_file '" + path + "'";
        auto named = named_in(items, what);
        auto s = without_gil([&] { return st::write_file(path, named.tensors, metadata); });
        if (!s.ok()) raise_status(s);
      },
      py::arg("path"), py::arg("items"), py::arg("metadata"));

  m.def(
      "safetensors_serialize",
      [](const py::list& items, const std::map<std::string, std::string>& metadata) {
        auto named = named_in(items, "save");
        auto image = without_gil([&] { return st::serialize(named.tensors, metadata, "save"); });
        if (!image.ok()) raise_status(image.status());
        return py::bytes(*image);
      },
      py::arg("items"), py::arg("metadata"));

  m.def(
      "safetensors_load",
      [](const py::buffer& data, bool raw_unsigned) {
        auto info = data.request();
        const std::string_view image(static_cast<const char*>(info.ptr),
                                     static_cast<std::size_t>(info.size * info.itemsize));
        auto h = st::parse_file_image(image, "<bytes>");
        if (!h.ok()) raise_status(h.status());
        py::list tensors;
        for (const auto& t : h->tensors) {
          auto copy = Tensor::empty(t.dtype, t.shape);
          if (!copy.ok()) raise_status(copy.status().with_context("load: tensor '" + t.name + "'"));
          if (t.nbytes() > 0)
            std::memcpy(copy->data(), image.data() + h->data_start + t.begin, t.nbytes());
          const bool raw = raw_unsigned && (t.dtype == DType::uint16 || t.dtype == DType::uint32 ||
                                            t.dtype == DType::uint64);
          PyTensor out = from_tensor(std::move(copy).value());
          if (raw) out.view = as_bytes(out.view);
          tensors.append(py::make_tuple(t.name, out));
        }
        return py::make_tuple(tensors, metadata_of(*h));
      },
      py::arg("data"), py::arg("raw_unsigned"),
      "Parses a whole file image: [(name, tensor)] in file order, each a copy, and the "
      "metadata (None without any).");
}

}  // namespace meshstore::python
