#include "meshstore/checkpoint.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "meshstore/internal/cuda_copy.hpp"

namespace meshstore {

namespace st = safetensors;

namespace {

std::string key_of(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "/" + name;
}

// Creates `dir` and its missing parents.
Status make_dirs(const std::string& dir) {
  std::string at;
  for (std::size_t i = 0; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    at = dir.substr(0, i);
    if (at.empty()) continue;
    if (::mkdir(at.c_str(), 0755) != 0 && errno != EEXIST) {
      const int e = errno;
      return Status(Errc::io_error,
                    "save: cannot create directory '" + at + "': " + std::strerror(e));
    }
  }
  struct stat s {};
  if (::stat(dir.c_str(), &s) != 0 || !S_ISDIR(s.st_mode)) {
    return Status(Errc::io_error, "save: '" + dir + "' is not a directory");
  }
  return Status();
}

}  // namespace

Result<CheckpointReport> load_checkpoint(Store& store, const std::string& path,
                                         const LoadOptions& options) {
  auto opened = st::open_checkpoint(path);
  if (!opened.ok()) return opened.status();
  const st::Checkpoint& c = *opened;
  // The tensors to load, file by file in offset order (the mapping is read
  // front to back).
  std::vector<std::pair<std::size_t, const st::TensorInfo*>> todo;
  for (const auto& n : options.names) {
    if (c.weight_map.count(n) == 0) {
      return Status(Errc::not_found, "load '" + path + "': no tensor '" + n + "'");
    }
  }
  std::uint64_t total = 0;
  for (std::size_t f = 0; f < c.files.size(); ++f) {
    for (const auto& t : c.files[f].header().tensors) {
      if (!options.names.empty() &&
          std::find(options.names.begin(), options.names.end(), t.name) == options.names.end()) {
        continue;
      }
      if (t.name.compare(0, options.name_prefix.size(), options.name_prefix) != 0) continue;
      todo.emplace_back(f, &t);
      total += t.nbytes();
    }
  }
  CheckpointReport report;
  report.files = c.files.size();
  std::uint64_t done = 0;
  if (options.progress) options.progress(0, total);
  for (std::size_t i = 0; i < todo.size();) {
    // One batch: puts in flight together, then their pages let go.
    std::vector<std::pair<std::string, TensorView>> batch;
    std::vector<std::size_t> in_batch;
    std::uint64_t bytes = 0;
    for (; i < todo.size() && (batch.empty() || bytes < options.batch_bytes); ++i) {
      const auto& [f, t] = todo[i];
      auto view = c.files[f].view(t->name);
      if (!view.ok()) return view.status();
      batch.emplace_back(key_of(options.prefix, t->name), *view);
      in_batch.push_back(i);
      bytes += t->nbytes();
    }
    auto put = store.put_batch(batch).get(options.timeout);
    if (!put.ok()) {
      return put.status().with_context("load '" + path + "' (tensors '" +
                                       todo[in_batch.front()].second->name + "' to '" +
                                       todo[in_batch.back()].second->name + "')");
    }
    for (auto j : in_batch) c.files[todo[j].first].release(todo[j].second->name);
    done += bytes;
    report.tensors += batch.size();
    report.bytes += bytes;
    if (options.progress) options.progress(done, total);
  }
  return report;
}

namespace {

// Key `key`'s name relative to `prefix` ("P/T" -> "T"): keys() matched P
// at a '/' or '.' boundary, or P ends with one.
std::string relative_name(const std::string& prefix, const std::string& key) {
  if (prefix.empty()) return key;
  std::string n = key.substr(prefix.size());
  if (!n.empty() && (n.front() == '/' || n.front() == '.') && prefix.back() != '/' &&
      prefix.back() != '.') {
    n.erase(0, 1);
  }
  return n;
}

// Writes `dir/file` of the keys `members` of `keys` (under `prefix`):
// every tensor read from the store in parallel, straight into the file's
// pages, then the file committed. `*done` counts the bytes read, for
// options.progress out of `total`.
Status save_file(Store& store, const std::string& prefix, const std::string& dir,
                 const std::string& file, const std::vector<KeyInfo>& keys,
                 const std::vector<std::size_t>& members, const SaveCheckpointOptions& options,
                 std::uint64_t total, std::uint64_t* done) {
  std::vector<st::Writer::Spec> specs;
  for (auto i : members) {
    specs.push_back(
        st::Writer::Spec{relative_name(prefix, keys[i].key), keys[i].dtype, keys[i].shape});
  }
  auto w = st::Writer::open(dir + "/" + file, specs, options.metadata);
  if (!w.ok()) return w.status();
  std::vector<std::pair<std::string, TensorView>> reads;
  for (auto i : members) {
    auto dst = w->tensor(relative_name(prefix, keys[i].key));
    if (!dst.ok()) return dst.status();
    if (dst->nbytes() > 0) reads.emplace_back(keys[i].key, *dst);
  }
  for (std::size_t r = 0; r < reads.size(); r += 64) {
    std::vector<std::pair<std::string, TensorView>> batch(
        reads.begin() + static_cast<std::ptrdiff_t>(r),
        reads.begin() + static_cast<std::ptrdiff_t>(std::min(reads.size(), r + 64)));
    std::uint64_t bytes = 0;
    for (const auto& [k, v] : batch) bytes += v.nbytes();
    auto got = store.get_into_batch(batch).get(options.timeout);
    if (!got.ok()) return got.status().with_context("save '" + prefix + "' into '" + file + "'");
    *done += bytes;
    if (options.progress) options.progress(*done, total);
  }
  return w->commit();
}

}  // namespace

Result<CheckpointReport> save_checkpoint(Store& store, const std::string& prefix,
                                         const std::string& dir,
                                         const SaveCheckpointOptions& options) {
  auto listed = store.list(prefix).get(options.timeout);
  if (!listed.ok()) return listed.status().with_context("save '" + prefix + "'");
  std::vector<KeyInfo> keys;
  for (auto& k : *listed) {
    if (k.is_object) continue;
    if (k.key == prefix) {
      // A state dict (put_state_dict) under the prefix: saved as one, by
      // its entries' names, values and packed entries included.
      auto sd = store.state_dicts().get(prefix).get(options.timeout);
      if (sd.ok()) {
        MESHSTORE_RETURN_IF_ERROR(make_dirs(dir));
        const std::string path = options.max_shard_bytes == 0 ? dir + "/model.safetensors" : dir;
        return save_state_dict(*sd, path, options);
      }
      if (sd.status().code() != Errc::wrong_kind) return sd.status().with_context("save");
      return Status(Errc::invalid_argument,
                    "save '" + prefix + "': key '" + k.key +
                        "' is the prefix itself and has no tensor name relative to it");
    }
    keys.push_back(std::move(k));
  }
  if (keys.empty()) {
    return Status(Errc::not_found, "save '" + prefix + "': no tensor keys under it");
  }
  MESHSTORE_RETURN_IF_ERROR(make_dirs(dir));
  std::vector<std::uint64_t> sizes;
  std::uint64_t total = 0;
  for (const auto& k : keys) {
    sizes.push_back(k.nbytes);
    total += k.nbytes;
  }
  const auto [file_of, files] = st::plan_shards(sizes, options.max_shard_bytes);
  CheckpointReport report;
  report.files = files;
  std::map<std::string, std::string> weight_map;
  std::uint64_t done = 0;
  if (options.progress) options.progress(0, total);
  for (std::size_t f = 0; f < files; ++f) {
    const std::string file = files == 1 ? "model.safetensors" : st::shard_file_name(f, files);
    std::vector<std::size_t> members;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (file_of[i] != f) continue;
      members.push_back(i);
      weight_map[relative_name(prefix, keys[i].key)] = file;
    }
    MESHSTORE_RETURN_IF_ERROR(
        save_file(store, prefix, dir, file, keys, members, options, total, &done));
    report.tensors += members.size();
  }
  report.bytes = total;
  if (files > 1) MESHSTORE_RETURN_IF_ERROR(st::write_index(dir, total, weight_map));
  return report;
}

