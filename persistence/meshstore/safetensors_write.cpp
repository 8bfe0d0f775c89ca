// Writing safetensors files: the layout, write_file and serialize, the
// Writer a store's save fills in place, the shard index, and the pwrite of
// tensor bytes that save_sharded shares (internal/file_writes.hpp).

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <nlohmann/json.hpp>
#include <set>

#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/internal/file_writes.hpp"
#include "meshstore/safetensors.hpp"

namespace meshstore::safetensors {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

std::string errno_text(int e) { return std::strerror(e); }

// Reads all of `fd` from `offset`: false on a short read or an error.
bool write_all(int fd, const void* data, std::size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

std::string dir_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// A temporary name next to `path` (same file system, so rename is atomic).
std::string temp_name(const std::string& path) {
  return path + ".tmp." + std::to_string(::getpid());
}

// Flushes `fd`, closes it and renames `tmp` to `path`, then flushes the
// directory; removes `tmp` on failure.
Status finish_file(int fd, const std::string& tmp, const std::string& path) {
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return Status(Errc::io_error, "'" + path + "': fsync: " + errno_text(e));
  }
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return Status(Errc::io_error, "'" + path + "': close: " + errno_text(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return Status(Errc::io_error, "'" + path + "': rename: " + errno_text(e));
  }
  const int dfd = ::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status();
}

// The header JSON of `tensors` laid out in order from offset 0, padded with
// spaces so the data starts at a multiple of 8.
std::string header_json(const std::vector<TensorInfo>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  ordered_json h = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json m = ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = std::move(m);
  }
  for (const auto& t : tensors) {
    ordered_json e = ordered_json::object();
    e["dtype"] = std::string(dtype_safetensors_name(t.dtype));
    e["shape"] = t.shape;
    e["data_offsets"] = {t.begin, t.end};
    h[t.name] = std::move(e);
  }
  std::string text = h.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  return text;
}

// Checks names and shapes and lays tensors out: largest element size first
// (so every tensor is aligned to its element size), otherwise in the given
// order. `what` names the call in errors.
Result<std::vector<TensorInfo>> lay_out(const std::vector<Writer::Spec>& specs,
                                        const std::string& what) {
  std::set<std::string> seen;
  std::vector<std::size_t> order(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    order[i] = i;
    const auto& name = specs[i].name;
    if (name.empty() || name == "__metadata__") {
      return Status(Errc::invalid_argument,
                    what + ": tensor name '" + name + "' is reserved or empty");
    }
    if (!seen.insert(name).second) {
      return Status(Errc::invalid_argument, what + ": tensor name '" + name + "' appears twice");
    }
    for (auto d : specs[i].shape) {
      if (d < 0) {
        return Status(Errc::invalid_argument,
                      what + ": tensor '" + name + "' has a negative dimension");
      }
    }
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return dtype_size(specs[a].dtype) > dtype_size(specs[b].dtype);
  });
  std::vector<TensorInfo> out;
  std::uint64_t at = 0;
  for (auto i : order) {
    TensorInfo t;
    t.name = specs[i].name;
    t.dtype = specs[i].dtype;
    t.shape = specs[i].shape;
    t.begin = at;
    at += static_cast<std::uint64_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
    t.end = at;
    out.push_back(std::move(t));
  }
  return out;
}

// The specs of `tensors` (views checked: host memory, or GPU memory CUDA
// can read), and their bytes in `total`.
Result<std::vector<Writer::Spec>> specs_of(const std::vector<NamedTensor>& tensors,
                                           const std::string& what, std::uint64_t* total) {
  std::vector<Writer::Spec> specs;
  *total = 0;
  for (const auto& t : tensors) {
    const std::string ctx = what + ": tensor '" + t.name + "'";
    MESHSTORE_RETURN_IF_ERROR(t.view.validate(ctx));
    if (meshstore::internal::cuda::on_device(t.view)) {
      MESHSTORE_RETURN_IF_ERROR(meshstore::internal::cuda::check_device_view(t.view, ctx));
    }
    specs.push_back(Writer::Spec{t.name, t.view.dtype(), t.view.shape()});
    *total += t.view.nbytes();
  }
  return specs;
}

