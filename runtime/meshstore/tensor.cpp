#include "meshstore/tensor.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "meshstore/internal/memory.hpp"

namespace meshstore {

namespace internal {

std::shared_ptr<std::byte> allocate_aligned(std::size_t bytes) noexcept {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const std::size_t alignment = bytes >= 2 * kHuge ? kHuge : 64;
  const std::size_t rounded = ((bytes == 0 ? 1 : bytes) + alignment - 1) / alignment * alignment;
  void* p = nullptr;
  if (posix_memalign(&p, alignment, rounded) != 0) return nullptr;
  if (alignment == kHuge) madvise(p, rounded, MADV_HUGEPAGE);
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); });
}

}  // namespace internal

std::string Device::to_string() const {
  return type == DeviceType::cpu ? "cpu" : "cuda:" + std::to_string(index);
}

std::int64_t shape_numel(const Shape& shape) noexcept {
  std::int64_t n = 1;
  for (auto d : shape) {
    // Saturate: a hostile shape must not overflow before validate() sees it.
    if (__builtin_mul_overflow(n, d, &n)) return std::numeric_limits<std::int64_t>::max();
  }
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides s(shape.size());
  std::int64_t step = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    s[i] = step;
    step *= shape[i] > 0 ? shape[i] : 1;
  }
  return s;
}

std::string shape_to_string(const Shape& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

TensorView::TensorView(void* data, DType dtype, Shape shape, Strides strides, Device device)
    : data_(data),
      dtype_(dtype),
      shape_(std::move(shape)),
      strides_(strides.empty() ? contiguous_strides(shape_) : std::move(strides)),
      device_(device) {}

std::size_t TensorView::nbytes() const noexcept {
  return static_cast<std::size_t>(numel()) * dtype_size(dtype_);
}

bool TensorView::is_contiguous() const noexcept {
  if (numel() == 0) return true;
  std::int64_t step = 1;
  for (std::size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != step) return false;
    step *= shape_[i];
  }
  return true;
}

Status TensorView::validate(std::string_view what) const {
  auto fail = [&](const std::string& why) {
    return Status(Errc::invalid_argument, std::string(what) + ": " + why);
  };
  if (!is_valid_dtype(static_cast<std::uint32_t>(dtype_))) return fail("invalid dtype");
  if (strides_.size() != shape_.size()) {
    return fail("shape " + shape_to_string(shape_) + " has " + std::to_string(shape_.size()) +
                " dims but strides " + shape_to_string(strides_) + " have " +
                std::to_string(strides_.size()));
  }
  // Guard every multiplication so a hostile shape cannot overflow.
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t n = 1;
  for (std::size_t i = 0; i < shape_.size(); ++i) {
    if (shape_[i] < 0) return fail("negative dimension in shape " + shape_to_string(shape_));
    if (strides_[i] < 0) return fail("negative stride in strides " + shape_to_string(strides_));
    if (shape_[i] != 0 && n > kMax / shape_[i])
      return fail("shape " + shape_to_string(shape_) + " overflows");
    n *= shape_[i];
  }
  if (n > kMax / static_cast<std::int64_t>(dtype_size(dtype_))) {
    return fail("shape " + shape_to_string(shape_) + " overflows in bytes");
  }
  if (n > 0 && data_ == nullptr)
    return fail("null data pointer for " + std::to_string(n) + " elements");
  return Status();
}

Result<TensorView> TensorView::narrow(std::int64_t dim, std::int64_t start,
                                      std::int64_t length) const {
  if (dim < 0 || dim >= ndim()) {
    return Status(Errc::out_of_range, "narrow: dim " + std::to_string(dim) + " outside a " +
                                          std::to_string(ndim()) + "-dim view");
  }
  if (start < 0 || length < 0 || start + length > shape_[dim]) {
    return Status(Errc::out_of_range, "narrow: [" + std::to_string(start) + ", " +
                                          std::to_string(start + length) + ") outside dim " +
                                          std::to_string(dim) + " of size " +
                                          std::to_string(shape_[dim]));
  }
  Shape shape = shape_;
  shape[dim] = length;
  auto* base = static_cast<std::byte*>(data_) +
               start * strides_[dim] * static_cast<std::int64_t>(dtype_size(dtype_));
  return TensorView(base, dtype_, std::move(shape), strides_, device_);
}

