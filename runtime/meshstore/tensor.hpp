#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "meshstore/status.hpp"

namespace meshstore {

// -- element types, and the formats of byte objects ---------------------------

/// Element types. Values are stable (they travel in the wire schema).
/// float8_e4m3fn and float8_e5m2 are opaque 1-byte types: stored and moved,
/// never interpreted.
enum class DType : std::uint8_t {
  boolean = 0,
  uint8 = 1,
  int8 = 2,
  int16 = 3,
  int32 = 4,
  int64 = 5,
  uint16 = 6,
  uint32 = 7,
  uint64 = 8,
  float16 = 9,
  bfloat16 = 10,
  float32 = 11,
  float64 = 12,
  float8_e4m3fn = 13,
  float8_e5m2 = 14,
};

/// Every dtype, in enum order.
const std::vector<DType>& all_dtypes();

/// Bytes per element.
std::size_t dtype_size(DType d) noexcept;

/// The meshstore (and PyTorch) name, for example "bfloat16".
std::string_view dtype_name(DType d) noexcept;

/// The safetensors name, for example "BF16", "F8_E4M3".
std::string_view dtype_safetensors_name(DType d) noexcept;

/// Parses a meshstore name ("bfloat16") or a safetensors name ("BF16").
/// Fails with Errc::invalid_argument naming the text.
Result<DType> parse_dtype(std::string_view text);

/// True when `value` is a defined DType enumerator (for values read off a wire).
bool is_valid_dtype(std::uint32_t value) noexcept;

/// What a byte object's bytes are, stored with it so that a reader in
/// another language gives back what was put (Python: bytes, str, or the
/// unpickled object). C++ readers see the same bytes whatever the format.
/// The values are stable: they travel in the wire schema.
enum class ObjectFormat : std::uint8_t {
  bytes = 0,   ///< opaque bytes
  utf8 = 1,    ///< text, UTF-8 encoded
  pickle = 2,  ///< a Python pickle (meshstore's Python package writes these)
};

/// "bytes", "utf8" or "pickle".
constexpr std::string_view object_format_name(ObjectFormat f) noexcept {
  switch (f) {
    case ObjectFormat::bytes:
      return "bytes";
    case ObjectFormat::utf8:
      return "utf8";
    case ObjectFormat::pickle:
      return "pickle";
  }
  return "unknown";
}

// -- tensors ------------------------------------------------------------------

/// Sizes of each dimension. An empty Shape is a 0-dim scalar (one element).
using Shape = std::vector<std::int64_t>;
/// Steps between neighbouring elements of each dimension, in elements.
using Strides = std::vector<std::int64_t>;

/// Where a tensor's memory lives.
enum class DeviceType : std::uint8_t { cpu = 0, cuda = 1 };

/// A device: the CPU, or a CUDA device by index.
struct Device {
  DeviceType type = DeviceType::cpu;  ///< The CPU or a CUDA device.
  int index = 0;                      ///< A CUDA device's index; ignored for the CPU.

  /// The CPU.
  static Device cpu() { return {}; }
  /// CUDA device `index`.
  static Device cuda(int index) { return {DeviceType::cuda, index}; }
  /// "cpu" or "cuda:N".
  std::string to_string() const;
  friend bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && (a.type == DeviceType::cpu || a.index == b.index);
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

/// Number of elements of `shape` (1 for a 0-dim shape, 0 if any dim is 0;
/// saturates at INT64_MAX instead of overflowing).
std::int64_t shape_numel(const Shape& shape) noexcept;
/// Row-major (C order) strides of `shape`, in elements.
Strides contiguous_strides(const Shape& shape);
/// "[2, 3]"; "[]" for a scalar.
std::string shape_to_string(const Shape& shape);

/// The DType of a C++ element type (float -> float32, ...).
template <class T>
constexpr DType dtype_of();
// clang-format off
template <> constexpr DType dtype_of<bool>() { return DType::boolean; }
template <> constexpr DType dtype_of<std::uint8_t>() { return DType::uint8; }
template <> constexpr DType dtype_of<std::int8_t>() { return DType::int8; }
template <> constexpr DType dtype_of<std::int16_t>() { return DType::int16; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::int32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::int64; }
template <> constexpr DType dtype_of<std::uint16_t>() { return DType::uint16; }
template <> constexpr DType dtype_of<std::uint32_t>() { return DType::uint32; }
template <> constexpr DType dtype_of<std::uint64_t>() { return DType::uint64; }
template <> constexpr DType dtype_of<float>() { return DType::float32; }
template <> constexpr DType dtype_of<double>() { return DType::float64; }
// clang-format on

/// A non-owning view of tensor memory: data pointer, dtype, shape, strides
/// (in elements; may be non-contiguous) and device. The caller keeps the
/// memory alive while any operation using the view runs.
/// A value type; thread-compatible.
class TensorView {
 public:
  /// A view of nothing: null data, 0-dim float32 (validate() rejects it).
  TensorView() = default;
  /// A view of `data`. Empty `strides` means contiguous row-major.
  TensorView(void* data, DType dtype, Shape shape, Strides strides = {}, Device device = {});

