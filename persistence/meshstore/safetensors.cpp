// Reading safetensors files: strict header validation, files mapped
// read-only or copy-on-write, checkpoints (a file, or shards with their
// index), sizes. Writing is safetensors_write.cpp.

#include "meshstore/safetensors.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace meshstore::safetensors {
namespace {

using json = nlohmann::json;

Status bad(const std::string& file, const std::string& why) {
  return Status(Errc::invalid_argument, "safetensors file '" + file + "': " + why);
}

std::string errno_text(int e) { return std::strerror(e); }

// A JSON value as an unsigned 64-bit integer, or false.
bool as_u64(const json& v, std::uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<std::uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) {
    out = static_cast<std::uint64_t>(v.get<std::int64_t>());
    return true;
  }
  return false;
}

}  // namespace

Result<DType> dtype_from_name(std::string_view name) {
  for (auto d : all_dtypes()) {
    if (dtype_safetensors_name(d) == name) return d;
  }
  return Status(Errc::invalid_argument, "unknown safetensors dtype '" + std::string(name) + "'");
}

const TensorInfo* Header::find(const std::string& name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

namespace {

// The header's "__metadata__": an object of strings.
Status parse_metadata(const json& v, Header& h, const std::string& file) {
  if (!v.is_object()) return bad(file, "\"__metadata__\" is not an object of strings");
  h.has_metadata = true;
  for (auto m = v.begin(); m != v.end(); ++m) {
    if (!m.value().is_string()) {
      return bad(file, "\"__metadata__\" value of '" + m.key() + "' is not a string");
    }
    h.metadata[m.key()] = m.value().get<std::string>();
  }
  return Status();
}

// The element count of shape `sh` into `t.shape`, bounded so that count x
// element size fits in 63 bits.
Result<std::uint64_t> parse_shape(const json& sh, TensorInfo& t, const std::string& ctx,
                                  const std::string& file) {
  if (sh.size() > 64) return bad(file, ctx + " has " + std::to_string(sh.size()) + " dimensions");
  const std::uint64_t limit = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  std::uint64_t numel = 1;
  bool zero = false;
  for (const auto& d : sh) {
    std::uint64_t n = 0;
    if (!as_u64(d, n) || n > limit) {
      return bad(file, ctx + " has a shape entry that is not a non-negative integer");
    }
    t.shape.push_back(static_cast<std::int64_t>(n));
    if (n == 0) zero = true;
    if (!zero && numel > limit / n) return bad(file, ctx + ": its shape overflows 64 bits");
    if (!zero) numel *= n;
  }
  if (zero) numel = 0;
  if (numel > limit / dtype_size(t.dtype))
    return bad(file, ctx + ": its byte size overflows 64 bits");
  return numel;
}

// One tensor's entry: its dtype, shape and data offsets, which must hold
// exactly its bytes.
Result<TensorInfo> parse_tensor(const std::string& name, const json& v, const std::string& file) {
  const std::string ctx = "tensor '" + name + "'";
  if (!v.is_object()) return bad(file, ctx + " is not an object");
  for (auto f = v.begin(); f != v.end(); ++f) {
    if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets") {
      return bad(file, ctx + " has an unknown field '" + f.key() + "'");
    }
  }
  TensorInfo t;
  t.name = name;
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) return bad(file, ctx + " has no dtype string");
  auto dtype = dtype_from_name(dt->get<std::string>());
  if (!dtype.ok()) return bad(file, ctx + ": " + dtype.status().message());
  t.dtype = *dtype;
  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) return bad(file, ctx + " has no shape array");
  auto numel = parse_shape(*sh, t, ctx, file);
  if (!numel.ok()) return numel.status();
  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !as_u64((*off)[0], t.begin) ||
      !as_u64((*off)[1], t.end)) {
    return bad(file, ctx + " has no data_offsets of two non-negative integers");
  }
  if (t.end < t.begin) {
    return bad(file, ctx + " ends (" + std::to_string(t.end) + ") before it begins (" +
                         std::to_string(t.begin) + ")");
  }
  const std::uint64_t want = *numel * dtype_size(t.dtype);
  if (t.end - t.begin != want) {
    return bad(file, ctx + " holds " + std::to_string(t.end - t.begin) + " bytes, but " +
                         std::string(dtype_safetensors_name(t.dtype)) + " " +
                         shape_to_string(t.shape) + " needs " + std::to_string(want));
  }
  return t;
}