Result<TensorView> TensorView::transpose(std::int64_t a, std::int64_t b) const {
  if (a < 0 || b < 0 || a >= ndim() || b >= ndim()) {
    return Status(Errc::out_of_range, "transpose: dims " + std::to_string(a) + ", " +
                                          std::to_string(b) + " outside a " +
                                          std::to_string(ndim()) + "-dim view");
  }
  Shape shape = shape_;
  Strides strides = strides_;
  std::swap(shape[a], shape[b]);
  std::swap(strides[a], strides[b]);
  return TensorView(data_, dtype_, std::move(shape), std::move(strides), device_);
}

Result<Tensor> Tensor::empty(DType dtype, Shape shape) {
  TensorView probe(reinterpret_cast<void*>(std::uintptr_t{64}), dtype, shape);
  if (auto s = probe.validate("Tensor::empty"); !s.ok()) return s;
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.storage_ = internal::allocate_aligned(t.nbytes());
  if (!t.storage_) {
    return Status(Errc::out_of_capacity,
                  "Tensor::empty: cannot allocate " + std::to_string(t.nbytes()) + " bytes");
  }
  t.defined_ = true;
  return t;
}

Tensor Tensor::wrap(std::shared_ptr<std::byte> storage, DType dtype, Shape shape, bool read_only) {
  Tensor t;
  t.storage_ = std::move(storage);
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.defined_ = true;
  t.read_only_ = read_only;
  return t;
}

Result<Tensor> Tensor::zeros(DType dtype, Shape shape) {
  auto t = empty(dtype, std::move(shape));
  if (t.ok()) std::memset(t->data(), 0, t->nbytes());
  return t;
}

Tensor Tensor::clone() const {
  if (!defined_) return Tensor();
  Tensor t = empty(dtype_, shape_).value();
  std::memcpy(t.data(), data(), nbytes());
  return t;
}

