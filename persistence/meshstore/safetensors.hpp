#pragma once

// The safetensors format (Hugging Face): reading, validating and writing
// single files and sharded checkpoints. docs/persistence.md.
//
// A file is: an 8-byte little-endian header length N; N bytes of UTF-8 JSON
// mapping each tensor name to {"dtype", "shape", "data_offsets": [begin,
// end]} (offsets relative to the data, which starts right after the
// header) plus an optional "__metadata__" object of strings; then the raw
// little-endian bytes. A sharded checkpoint is a directory of
// model-0000i-of-0000n.safetensors files and model.safetensors.index.json,
// {"metadata": {"total_size": ...}, "weight_map": {name: file}}.
//
// Readers validate strictly and never read outside the file: every
// malformed file is an Errc::invalid_argument naming the file and what is
// wrong. The JSON is parsed by nlohmann-json, which stays out of this
// header.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshstore/status.hpp"
#include "meshstore/tensor.hpp"

namespace meshstore::safetensors {

/// The largest header accepted, as the reference implementation: 100 MB.
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

/// The DType of a safetensors dtype name ("BF16"; the other way is
/// meshstore::dtype_safetensors_name); Errc::invalid_argument otherwise.
Result<DType> dtype_from_name(std::string_view name);

/// One tensor of a file: where its bytes lie, relative to the data start.
struct TensorInfo {
  std::string name;            ///< The tensor's name.
  DType dtype = DType::uint8;  ///< Its element type.
  Shape shape;                 ///< Its shape.
  std::uint64_t begin = 0;     ///< data_offsets[0]: its first byte.
  std::uint64_t end = 0;       ///< data_offsets[1]: one past its last byte.
  /// Its size in bytes: end - begin.
  std::uint64_t nbytes() const noexcept { return end - begin; }
};

/// A validated header: tensors sorted by their offsets.
struct Header {
  std::vector<TensorInfo> tensors;              ///< Every tensor, by offset.
  std::map<std::string, std::string> metadata;  ///< The `__metadata__` strings.
  bool has_metadata = false;                    ///< The header has `__metadata__` (perhaps empty).
  std::uint64_t data_start = 0;                 ///< Where the data starts: 8 + the header length.
  /// The tensor named `name`, or nullptr.
  const TensorInfo* find(const std::string& name) const;
};

/// Parses and validates a header: `json` is the N header bytes, `data_bytes`
/// the bytes after it in the file; `file` names the file in errors. Checks:
/// well-formed UTF-8 JSON whose top level is an object, unique names, known
/// dtypes, shapes of non-negative integers, data_offsets of two integers
/// with begin <= end and end - begin == dtype size x element count (no
/// overflow), tensors that tile the data exactly (sorted by offset, each
/// starting where the previous ended, the last ending at `data_bytes`),
/// "__metadata__" an object of strings, no other fields.
Result<Header> parse_header(std::string_view json, std::uint64_t data_bytes,
                            const std::string& file);

/// Parses a whole file image (the 8-byte length, the header, the data):
/// the length bound (kMaxHeaderBytes and the image's size) and then
/// parse_header.
Result<Header> parse_file_image(std::string_view image, const std::string& file);

/// A safetensors file mapped into memory. Tensors are views into the
/// mapping (valid while any copy of the File lives); nothing is read until
/// used, and release() lets the kernel drop pages already read. Copies
/// share the mapping. Thread-safe for reads.
class File {
 public:
  /// How the file is mapped.
  enum class Access {
    /// Shared and read-only: views are the page cache's pages; a write
    /// through one faults.
    read_only,
    /// Private and writable: views share the page cache's pages until
    /// written; a written page becomes this mapping's own copy, and no
    /// write reaches the file or any other mapping of it.
    copy_on_write,
  };

  /// Maps and validates `path`. Errc::not_found when it does not exist,
  /// Errc::io_error when it cannot be read, Errc::invalid_argument when it
  /// is malformed (named).
  static Result<File> open(const std::string& path, Access access = Access::read_only);

  /// How the file is mapped.
  Access access() const noexcept;
  /// The path it was opened at.
  const std::string& path() const noexcept;
  /// Its validated header.
  const Header& header() const noexcept;
  /// The file's size in bytes.
  std::uint64_t size() const noexcept;
  /// A read-only view of tensor `name` in the mapping. Errc::not_found
  /// naming the file when it has no such tensor.
  Result<TensorView> view(const std::string& name) const;
  /// Tells the kernel the pages of tensor `name` are no longer needed in
  /// this process (the page cache keeps them): resident memory stays about
  /// one tensor while a loader walks the file. Read-only mappings only: a
  /// copy-on-write mapping keeps its pages (they may hold writes).
  void release(const std::string& name) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

/// Progress of a long operation: bytes done so far out of the total.
using Progress = std::function<void(std::uint64_t done, std::uint64_t total)>;

/// One tensor to write: its name and its elements (any strides).
struct NamedTensor {
  std::string name;  ///< The tensor's name in the file.
  TensorView view;   ///< Its elements.
};

/// Writes `tensors` (names unique, non-empty, not "__metadata__") and
/// `metadata` as one safetensors file at `path`. The bytes go to a
/// temporary name in the same directory, are flushed, and the file is
/// renamed to `path` only when complete: a crash never leaves a torn file
/// under the final name. Tensors are laid out by element size, largest
/// first (each aligned to its element size), otherwise in the given order.
/// Errc::invalid_argument for bad names or views, Errc::io_error for the
/// file system (naming the path).
Status write_file(const std::string& path, const std::vector<NamedTensor>& tensors,
                  const std::map<std::string, std::string>& metadata = {},
                  const Progress& progress = {});

/// The bytes write_file writes for the same tensors and metadata: a whole
/// file image in memory. `what` names the call in errors.
Result<std::string> serialize(const std::vector<NamedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {},
                              const std::string& what = "serialize");

/// A file being written whose tensor bytes the caller fills in place
/// (a store's get_into straight into the file's pages): open() lays the
/// file out and maps it, data(name) gives each tensor's bytes, commit()
/// flushes and renames it into place. Dropped uncommitted, the temporary
/// file is removed.
class Writer {
 public:
  /// One tensor the file will hold.
  struct Spec {
    std::string name;            ///< The tensor's name.
    DType dtype = DType::uint8;  ///< Its element type.
    Shape shape;                 ///< Its shape.
  };