// The tensors tile the data: sorted by offset, no gap, no overlap, and
// nothing after the last.
Status check_tiling(Header& h, std::uint64_t data_bytes, const std::string& file) {
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t at = 0;
  for (const auto& t : h.tensors) {
    if (t.begin != at) {
      return bad(
          file, "tensor '" + t.name + "' starts at data byte " + std::to_string(t.begin) +
                    ", expected " + std::to_string(at) +
                    (t.begin < at ? " (it overlaps the tensor before it)" : " (a hole before it)"));
    }
    at = t.end;
  }
  if (at != data_bytes) {
    return bad(file, at > data_bytes ? "the tensors need " + std::to_string(at) +
                                           " data bytes, the file has " + std::to_string(data_bytes)
                                     : "the file has " + std::to_string(data_bytes - at) +
                                           " bytes after the last tensor");
  }
  return Status();
}

}  // namespace

Result<Header> parse_header(std::string_view text, std::uint64_t data_bytes,
                            const std::string& file) {
  if (text.empty() || text.front() != '{') {
    return bad(file, "the header does not start with '{'");
  }
  // Duplicate names are an error; nlohmann keeps the last one silently, so
  // the parser's callback sees every key of the top-level object.
  std::set<std::string> names;
  std::string duplicate;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!names.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json root;
  try {
    root = json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    return bad(file, std::string("the header is not valid JSON: ") + e.what());
  }
  if (!duplicate.empty()) return bad(file, "tensor name '" + duplicate + "' appears twice");
  if (!root.is_object()) return bad(file, "the header is not a JSON object");
  Header h;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      MESHSTORE_RETURN_IF_ERROR(parse_metadata(it.value(), h, file));
      continue;
    }
    auto t = parse_tensor(it.key(), it.value(), file);
    if (!t.ok()) return t.status();
    h.tensors.push_back(std::move(t).value());
  }
  MESHSTORE_RETURN_IF_ERROR(check_tiling(h, data_bytes, file));
  return h;
}

Result<Header> parse_file_image(std::string_view image, const std::string& file) {
  if (image.size() < 8) {
    return bad(file, "it has " + std::to_string(image.size()) +
                         " bytes, fewer than the 8 of the header length");
  }
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(image[static_cast<std::size_t>(i)]);
  if (n > kMaxHeaderBytes) {
    return bad(file, "its header length " + std::to_string(n) + " exceeds the limit of " +
                         std::to_string(kMaxHeaderBytes) + " bytes");
  }
  if (n > image.size() - 8) {
    return bad(file, "its header length " + std::to_string(n) + " runs past the end of the file (" +
                         std::to_string(image.size()) + " bytes)");
  }
  auto h = parse_header(image.substr(8, n), image.size() - 8 - n, file);
  if (!h.ok()) return h.status();
  h->data_start = 8 + n;
  return h;
}

// -- File ---------------------------------------------------------------------

struct File::Impl {
  std::string path;
  Access access = Access::read_only;
  Header header;
  const std::byte* base = nullptr;
  std::uint64_t size = 0;
  std::map<std::string, std::size_t> by_name;
  ~Impl() {
    if (base && size > 0) ::munmap(const_cast<std::byte*>(base), size);
  }
};