namespace {

// Copies between two strided layouts of the same shape: the trailing dims
// that are contiguous in both are merged into one memcpy block, and an
// odometer walks the leading dims.
void strided_copy(const std::byte* src, const Strides& ss, std::byte* dst, const Strides& ds,
                  const Shape& shape, std::size_t elsize) noexcept {
  const std::size_t n = shape.size();
  if (shape_numel(shape) == 0) return;
  std::size_t k = n;  // dims [k, n) form one contiguous block on both sides
  std::int64_t block = 1;
  while (k > 0) {
    const std::size_t d = k - 1;
    if (shape[d] != 1 && (ss[d] != block || ds[d] != block)) break;
    block *= shape[d];
    --k;
  }
  const std::size_t block_bytes = static_cast<std::size_t>(block) * elsize;
  if (k == 0) {
    std::memcpy(dst, src, block_bytes);
    return;
  }
  std::vector<std::int64_t> idx(k, 0);
  const auto es = static_cast<std::int64_t>(elsize);
  for (;;) {
    std::int64_t so = 0, doff = 0;
    for (std::size_t d = 0; d < k; ++d) {
      so += idx[d] * ss[d];
      doff += idx[d] * ds[d];
    }
    std::memcpy(dst + doff * es, src + so * es, block_bytes);
    std::size_t d = k;
    while (d > 0) {
      --d;
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
  }
}

}  // namespace

Status copy_into(const TensorView& src, const TensorView& dst) {
  if (src.dtype() != dst.dtype()) {
    return Status(Errc::dtype_mismatch,
                  "copy_into: source is " + std::string(dtype_name(src.dtype())) +
                      ", destination " + std::string(dtype_name(dst.dtype())));
  }
  if (src.shape() != dst.shape()) {
    return Status(Errc::shape_mismatch, "copy_into: source shape " + shape_to_string(src.shape()) +
                                            ", destination " + shape_to_string(dst.shape()));
  }
  MESHSTORE_RETURN_IF_ERROR(src.validate("copy_into source"));
  MESHSTORE_RETURN_IF_ERROR(dst.validate("copy_into destination"));
  strided_copy(static_cast<const std::byte*>(src.data()), src.strides(),
               static_cast<std::byte*>(dst.data()), dst.strides(), src.shape(),
               dtype_size(src.dtype()));
  return Status();
}

void pack_to(const TensorView& src, void* dst) noexcept {
  strided_copy(static_cast<const std::byte*>(src.data()), src.strides(),
               static_cast<std::byte*>(dst), contiguous_strides(src.shape()), src.shape(),
               dtype_size(src.dtype()));
}

void unpack_from(const void* src, const TensorView& dst) noexcept {
  strided_copy(static_cast<const std::byte*>(src), contiguous_strides(dst.shape()),
               static_cast<std::byte*>(dst.data()), dst.strides(), dst.shape(),
               dtype_size(dst.dtype()));
}

namespace {

// Four independent lanes of a multiply-rotate round over 8-byte words, so
// the multiplies overlap; the lanes, the tail and the length are folded and
// avalanched at the end.
constexpr std::uint64_t kMix1 = 0x9E3779B185EBCA87ULL;
constexpr std::uint64_t kMix2 = 0xC2B2AE3D27D4EB4FULL;

std::uint64_t rotl(std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
std::uint64_t round_of(std::uint64_t acc, std::uint64_t word) {
  return rotl(acc + word * kMix2, 31) * kMix1;
}
std::uint64_t load64(const std::byte* p) {
  std::uint64_t w;
  std::memcpy(&w, p, sizeof(w));
  return w;
}

struct Checksum {
  std::uint64_t lane[4] = {kMix1 + kMix2, kMix2, 0, 0 - kMix1};
  std::uint64_t total = 0;
  std::byte tail[32];
  std::size_t tail_len = 0;

  void add(const std::byte* p, std::size_t n) {
    total += n;
    if (tail_len > 0) {
      const std::size_t take = std::min(n, sizeof(tail) - tail_len);
      std::memcpy(tail + tail_len, p, take);
      tail_len += take;
      p += take;
      n -= take;
      if (tail_len < sizeof(tail)) return;
      block(tail);
      tail_len = 0;
    }
    for (; n >= 32; p += 32, n -= 32) block(p);
    std::memcpy(tail, p, n);
    tail_len = n;
  }
  void block(const std::byte* p) {
    for (int i = 0; i < 4; ++i) lane[i] = round_of(lane[i], load64(p + 8 * i));
  }
  std::uint64_t finish() const {
    std::uint64_t h = rotl(lane[0], 1) + rotl(lane[1], 7) + rotl(lane[2], 12) + rotl(lane[3], 18);
    h ^= total * kMix1;
    for (std::size_t i = 0; i < tail_len; ++i) {
      h = rotl(h ^ (static_cast<std::uint64_t>(tail[i]) * kMix2), 11) * kMix1;
    }
    h ^= h >> 33;
    h *= kMix2;
    h ^= h >> 29;
    h *= kMix1;
    h ^= h >> 32;
    return h == 0 ? 1 : h;
  }
};

}  // namespace

std::uint64_t content_checksum(const TensorView& view) {
  Checksum c;
  const std::size_t elsize = dtype_size(view.dtype());
  if (view.numel() == 0) return c.finish();
  if (view.is_contiguous()) {
    c.add(static_cast<const std::byte*>(view.data()), view.nbytes());
    return c.finish();
  }
  // Strided: the rows of the innermost dimension, in row-major order.
  const auto& shape = view.shape();
  const auto& strides = view.strides();
  const std::size_t nd = shape.size();
  const std::int64_t inner = shape[nd - 1];
  const bool inner_dense = strides[nd - 1] == 1;
  std::vector<std::int64_t> idx(nd, 0);
  const auto* base = static_cast<const std::byte*>(view.data());
  const std::int64_t rows = view.numel() / inner;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t off = 0;
    for (std::size_t d = 0; d + 1 < nd; ++d) off += idx[d] * strides[d];
    if (inner_dense) {
      c.add(base + off * static_cast<std::int64_t>(elsize),
            static_cast<std::size_t>(inner) * elsize);
    } else {
      for (std::int64_t i = 0; i < inner; ++i) {
        c.add(base + (off + i * strides[nd - 1]) * static_cast<std::int64_t>(elsize), elsize);
      }
    }
    for (std::size_t d = nd - 1; d-- > 0;) {  // next row
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return c.finish();
}

}  // namespace meshstore
