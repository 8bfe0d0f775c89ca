// The safetensors format for meshstore.safetensors: files mapped and read
// through persistence/'s strict reader, written through its writer. The
// Python module (meshstore/safetensors.py) gives them Hugging Face's names.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/checkpoint.hpp"
#include "meshstore/safetensors.hpp"
#include "meshstore/tensor_slice.hpp"
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

// A placement from Python: the mesh's shape and, per mesh dimension,
// ("shard", dim) or ("replicate", 0).
Placement placement_in(const Shape& mesh, const py::list& dims, const std::string& what) {
  std::vector<DimPlacement> out;
  for (auto h : dims) {
    auto d = h.cast<py::tuple>();
    const auto kind = d[0].cast<std::string>();
    out.push_back(kind == "shard" ? DimPlacement::shard(d[1].cast<std::int64_t>())
                                  : DimPlacement::replicate());
  }
  auto p = Placement::make(mesh, std::move(out));
  if (!p.ok()) raise_status(p.status().with_context(what));
  return std::move(p).value();
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

// Single files: mapped, written, serialized, parsed from bytes.
void bind_files(py::module_& m) {
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
      [](const py::buffer& data, const std::set<std::string>& raw_dtypes) {
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
          const bool raw = raw_dtypes.count(std::string(dtype_safetensors_name(t.dtype))) != 0;
          PyTensor out = from_tensor(std::move(copy).value());
          if (raw) out.view = as_bytes(out.view);
          tensors.append(py::make_tuple(t.name, out));
        }
        return py::make_tuple(tensors, metadata_of(*h));
      },
      py::arg("data"), py::arg("raw_dtypes"),
      "Parses a whole file image: [(name, tensor)] in file order, each a copy (as raw bytes "
      "for the safetensors dtypes named in raw_dtypes), and the metadata (None without any).");
}

// Checkpoints: a file, or a sharded directory with its index.
void bind_checkpoints(py::module_& m) {
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
              for (auto e : entries_of(f.header())) out.append(e);
            }
            return out;
          },
          "(name, safetensors dtype, shape, begin, end) of every tensor, file by file in offset "
          "order.")
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
          [](const st::Checkpoint& c, const std::string& name, const py::object& dst, bool as_bool,
             const std::optional<std::pair<Shape, Shape>>& box) {
            auto into = import_tensor(dst, as_bool, true, "read '" + name + "'");
            std::optional<TensorSlice> slice;
            if (box) {
              auto it = c.weight_map.find(name);
              if (it == c.weight_map.end()) {
                raise_status(Status(Errc::not_found,
                                    "checkpoint '" + c.root + "' has no tensor '" + name + "'"));
              }
              auto made = TensorSlice::make(c.files[it->second].header().find(name)->shape,
                                            box->first, box->second);
              if (!made.ok()) raise_status(made.status().with_context("read '" + name + "'"));
              slice = std::move(made).value();
            }
            auto s = without_gil([&] {
              auto copied = read_tensor_into(c, name, into.view, slice ? &*slice : nullptr);
              // The pages read are not needed again: memory stays about
              // one tensor over the destinations.
              if (copied.ok()) c.files[c.weight_map.at(name)].release(name);
              return copied;
            });
            if (!s.ok()) raise_status(s);
          },
          py::arg("name"), py::arg("dst"), py::arg("as_bool"), py::arg("box") = py::none(),
          "Copies tensor `name` (or the box (offsets, shape) of it) into `dst` (its dtype and "
          "shape, any strides, host or GPU).");
}

// save_sharded (its exchange running Python's all_gather), sizes, and the
// box a placement gives a rank (load_sharded).
void bind_sharded_save(py::module_& m) {
  m.def(
      "parse_size",
      [](const std::string& text) {
        auto n = st::parse_size(text);
        if (!n.ok()) raise_status(n.status());
        return *n;
      },
      py::arg("text"), "Bytes of a size such as \"5GB\" or \"1.5GiB\".");

  m.def(
      "placement_box",
      [](const Shape& global, const Shape& mesh, const py::list& dims, std::int64_t rank) {
        auto box = placement_in(mesh, dims, "placement").slice_for(global, rank);
        if (!box.ok()) raise_status(box.status());
        return py::make_tuple(py::tuple(py::cast(box->offsets())),
                              py::tuple(py::cast(box->local_shape())));
      },
      py::arg("global_shape"), py::arg("mesh_shape"), py::arg("dims"), py::arg("rank"),
      "(offsets, shape) of the box rank `rank` holds of a tensor of `global_shape`.");
  m.def(
      "save_sharded",
      [](const std::string& dir, const py::list& items, const py::dict& placements,
         std::int64_t rank, std::int64_t world, const std::map<std::string, std::size_t>& file_of,
         std::uint64_t max_shard_bytes, const std::map<std::string, std::string>& metadata,
         const py::object& all_gather) {
        const std::string what = "save_sharded '" + dir + "'";
        auto named = named_in(items, what);
        StateDict local;
        for (const auto& t : named.tensors) {
          if (auto s = local.insert(t.name, t.view); !s.ok()) raise_status(s.with_context(what));
        }
        std::map<std::string, Placement> by_name;
        for (auto [name, p] : placements) {
          auto spec = p.cast<py::tuple>();
          by_name.emplace(name.cast<std::string>(),
                          placement_in(spec[0].cast<Shape>(), spec[1].cast<py::list>(), what));
        }
        ShardedSaveOptions o;
        o.file_of = file_of;
        o.max_shard_bytes = max_shard_bytes;
        o.metadata = metadata;
        if (!all_gather.is_none()) {
          // Called from the save with the GIL released: takes it back.
          o.all_gather =
              [&all_gather](const std::string& mine) -> Result<std::vector<std::string>> {
            py::gil_scoped_acquire gil;
            try {
              std::vector<std::string> out;
              for (auto h : all_gather(py::bytes(mine))) out.push_back(h.cast<std::string>());
              return out;
            } catch (py::error_already_set& e) {
              return Status(Errc::unavailable, std::string("all_gather raised ") + e.what());
            } catch (const py::cast_error& e) {
              return Status(Errc::protocol_error,
                            std::string("all_gather answered something not bytes: ") + e.what());
            }
          };
        }
        auto report = without_gil(
            [&] { return meshstore::save_sharded(dir, local, by_name, rank, world, o); });
        if (!report.ok()) raise_status(report.status());
        return py::make_tuple(report->tensors, report->bytes, report->files);
      },
      py::arg("dir"), py::arg("items"), py::arg("placements"), py::arg("rank"), py::arg("world"),
      py::arg("file_of"), py::arg("max_shard_bytes"), py::arg("metadata"), py::arg("all_gather"),
      "This rank's part of a sharded save (checkpoint.hpp, save_sharded): (tensors, bytes, "
      "files) it wrote.");
}

}  // namespace

void bind_safetensors(py::module_& m) {
  bind_files(m);
  bind_checkpoints(m);
  bind_sharded_save(m);
}

}  // namespace meshstore::python