// Copies the elements of `view` (any strides; a GPU tensor straight from
// the device) into `dst`, host memory, contiguous.
Status pack(const TensorView& view, std::byte* dst) {
  if (view.nbytes() == 0) return Status();
  if (meshstore::internal::cuda::on_device(view)) {
    return meshstore::internal::cuda::to_host(dst, view);
  }
  pack_to(view, dst);
  return Status();
}

// The 8-byte little-endian length of a header of `n` bytes, at `out`.
void put_length(std::byte* out, std::uint64_t n) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
}

}  // namespace

// -- pwrite: how tensor bytes go into files ------------------------------------

namespace internal {

Status pwrite_all(int fd, const std::byte* p, std::size_t n, std::uint64_t at,
                  const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(at));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      return Status(Errc::io_error, "'" + path + "': pwrite: " + errno_text(w < 0 ? errno : EIO));
    }
    p += w;
    n -= static_cast<std::size_t>(w);
    at += static_cast<std::uint64_t>(w);
  }
  return Status();
}

Status write_box(int fd, const std::string& path, std::uint64_t base, const TensorSlice& box,
                 const TensorView& view) {
  if (view.shape() != box.local_shape()) {
    return Status(Errc::shape_mismatch, "a view of " + shape_to_string(view.shape()) +
                                            " for a box of " + shape_to_string(box.local_shape()));
  }
  const std::size_t elsize = dtype_size(view.dtype());
  const std::byte* src = static_cast<const std::byte*>(view.data());
  std::vector<std::byte> packed;
  if (view.nbytes() > 0 && (!view.is_contiguous() || meshstore::internal::cuda::on_device(view))) {
    try {
      packed.resize(view.nbytes());
    } catch (const std::bad_alloc&) {
      return Status(Errc::out_of_capacity,
                    "cannot allocate " + std::to_string(view.nbytes()) + " bytes to pack a tensor");
    }
    MESHSTORE_RETURN_IF_ERROR(pack(view, packed.data()));
    src = packed.data();
  }
  const Shape& g = box.global_shape();
  const Shape& off = box.offsets();
  const Shape& len = box.local_shape();
  const std::size_t k = g.size();
  if (box.empty()) return Status();
  if (k == 0) return pwrite_all(fd, src, elsize, base, path);
  // The run: dimension s onward, where every dimension after s is whole.
  std::size_t s = k - 1;
  while (s > 0 && off[s] == 0 && len[s] == g[s]) --s;
  std::uint64_t inner = 1;  // elements of one step along dimension s
  for (std::size_t d = s + 1; d < k; ++d) inner *= static_cast<std::uint64_t>(g[d]);
  const std::uint64_t run = static_cast<std::uint64_t>(len[s]) * inner * elsize;
  // Global strides, in elements.
  std::vector<std::uint64_t> stride(k, 1);
  for (std::size_t d = k - 1; d > 0; --d)
    stride[d - 1] = stride[d] * static_cast<std::uint64_t>(g[d]);
  std::vector<std::int64_t> idx(s, 0);  // over the box's dimensions before s
  for (std::uint64_t i = 0;; ++i) {
    std::uint64_t at = static_cast<std::uint64_t>(off[s]) * stride[s];
    for (std::size_t d = 0; d < s; ++d)
      at += static_cast<std::uint64_t>(off[d] + idx[d]) * stride[d];
    MESHSTORE_RETURN_IF_ERROR(pwrite_all(fd, src + i * run, run, base + at * elsize, path));
    std::size_t d = s;
    while (d > 0 && ++idx[d - 1] == len[d - 1]) idx[--d] = 0;
    if (d == 0) break;
  }
  return Status();
}

}  // namespace internal

// -- writing ------------------------------------------------------------------