namespace {

constexpr char kValueMark[] = "meshstore.value.";

const char* value_kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::bytes:
      return "bytes";
    case Value::Kind::string:
      return "string";
    case Value::Kind::int64:
      return "int64";
    case Value::Kind::float64:
      return "float64";
    case Value::Kind::boolean:
      return "bool";
  }
  return "?";
}

// A value as the tensor it is stored as (owning its bytes).
Tensor value_tensor(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::int64: {
      auto t = Tensor::empty(DType::int64, {}).value();
      *t.data_as<std::int64_t>() = v.as_int64();
      return t;
    }
    case Value::Kind::float64: {
      auto t = Tensor::empty(DType::float64, {}).value();
      *t.data_as<double>() = v.as_float64();
      return t;
    }
    case Value::Kind::boolean: {
      auto t = Tensor::empty(DType::boolean, {}).value();
      *static_cast<std::uint8_t*>(t.data()) = v.as_bool() ? 1 : 0;
      return t;
    }
    default: {
      auto t = Tensor::empty(DType::uint8, {static_cast<std::int64_t>(v.text().size())}).value();
      if (!v.text().empty()) std::memcpy(t.data(), v.text().data(), v.text().size());
      return t;
    }
  }
}

// The value stored as `view`, marked `kind`; Errc::invalid_argument when
// the tensor does not fit the mark.
Result<Value> value_of(const std::string& name, const std::string& kind, const TensorView& view) {
  auto bad = [&] {
    return Status(Errc::invalid_argument, "value '" + name + "' is marked " + kind +
                                              " but stored as " +
                                              std::string(dtype_safetensors_name(view.dtype())) +
                                              " " + shape_to_string(view.shape()));
  };
  const bool scalar = view.shape().empty();
  const auto* p = static_cast<const std::byte*>(view.data());
  if (kind == "int64") {
    if (!scalar || view.dtype() != DType::int64) return bad();
    std::int64_t x;
    std::memcpy(&x, p, sizeof(x));
    return Value::int64(x);
  }
  if (kind == "float64") {
    if (!scalar || view.dtype() != DType::float64) return bad();
    double x;
    std::memcpy(&x, p, sizeof(x));
    return Value::float64(x);
  }
  if (kind == "bool") {
    if (!scalar || view.dtype() != DType::boolean) return bad();
    return Value::boolean(std::to_integer<int>(*p) != 0);
  }
  if (kind == "bytes" || kind == "string") {
    if (view.shape().size() != 1 || view.dtype() != DType::uint8) return bad();
    std::string text(reinterpret_cast<const char*>(p), view.nbytes());
    return kind == "bytes" ? Value::bytes(std::move(text)) : Value::string(std::move(text));
  }
  return Status(Errc::invalid_argument, "value '" + name + "' has unknown kind '" + kind + "'");
}