  /// A contiguous view of `data` typed by T.
  template <class T>
  static TensorView of(T* data, Shape shape) {
    return TensorView(static_cast<void*>(data), dtype_of<T>(), std::move(shape));
  }

  /// The address of the first element (element 0 of every dim).
  void* data() const noexcept { return data_; }
  /// The element type.
  DType dtype() const noexcept { return dtype_; }
  /// The size of each dim.
  const Shape& shape() const noexcept { return shape_; }
  /// The step of each dim, in elements (row-major when built without strides).
  const Strides& strides() const noexcept { return strides_; }
  /// Where the memory lives.
  Device device() const noexcept { return device_; }
  /// Number of dims (0 for a scalar).
  std::int64_t ndim() const noexcept { return static_cast<std::int64_t>(shape_.size()); }
  /// Number of elements (as shape_numel).
  std::int64_t numel() const noexcept { return shape_numel(shape_); }
  /// Bytes the elements occupy when packed: numel() * dtype_size().
  std::size_t nbytes() const noexcept;
  /// True when the elements are laid out row-major with no gaps.
  bool is_contiguous() const noexcept;

  /// Checks the view is usable: non-negative dims, one stride per dim,
  /// non-negative strides, data present when numel() > 0, no size overflow.
  /// `what` names the view in the message ("put 'w'").
  Status validate(std::string_view what) const;

  /// The sub-view [start, start + length) along `dim` (like torch.narrow).
  Result<TensorView> narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const;
  /// The view with dims `a` and `b` swapped (non-contiguous in general).
  Result<TensorView> transpose(std::int64_t a, std::int64_t b) const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::float32;
  Shape shape_;
  Strides strides_;
  Device device_;
};

/// An owning, contiguous, CPU tensor. Copies share the same bytes (like a
/// torch.Tensor); clone() makes an independent copy. Memory is 64-byte
/// aligned, and large tensors ask the kernel for huge pages.
/// Thread-compatible: concurrent reads are fine, writes need coordination.
class Tensor {
 public:
  /// An undefined tensor (no storage); defined() is false.
  Tensor() = default;

  /// Allocates an uninitialised tensor. Fails with Errc::invalid_argument on
  /// a negative dim, Errc::out_of_capacity when memory cannot be had.
  static Result<Tensor> empty(DType dtype, Shape shape);
  /// Allocates a zero-filled tensor.
  static Result<Tensor> zeros(DType dtype, Shape shape);
  /// A tensor over memory someone else owns: `storage`'s deleter runs when
  /// the last copy of the tensor goes. `read_only` marks memory that must not
  /// be written (a store's zero-copy view: writing it faults).
  static Tensor wrap(std::shared_ptr<std::byte> storage, DType dtype, Shape shape, bool read_only);

