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

#include "meshstore/checkpoint.hpp"
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

  py::class_<st::Checkpoint>(m, "SafetensorsCheckpoint",
                             "A checkpoint: a file, or a directory of shards with its index.")
      .def_static(
          "open",
          [](const std::string& path, bool writable) {
            auto c = without_gil([&] { return st::open_checkpoint(path, access_of(writable)); });
            if (!c.ok()) raise_status(c.status());
            return std::move(c).value();
          },
          py::arg("path"), py::arg("writable"))
      .def_readonly("root", &st::Checkpoint::root)
      .def_readonly("total_bytes", &st::Checkpoint::total_bytes)
      .def("files",
           [](const st::Checkpoint& c) {
             py::list out;
             for (const auto& f : c.files) out.append(f.path());
             return out;
           })
      .def(
          "entries",
          [](const st::Checkpoint& c) {
            py::list out;
            for (const auto& f : c.files) {
              for (const auto& t : f.header().tensors) {
                out.append(py::make_tuple(t.name, std::string(dtype_safetensors_name(t.dtype)),
                                          py::tuple(py::cast(t.shape))));
              }
            }
            return out;
          },
          "(name, safetensors dtype, shape) of every tensor, file by file in offset order.")
      .def(
          "tensor",
          [](const st::Checkpoint& c, const std::string& name) {
            auto it = c.weight_map.find(name);
            if (it == c.weight_map.end()) {
              raise_status(Status(Errc::not_found,
                                  "checkpoint '" + c.root + "' has no tensor '" + name + "'"));
            }
            return tensor_of(c.files[it->second], name, false);
          },
          py::arg("name"))
      .def(
          "read_into",
          [](const st::Checkpoint& c, const std::string& name, const py::object& dst,
             bool as_bool) {
            auto into = import_tensor(dst, as_bool, true, "read '" + name + "'");
            auto s = without_gil([&] {
              auto copied = read_tensor_into(c, name, into.view);
              // The pages read are not needed again: memory stays about
              // one tensor over the destinations.
              if (copied.ok()) c.files[c.weight_map.at(name)].release(name);
              return copied;
            });
            if (!s.ok()) raise_status(s);
          },
          py::arg("name"), py::arg("dst"), py::arg("as_bool"),
          "Copies tensor `name` into `dst` (its dtype and shape, any strides, host or GPU).");

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