// The values a checkpoint's files mark, by name -> kind.
std::map<std::string, std::string> marked_values(const st::Checkpoint& c) {
  std::map<std::string, std::string> out;
  const std::string mark = kValueMark;
  for (const auto& f : c.files) {
    for (const auto& [k, v] : f.header().metadata) {
      if (k.compare(0, mark.size(), mark) == 0) out[k.substr(mark.size())] = v;
    }
  }
  return out;
}

}  // namespace

Result<CheckpointReport> save_state_dict(const StateDict& sd, const std::string& path,
                                         const SaveCheckpointOptions& options) {
  std::vector<Tensor> holders;  // the values' bytes
  std::vector<st::NamedTensor> tensors;
  std::map<std::string, std::string> metadata = options.metadata;
  for (const auto& e : sd.entries()) {
    if (e.is_tensor()) {
      tensors.push_back(st::NamedTensor{e.name, e.view});
      continue;
    }
    holders.push_back(value_tensor(*e.value));
    tensors.push_back(st::NamedTensor{e.name, holders.back().view()});
    metadata[kValueMark + e.name] = value_kind_name(e.value->kind());
  }
  CheckpointReport report;
  report.tensors = tensors.size();
  for (const auto& t : tensors) report.bytes += t.view.nbytes();
  std::vector<std::uint64_t> sizes;
  for (const auto& t : tensors) sizes.push_back(t.view.nbytes());
  const auto [file_of, files] = st::plan_shards(sizes, options.max_shard_bytes);
  if (options.max_shard_bytes == 0) {
    report.files = 1;
    MESHSTORE_RETURN_IF_ERROR(st::write_file(path, tensors, metadata, options.progress));
    return report;
  }
  MESHSTORE_RETURN_IF_ERROR(make_dirs(path));
  report.files = files;
  std::map<std::string, std::string> weight_map;
  std::uint64_t done = 0;
  for (std::size_t f = 0; f < files; ++f) {
    const std::string name = st::shard_file_name(f, files);
    std::vector<st::NamedTensor> mine;
    std::map<std::string, std::string> meta = options.metadata;
    std::uint64_t bytes = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (file_of[i] != f) continue;
      mine.push_back(tensors[i]);
      weight_map[tensors[i].name] = name;
      bytes += tensors[i].view.nbytes();
      if (auto m = metadata.find(kValueMark + tensors[i].name); m != metadata.end()) {
        meta.insert(*m);  // a value's mark travels with it
      }
    }
    MESHSTORE_RETURN_IF_ERROR(st::write_file(path + "/" + name, mine, meta));
    done += bytes;
    if (options.progress) options.progress(done, report.bytes);
  }
  MESHSTORE_RETURN_IF_ERROR(st::write_index(path, report.bytes, weight_map));
  return report;
}