struct Writer::Impl {
  std::string path, tmp;
  int fd = -1;
  std::byte* base = nullptr;
  std::uint64_t size = 0;
  std::uint64_t data_start = 0;
  std::map<std::string, TensorInfo> tensors;
  bool committed = false;

  ~Impl() {
    if (base && size > 0) ::munmap(base, size);
    if (fd >= 0) ::close(fd);
    if (!committed && !tmp.empty()) ::unlink(tmp.c_str());
  }
};

Writer::Writer() = default;
Writer::Writer(Writer&&) noexcept = default;
Writer& Writer::operator=(Writer&&) noexcept = default;
Writer::~Writer() = default;

Result<Writer> Writer::open(const std::string& path, const std::vector<Spec>& specs,
                            const std::map<std::string, std::string>& metadata) {
  auto layout = plan_file(specs, metadata, "write '" + path + "'");
  if (!layout.ok()) return layout.status();
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->tmp = temp_name(path);
  impl->data_start = layout->data_start();
  impl->size = layout->size();
  impl->fd = ::open(impl->tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (impl->fd < 0) {
    const int e = errno;
    impl->tmp.clear();
    return Status(Errc::io_error,
                  "write '" + path + "': create '" + temp_name(path) + "': " + errno_text(e));
  }
  // Space first: a full disk fails here, not as SIGBUS while filling.
  if (int rc = ::posix_fallocate(impl->fd, 0, static_cast<off_t>(impl->size)); rc != 0) {
    return Status(Errc::io_error, "write '" + path + "': cannot reserve " +
                                      std::to_string(impl->size) + " bytes: " + errno_text(rc));
  }
  void* p = ::mmap(nullptr, impl->size, PROT_READ | PROT_WRITE, MAP_SHARED, impl->fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    return Status(Errc::io_error, "write '" + path + "': mmap: " + errno_text(e));
  }
  impl->base = static_cast<std::byte*>(p);
  std::memcpy(impl->base, layout->prefix.data(), layout->prefix.size());
  for (auto& t : layout->tensors) impl->tensors.emplace(t.name, std::move(t));
  Writer w;
  w.impl_ = std::move(impl);
  return w;
}

Result<TensorView> Writer::tensor(const std::string& name) {
  auto it = impl_->tensors.find(name);
  if (it == impl_->tensors.end()) {
    return Status(Errc::not_found, "write '" + impl_->path + "': no tensor '" + name + "'");
  }
  const auto& t = it->second;
  return TensorView(t.nbytes() == 0 ? nullptr : impl_->base + impl_->data_start + t.begin, t.dtype,
                    t.shape);
}

Status Writer::commit() {
  if (impl_->committed) {
    return Status(Errc::invalid_argument, "write '" + impl_->path + "': committed already");
  }
  if (impl_->size > 0 && ::msync(impl_->base, impl_->size, MS_SYNC) != 0) {
    const int e = errno;
    return Status(Errc::io_error, "write '" + impl_->path + "': msync: " + errno_text(e));
  }
  ::munmap(impl_->base, impl_->size);
  impl_->base = nullptr;
  const int fd = impl_->fd;
  impl_->fd = -1;
  impl_->committed = true;  // finish_file removes the temporary on failure
  return finish_file(fd, impl_->tmp, impl_->path);
}

Status write_file(const std::string& path, const std::vector<NamedTensor>& tensors,
                  const std::map<std::string, std::string>& metadata, const Progress& progress) {
  const std::string what = "write '" + path + "'";
  std::uint64_t total = 0;
  auto specs = specs_of(tensors, what, &total);
  if (!specs.ok()) return specs.status();
  auto layout = plan_file(*specs, metadata, what);
  if (!layout.ok()) return layout.status();
  const std::string tmp = temp_name(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int e = errno;
    return Status(Errc::io_error, what + ": create '" + tmp + "': " + errno_text(e));
  }
  // Every step's failure closes and removes the temporary.
  auto fail = [&](const Status& s) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s.with_context(what);
  };
  // No space is reserved ahead: with pwrite a full disk is an error
  // (ENOSPC) like any other, and reserving it (posix_fallocate) made the
  // writes four times slower here (unwritten extents converted as they
  // are written): 0.25 against 1.13 GB/s for 1.19 GB, page cache warm.
  auto s = internal::pwrite_all(fd, reinterpret_cast<const std::byte*>(layout->prefix.data()),
                                layout->prefix.size(), 0, tmp);
  if (!s.ok()) return fail(s);
  std::uint64_t done = 0;
  for (const auto& t : tensors) {
    s = internal::write_box(fd, tmp, layout->offsets.at(t.name), TensorSlice::full(t.view.shape()),
                            t.view);
    if (!s.ok()) return fail(s.with_context("tensor '" + t.name + "'"));
    done += t.view.nbytes();
    if (progress) progress(done, total);
  }
  return finish_file(fd, tmp, path);
}