  /// False for a default-constructed tensor; true for one from empty(), zeros() or wrap().
  bool defined() const noexcept { return defined_; }
  /// The first element's memory; null for an undefined tensor.
  void* data() const noexcept { return storage_.get(); }
  /// data() cast to T*; T is not checked against dtype().
  template <class T>
  T* data_as() const noexcept {
    return static_cast<T*>(data());
  }
  /// The element type.
  DType dtype() const noexcept { return dtype_; }
  /// The size of each dim (row-major, contiguous).
  const Shape& shape() const noexcept { return shape_; }
  /// Number of dims (0 for a scalar).
  std::int64_t ndim() const noexcept { return static_cast<std::int64_t>(shape_.size()); }
  /// Number of elements (as shape_numel).
  std::int64_t numel() const noexcept { return shape_numel(shape_); }
  /// Bytes of the elements: numel() * dtype_size(dtype()).
  std::size_t nbytes() const noexcept {
    return static_cast<std::size_t>(numel()) * dtype_size(dtype_);
  }
  /// True for memory that must not be written (a view of shared memory:
  /// Store::get with ReadOptions::view).
  bool read_only() const noexcept { return read_only_; }
  /// A contiguous view of this tensor's memory.
  TensorView view() const { return TensorView(data(), dtype_, shape_); }
  /// An independent deep copy.
  Tensor clone() const;

 private:
  std::shared_ptr<std::byte> storage_;
  DType dtype_ = DType::float32;
  Shape shape_;
  bool defined_ = false;
  bool read_only_ = false;
};

/// Copies the elements of `src` into `dst`, honouring both views' strides.
/// Fails with Errc::dtype_mismatch or Errc::shape_mismatch (naming both
/// sides) before touching `dst`. Overlapping views are not supported.
Status copy_into(const TensorView& src, const TensorView& dst);

/// Packs `src` into `nbytes` of contiguous memory at `dst` (no checks beyond
/// the size; the caller validated `src`).
void pack_to(const TensorView& src, void* dst) noexcept;
/// Scatters contiguous bytes at `src` into the (maybe strided) `dst`.
void unpack_from(const void* src, const TensorView& dst) noexcept;

/// A 64-bit checksum of the bytes of `view`'s elements in row-major order
/// (strides do not matter: a strided view and its contiguous copy agree).
/// Not cryptographic: it tells replicas whose bytes differ apart. Never 0,
/// so 0 can mean "not computed".
std::uint64_t content_checksum(const TensorView& view);

// -- casts between floating dtypes -------------------------------------------
//
// For moving tensors in a narrower dtype than they are held in (fp32 master
// weights published as bf16). Rounding is round-to-nearest-even, bit-exact
// with PyTorch's and numpy's conversions; NaN stays NaN (quiet), overflow
// becomes infinity.

/// float32 -> bfloat16 bits, round to nearest even.
std::uint16_t float_to_bfloat16(float x) noexcept;
/// float32 -> IEEE float16 bits, round to nearest even (subnormals kept).
std::uint16_t float_to_float16(float x) noexcept;
/// bfloat16 bits -> float32 (exact).
float bfloat16_to_float(std::uint16_t h) noexcept;
/// IEEE float16 bits -> float32 (exact).
float float16_to_float(std::uint16_t h) noexcept;

/// Whether cast_to() converts `from` into `to`: the same dtype, or float32
/// to and from bfloat16 and float16.
bool can_cast(DType from, DType to) noexcept;

/// Writes the elements of `src` (any strides) converted to `to` into the
/// contiguous memory at `dst` (numel x dtype_size(to) bytes).
/// Errc::unsupported for a pair can_cast() refuses, naming both.
Status cast_to(const TensorView& src, DType to, void* dst);

}  // namespace meshstore

// -- CUDA: whether device memory can be used here -----------------------------
// Whether this process can use CUDA device memory, and why not. The store
// takes and fills tensors whose TensorView names a CUDA device (cuda:N)
// directly; these calls say whether that can work here.

namespace meshstore::cuda {

/// True when this build has CUDA support (MESHSTORE_WITH_CUDA found a toolkit).
bool built() noexcept;

/// OK when CUDA devices can be used in this process; otherwise
/// Errc::unavailable saying why: a build without CUDA, or the runtime's own
/// answer (no driver: "cudaGetDeviceCount: CUDA driver version is
/// insufficient for CUDA runtime version"; no device: "no CUDA-capable
/// device is detected"). Asked once per process.
Status status();

/// CUDA devices this process sees (0 when status() is not OK).
int device_count();

}  // namespace meshstore::cuda