  /// Lays out a file of `tensors` and `metadata` (as plan_file), and creates
  /// and maps it under a temporary name next to `path`. Errc::invalid_argument
  /// for bad specs, Errc::io_error for the file system (a full disk included).
  static Result<Writer> open(const std::string& path, const std::vector<Spec>& tensors,
                             const std::map<std::string, std::string>& metadata = {});
  /// Moves the writer; the moved-from one is empty (only assign to it or destroy it).
  Writer(Writer&&) noexcept;
  /// Drops the file this one was writing (its temporary file removed when
  /// uncommitted), then takes over the other's.
  Writer& operator=(Writer&&) noexcept;
  ~Writer();
  /// Writable view of tensor `name`'s bytes (contiguous, in the mapping).
  Result<TensorView> tensor(const std::string& name);
  /// Flushes and renames the file into place. Once only.
  Status commit();

 private:
  Writer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A file's layout, planned before any byte is written: the bytes that
/// precede the data (the 8-byte length and the header, padded so the data
/// starts at a multiple of 8) and where each tensor lies. Tensors are laid
/// out by element size, largest first (each aligned to its element size),
/// otherwise in the given order: what Writer, write_file and serialize
/// write.
struct Layout {
  std::string prefix;                            ///< The length and the header.
  std::vector<TensorInfo> tensors;               ///< In file order; offsets relative to the data.
  std::map<std::string, std::uint64_t> offsets;  ///< Tensor name -> its first byte in the file.
  /// Where the data starts in the file.
  std::uint64_t data_start() const noexcept { return prefix.size(); }
  /// The file's size in bytes.
  std::uint64_t size() const noexcept {
    return prefix.size() + (tensors.empty() ? 0 : tensors.back().end);
  }
};

/// Plans the layout of a file of `specs` (names unique, non-empty, not
/// "__metadata__"; shapes not negative) and `metadata`. `what` names the
/// call in errors (Errc::invalid_argument).
Result<Layout> plan_file(const std::vector<Writer::Spec>& specs,
                         const std::map<std::string, std::string>& metadata,
                         const std::string& what);

// -- checkpoints: a file, or a directory of shards with an index ------------

/// Where each tensor of a checkpoint lives.
struct Checkpoint {
  std::string root;  ///< The file, or the directory, as opened.
  /// The files, opened and validated (mapped, nothing read yet); one for a
  /// single-file checkpoint.
  std::vector<File> files;
  /// Tensor name -> index into `files`, every tensor of every file.
  std::map<std::string, std::size_t> weight_map;
  /// Total bytes of tensor data.
  std::uint64_t total_bytes = 0;
};

/// The index file name of a sharded checkpoint.
inline constexpr char kIndexName[] = "model.safetensors.index.json";

/// Opens a checkpoint at `path`: a .safetensors file; a directory with
/// kIndexName (validated: well-formed, "weight_map" of names to files that
/// exist in the directory, each name found in its file, and no tensor of a
/// file missing from the map); or a directory holding exactly one
/// .safetensors file. Every file is opened and validated, and mapped as
/// `access` says.
Result<Checkpoint> open_checkpoint(const std::string& path,
                                   File::Access access = File::Access::read_only);

/// The name of shard `i` (0-based) of `n`: "model-00001-of-00003.safetensors".
std::string shard_file_name(std::size_t i, std::size_t n);

/// How a checkpoint is cut into files.
struct SaveOptions {
  /// Largest tensor bytes per file; 0 = one file. A tensor larger than
  /// this gets a file of its own.
  std::uint64_t max_shard_bytes = 0;
  std::map<std::string, std::string> metadata;  ///< Written into every file's `__metadata__`.
};

/// Plans which tensors go to which file (in order, greedy up to
/// max_shard_bytes): the index of each tensor's file, and the file count.
std::pair<std::vector<std::size_t>, std::size_t> plan_shards(
    const std::vector<std::uint64_t>& nbytes, std::uint64_t max_shard_bytes);

/// Writes the index JSON of a sharded checkpoint into `dir` (atomically,
/// like write_file): total_size and each tensor's file name.
Status write_index(const std::string& dir, std::uint64_t total_size,
                   const std::map<std::string, std::string>& weight_map);

/// Parses a size such as "5GB", "500MB", "1.5GiB", "1048576" (decimal
/// suffixes are powers of 1000, binary ones of 1024).
Result<std::uint64_t> parse_size(std::string_view text);

}  // namespace meshstore::safetensors