Result<StateDict> load_state_dict(const std::string& path) {
  auto c = st::open_checkpoint(path);
  if (!c.ok()) return c.status();
  const auto values = marked_values(*c);
  StateDict sd;
  for (const auto& f : c->files) {
    for (const auto& t : f.header().tensors) {
      auto view = f.view(t.name);
      if (!view.ok()) return view.status();
      if (auto v = values.find(t.name); v != values.end()) {
        auto value = value_of(t.name, v->second, *view);
        if (!value.ok()) return value.status().with_context("load '" + path + "'");
        MESHSTORE_RETURN_IF_ERROR(sd.insert(t.name, std::move(value).value()));
        continue;
      }
      auto owned = Tensor::empty(t.dtype, t.shape);
      if (!owned.ok()) return owned.status().with_context("load '" + path + "': '" + t.name + "'");
      if (t.nbytes() > 0) std::memcpy(owned->data(), view->data(), t.nbytes());
      f.release(t.name);
      MESHSTORE_RETURN_IF_ERROR(sd.insert(t.name, std::move(owned).value()));
    }
  }
  return sd;
}

Status read_state_dict_into(const st::Checkpoint& checkpoint, StateDict& sd,
                            const std::map<std::string, TensorSlice>& boxes) {
  const auto values = marked_values(checkpoint);
  // Everything checked before any byte moves.
  std::vector<std::string> problems;
  bool dtype_off = false, shape_off = false;
  bool cuda_off = false;  // a device entry, and CUDA cannot be used here
  for (const auto& e : sd.entries()) {
    auto it = checkpoint.weight_map.find(e.name);
    if (it == checkpoint.weight_map.end()) {
      problems.push_back("'" + e.name + "' is not in the checkpoint");
      continue;
    }
    const auto* info = checkpoint.files[it->second].header().find(e.name);
    const bool is_value = values.count(e.name) != 0;
    if (!e.is_tensor()) {
      if (!is_value) problems.push_back("'" + e.name + "' is a value here, a tensor there");
      continue;
    }
    if (is_value) {
      problems.push_back("'" + e.name + "' is a tensor here, a value there");
      continue;
    }
    const auto box = boxes.find(e.name);
    const Shape want = box == boxes.end() ? info->shape : box->second.local_shape();
    if (internal::cuda::on_device(e.view)) {
      if (auto s = internal::cuda::check_device_view(e.view, "'" + e.name + "'"); !s.ok()) {
        if (s.code() == Errc::unavailable) cuda_off = true;
        problems.push_back(s.message());
        continue;
      }
    }
    if (box != boxes.end() && box->second.global_shape() != info->shape) {
      shape_off = true;
      problems.push_back("'" + e.name + "': box " + box->second.to_string() +
                         " is not in the stored shape " + shape_to_string(info->shape));
    } else if (e.view.dtype() != info->dtype) {
      dtype_off = true;
      problems.push_back("'" + e.name + "': stored " +
                         std::string(dtype_safetensors_name(info->dtype)) + ", destination " +
                         std::string(dtype_name(e.view.dtype())));
    } else if (e.view.shape() != want) {
      shape_off = true;
      problems.push_back("'" + e.name + "': " + (box == boxes.end() ? "stored " : "box ") +
                         shape_to_string(want) + ", destination " +
                         shape_to_string(e.view.shape()));
    }
  }
  for (const auto& [name, box] : boxes) {
    if (!sd.find(name)) problems.push_back("a box for '" + name + "', which sd does not hold");
  }
  if (!problems.empty()) {
    std::string msg = "read '" + checkpoint.root + "' into a state dict:";
    for (std::size_t i = 0; i < problems.size() && i < 8; ++i)
      msg += (i ? "; " : " ") + problems[i];
    if (problems.size() > 8) msg += "; and " + std::to_string(problems.size() - 8) + " more";
    return Status(cuda_off    ? Errc::unavailable
                  : dtype_off ? Errc::dtype_mismatch
                  : shape_off ? Errc::shape_mismatch
                              : Errc::invalid_argument,
                  msg);
  }
  for (const auto& e : sd.entries()) {
    const auto& file = checkpoint.files[checkpoint.weight_map.at(e.name)];
    if (!e.is_tensor()) {
      auto view = file.view(e.name);
      if (!view.ok()) return view.status();
      auto v = value_of(e.name, values.at(e.name), *view);
      if (!v.ok()) return v.status();
      MESHSTORE_RETURN_IF_ERROR(sd.set_value(e.name, std::move(v).value()));
      continue;
    }
    auto box = boxes.find(e.name);
    MESHSTORE_RETURN_IF_ERROR(
        read_tensor_into(checkpoint, e.name, e.view, box == boxes.end() ? nullptr : &box->second));
    file.release(e.name);
  }
  return Status();
}

