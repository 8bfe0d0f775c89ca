#include "meshstore/checkpoint.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

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

Result<CheckpointReport> save_checkpoint(Store& store, const std::string& prefix,
                                         const std::string& dir,
                                         const SaveCheckpointOptions& options) {
  auto listed = store.list(prefix).get(options.timeout);
  if (!listed.ok()) return listed.status().with_context("save '" + prefix + "'");
  std::vector<KeyInfo> keys;
  for (auto& k : *listed) {
    if (k.is_object) continue;
    if (k.key == prefix) {
      return Status(Errc::invalid_argument,
                    "save '" + prefix + "': key '" + k.key +
                        "' is the prefix itself and has no tensor name relative to it");
    }
    keys.push_back(std::move(k));
  }
  if (keys.empty()) {
    return Status(Errc::not_found, "save '" + prefix + "': no tensor keys under it");
  }
  // Names relative to the prefix ("P/T" -> "T"); keys() matched P at a
  // '/' or '.' boundary, or P ends with one.
  auto name_of = [&](const std::string& key) {
    if (prefix.empty()) return key;
    std::string n = key.substr(prefix.size());
    if (!n.empty() && (n.front() == '/' || n.front() == '.') && prefix.back() != '/' &&
        prefix.back() != '.') {
      n.erase(0, 1);
    }
    return n;
  };
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
    std::vector<st::Writer::Spec> specs;
    std::vector<std::size_t> members;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (file_of[i] != f) continue;
      specs.push_back(st::Writer::Spec{name_of(keys[i].key), keys[i].dtype, keys[i].shape});
      members.push_back(i);
    }
    auto w = st::Writer::open(dir + "/" + file, specs, options.metadata);
    if (!w.ok()) return w.status();
    // Every tensor of the file read in parallel, straight into its pages.
    std::vector<std::pair<std::string, TensorView>> reads;
    for (auto i : members) {
      auto dst = w->tensor(name_of(keys[i].key));
      if (!dst.ok()) return dst.status();
      if (dst->nbytes() > 0) reads.emplace_back(keys[i].key, *dst);
      weight_map[name_of(keys[i].key)] = file;
    }
    for (std::size_t r = 0; r < reads.size(); r += 64) {
      std::vector<std::pair<std::string, TensorView>> batch(
          reads.begin() + static_cast<std::ptrdiff_t>(r),
          reads.begin() + static_cast<std::ptrdiff_t>(std::min(reads.size(), r + 64)));
      std::uint64_t bytes = 0;
      for (const auto& [k, v] : batch) bytes += v.nbytes();
      auto got = store.get_into_batch(batch).get(options.timeout);
      if (!got.ok()) return got.status().with_context("save '" + prefix + "' into '" + file + "'");
      done += bytes;
      if (options.progress) options.progress(done, total);
    }
    MESHSTORE_RETURN_IF_ERROR(w->commit());
    report.tensors += members.size();
  }
  report.bytes = total;
  if (files > 1) MESHSTORE_RETURN_IF_ERROR(st::write_index(dir, total, weight_map));
  return report;
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
  if (!box) return copy_into(*src, dst).with_context(ctx);
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
  return copy_into(part, dst).with_context(ctx);
}

}  // namespace meshstore