Result<File> File::open(const std::string& path, Access access) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    return Status(e == ENOENT ? Errc::not_found : Errc::io_error,
                  "safetensors file '" + path + "': open: " + errno_text(e));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int e = errno;
    ::close(fd);
    return Status(Errc::io_error, "safetensors file '" + path + "': not a regular file" +
                                      (e ? " (" + errno_text(e) + ")" : std::string()));
  }
  auto impl = std::make_shared<Impl>();
  impl->path = path;
  impl->access = access;
  impl->size = static_cast<std::uint64_t>(st.st_size);
  if (impl->size > 0) {
    // A private writable mapping of a file opened read-only: its pages are
    // the page cache's until written, then this mapping's own.
    const bool cow = access == Access::copy_on_write;
    void* p = ::mmap(nullptr, impl->size, cow ? PROT_READ | PROT_WRITE : PROT_READ,
                     cow ? MAP_PRIVATE : MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      return Status(Errc::io_error, "safetensors file '" + path + "': mmap: " + errno_text(e));
    }
    impl->base = static_cast<const std::byte*>(p);
  }
  ::close(fd);
  auto h = parse_file_image(std::string_view(reinterpret_cast<const char*>(impl->base), impl->size),
                            path);
  if (!h.ok()) return h.status();
  impl->header = std::move(h).value();
  for (std::size_t i = 0; i < impl->header.tensors.size(); ++i) {
    impl->by_name.emplace(impl->header.tensors[i].name, i);
  }
  File f;
  f.impl_ = std::move(impl);
  return f;
}

File::Access File::access() const noexcept { return impl_->access; }
const std::string& File::path() const noexcept { return impl_->path; }
const Header& File::header() const noexcept { return impl_->header; }
std::uint64_t File::size() const noexcept { return impl_->size; }

Result<TensorView> File::view(const std::string& name) const {
  auto it = impl_->by_name.find(name);
  if (it == impl_->by_name.end()) {
    return Status(Errc::not_found,
                  "safetensors file '" + impl_->path + "' has no tensor '" + name + "'");
  }
  const auto& t = impl_->header.tensors[it->second];
  // A read-only mapping (PROT_READ): a write through the view faults.
  auto* p = const_cast<std::byte*>(impl_->base + impl_->header.data_start + t.begin);
  return TensorView(t.nbytes() == 0 ? nullptr : p, t.dtype, t.shape);
}

void File::release(const std::string& name) const {
  if (impl_->access != Access::read_only) return;  // its pages may hold writes
  auto it = impl_->by_name.find(name);
  if (it == impl_->by_name.end()) return;
  const auto& t = impl_->header.tensors[it->second];
  const long page = ::sysconf(_SC_PAGESIZE);
  const std::uint64_t from = (impl_->header.data_start + t.begin) / page * page;
  const std::uint64_t to = impl_->header.data_start + t.end;
  if (to > from) ::madvise(const_cast<std::byte*>(impl_->base) + from, to - from, MADV_DONTNEED);
}

namespace {

// Opens `file` into checkpoint `c` (at `c.root`): its tensors join the
// weight map, none of them in two files.
Status add_file(Checkpoint& c, const std::string& file, File::Access access) {
  auto f = File::open(file, access);
  if (!f.ok()) return f.status();
  const std::size_t i = c.files.size();
  for (const auto& t : f->header().tensors) {
    if (!c.weight_map.emplace(t.name, i).second) {
      return Status(Errc::invalid_argument,
                    "checkpoint '" + c.root + "': tensor '" + t.name + "' is in two files");
    }
    c.total_bytes += t.nbytes();
  }
  c.files.push_back(std::move(f).value());
  return Status();
}

// The one .safetensors file of directory `path`, which has no index.
Result<std::string> only_file(const std::string& path) {
  std::vector<std::string> found;
  if (DIR* d = ::opendir(path.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      const std::string ext = ".safetensors";
      if (n.size() > ext.size() && n.compare(n.size() - ext.size(), ext.size(), ext) == 0) {
        found.push_back(n);
      }
    }
    ::closedir(d);
  }
  if (found.size() != 1) {
    return Status(Errc::invalid_argument,
                  "checkpoint '" + path + "': no " + kIndexName + ", and " +
                      std::to_string(found.size()) +
                      " .safetensors files (without an index, exactly one)");
  }
  return path + "/" + found.front();
}

// The index file's JSON, at most kMaxHeaderBytes of it.
Result<json> read_index(const std::string& index_path) {
  auto fail = [&](const std::string& why) {
    return Status(Errc::invalid_argument, "index '" + index_path + "': " + why);
  };
  std::string text;
  const int fd = ::open(index_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    return Status(Errc::io_error, "index '" + index_path + "': " + errno_text(e));
  }
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > kMaxHeaderBytes) {
      ::close(fd);
      return fail("larger than " + std::to_string(kMaxHeaderBytes) + " bytes");
    }
  }
  ::close(fd);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    return fail(std::string("not valid JSON: ") + e.what());
  }
}