Status read_tensor_into(const st::Checkpoint& checkpoint, const std::string& name,
                        const TensorView& dst, const TensorSlice* box) {
  auto it = checkpoint.weight_map.find(name);
  if (it == checkpoint.weight_map.end()) {
    return Status(Errc::not_found,
                  "checkpoint '" + checkpoint.root + "' has no tensor '" + name + "'");
  }
  auto src = checkpoint.files[it->second].view(name);
  if (!src.ok()) return src.status();
  const std::string ctx = "read '" + name + "'";
  if (internal::cuda::on_device(dst)) {
    // GPU memory: one copy from the file's pages (a box is cut on the host first).
    MESHSTORE_RETURN_IF_ERROR(internal::cuda::check_device_view(dst, ctx));
  }
  if (!box) return internal::cuda::copy_view(*src, dst).with_context(ctx);
  if (box->global_shape() != src->shape()) {
    return Status(Errc::out_of_range, ctx + ": box " + box->to_string() +
                                          " is not in the tensor's shape " +
                                          shape_to_string(src->shape()));
  }
  // The box as a strided view of the tensor's contiguous bytes.
  const Strides strides = contiguous_strides(src->shape());
  std::int64_t first = 0;
  for (std::size_t d = 0; d < strides.size(); ++d) first += box->offsets()[d] * strides[d];
  auto* base = static_cast<std::byte*>(src->data());
  const TensorView part(
      box->empty() ? nullptr : base + first * static_cast<std::int64_t>(dtype_size(src->dtype())),
      src->dtype(), box->local_shape(), strides);
  return internal::cuda::copy_view(part, dst).with_context(ctx);
}

}  // namespace meshstore