Result<Layout> plan_file(const std::vector<Writer::Spec>& specs,
                         const std::map<std::string, std::string>& metadata,
                         const std::string& what) {
  auto laid = lay_out(specs, what);
  if (!laid.ok()) return laid.status();
  const std::string head = header_json(*laid, metadata);
  Layout out;
  out.prefix.assign(8, '\0');
  put_length(reinterpret_cast<std::byte*>(out.prefix.data()), head.size());
  out.prefix += head;
  out.tensors = std::move(laid).value();
  for (const auto& t : out.tensors) out.offsets.emplace(t.name, out.data_start() + t.begin);
  return out;
}

Result<std::string> serialize(const std::vector<NamedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata,
                              const std::string& what) {
  std::uint64_t total = 0;
  auto specs = specs_of(tensors, what, &total);
  if (!specs.ok()) return specs.status();
  auto layout = plan_file(*specs, metadata, what);
  if (!layout.ok()) return layout.status();
  std::string out;
  try {
    out.resize(layout->size());
  } catch (const std::bad_alloc&) {
    return Status(Errc::out_of_capacity,
                  what + ": cannot allocate " + std::to_string(layout->size()) + " bytes");
  }
  auto* base = reinterpret_cast<std::byte*>(out.data());
  std::memcpy(base, layout->prefix.data(), layout->prefix.size());
  for (const auto& t : tensors) {
    MESHSTORE_RETURN_IF_ERROR(pack(t.view, base + layout->offsets.at(t.name))
                                  .with_context(what + ": tensor '" + t.name + "'"));
  }
  return out;
}

// -- checkpoints ----------------------------------------------------------------

std::string shard_file_name(std::size_t i, std::size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

std::pair<std::vector<std::size_t>, std::size_t> plan_shards(
    const std::vector<std::uint64_t>& nbytes, std::uint64_t max_shard_bytes) {
  std::vector<std::size_t> file(nbytes.size(), 0);
  std::size_t current = 0;
  std::uint64_t used = 0;
  bool any = false;
  for (std::size_t i = 0; i < nbytes.size(); ++i) {
    if (max_shard_bytes > 0 && any && used + nbytes[i] > max_shard_bytes) {
      ++current;
      used = 0;
      any = false;
    }
    file[i] = current;
    used += nbytes[i];
    any = true;
  }
  return {file, nbytes.empty() ? 1 : current + 1};
}

Status write_index(const std::string& dir, std::uint64_t total_size,
                   const std::map<std::string, std::string>& weight_map) {
  ordered_json index = ordered_json::object();
  index["metadata"] = {{"total_size", total_size}};
  ordered_json map = ordered_json::object();
  for (const auto& [name, file] : weight_map) map[name] = file;
  index["weight_map"] = std::move(map);
  const std::string text = index.dump(2) + "\n";
  const std::string path = dir + "/" + kIndexName;
  const std::string tmp = temp_name(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int e = errno;
    return Status(Errc::io_error, "write '" + path + "': " + errno_text(e));
  }
  if (!write_all(fd, text.data(), text.size())) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return Status(Errc::io_error, "write '" + path + "': " + errno_text(e));
  }
  return finish_file(fd, tmp, path);
}

}  // namespace meshstore::safetensors