// Opens every file the index at `index_path` names into `c`, and checks
// that the index's weight map is the files' tensors, each in its file.
Status open_indexed(Checkpoint& c, const std::string& index_path, File::Access access) {
  auto fail = [&](const std::string& why) {
    return Status(Errc::invalid_argument, "index '" + index_path + "': " + why);
  };
  auto index = read_index(index_path);
  if (!index.ok()) return index.status();
  if (!index->is_object()) return fail("not a JSON object");
  auto wm = index->find("weight_map");
  if (wm == index->end() || !wm->is_object()) return fail("no \"weight_map\" object");
  std::map<std::string, std::string> wanted;  // tensor -> file name
  std::map<std::string, std::size_t> file_index;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string()) return fail("the file of '" + it.key() + "' is not a string");
    const std::string file = it.value().get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
      return fail("'" + it.key() + "' names file '" + file +
                  "', not a file name in the checkpoint's directory");
    }
    wanted[it.key()] = file;
    file_index.emplace(file, 0);
  }
  if (auto md = index->find("metadata"); md != index->end() && !md->is_object()) {
    return fail("\"metadata\" is not an object");
  }
  for (auto& [file, i] : file_index) {
    const std::string full = c.root + "/" + file;
    if (::access(full.c_str(), F_OK) != 0) {
      return fail("it names file '" + file + "', which does not exist");
    }
    i = c.files.size();
    MESHSTORE_RETURN_IF_ERROR(add_file(c, full, access));
  }
  for (const auto& [name, file] : wanted) {
    auto it = c.weight_map.find(name);
    if (it == c.weight_map.end() || it->second != file_index.at(file)) {
      return fail("tensor '" + name + "' is not in '" + file + "'");
    }
  }
  for (const auto& [name, i] : c.weight_map) {
    if (wanted.count(name) == 0) {
      return fail("tensor '" + name + "' of '" + c.files[i].path() + "' is missing from it");
    }
  }
  return Status();
}

}  // namespace

Result<Checkpoint> open_checkpoint(const std::string& path, File::Access access) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int e = errno;
    return Status(e == ENOENT ? Errc::not_found : Errc::io_error,
                  "checkpoint '" + path + "': " + errno_text(e));
  }
  Checkpoint c;
  c.root = path;
  if (!S_ISDIR(st.st_mode)) {
    MESHSTORE_RETURN_IF_ERROR(add_file(c, path, access));
    return c;
  }
  const std::string index_path = path + "/" + kIndexName;
  if (::access(index_path.c_str(), F_OK) != 0) {
    auto file = only_file(path);
    if (!file.ok()) return file.status();
    MESHSTORE_RETURN_IF_ERROR(add_file(c, *file, access));
    return c;
  }
  MESHSTORE_RETURN_IF_ERROR(open_indexed(c, index_path, access));
  return c;
}

Result<std::uint64_t> parse_size(std::string_view text) {
  auto fail = [&] {
    return Status(Errc::invalid_argument, "size '" + std::string(text) +
                                              "': expected a number with an optional unit "
                                              "(B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)");
  };
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == 0) return fail();
  const std::string number(text.substr(0, i));
  std::string unit(text.substr(i));
  for (auto& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  double scale = 0;
  const std::pair<const char*, double> units[] = {{"", 1},
                                                  {"B", 1},
                                                  {"KB", 1e3},
                                                  {"MB", 1e6},
                                                  {"GB", 1e9},
                                                  {"TB", 1e12},
                                                  {"KIB", 1024.0},
                                                  {"MIB", 1048576.0},
                                                  {"GIB", 1073741824.0},
                                                  {"TIB", 1099511627776.0}};
  for (const auto& [u, s] : units) {
    if (unit == u) scale = s;
  }
  if (scale == 0) return fail();
  char* end = nullptr;
  const double v = std::strtod(number.c_str(), &end);
  if (!end || *end != '\0' || !std::isfinite(v) || v * scale > 1.8e19) return fail();
  return static_cast<std::uint64_t>(v * scale + 0.5);
}

}  // namespace meshstore::safetensors
