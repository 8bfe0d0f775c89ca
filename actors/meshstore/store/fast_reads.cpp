// The Store facade's reads on the caller's thread (fast_reads.hpp).
#include "meshstore/store/fast_reads.hpp"

#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/transports/copy_engine.hpp"

namespace meshstore::store {

namespace {

// A direct read's copy into host memory, on the caller's thread: split over
// the copy engine's threads when large, this thread taking a share.
void copy_here(void* dst, const std::byte* src, std::size_t n) {
  if (n > 0) transports::CopyEngine::instance().copy_here(static_cast<std::byte*>(dst), src, n);
}

}  // namespace

// Into a new tensor (Store::get).
FastOutcome fast_get_tensor(client::FastPath& fast, const std::string& key,
                            std::chrono::milliseconds timeout, Tensor* out) {
  return fast.read(
      key, [](const client::FastPath::Entry& e) { return e.kind == wire::ObjectKind::tensor; },
      [out](const client::FastPath::Entry& e, const std::byte* data, std::size_t n) {
        if (out->defined() && data == out->data()) return true;  // placed there (below)
        auto t = Tensor::empty(e.dtype, e.shape);
        if (!t.ok()) return false;  // the actor path reports it
        copy_here(t->data(), data, n);
        *out = std::move(t).value();
        return true;
      },
      timeout, false,
      [out](const client::FastPath::Entry& e) -> std::byte* {
        auto t = Tensor::empty(e.dtype, e.shape);
        if (!t.ok()) return nullptr;
        *out = std::move(t).value();
        return static_cast<std::byte*>(out->data());
      });
}

// Whether `dst` can take the key `e` describes: contiguous memory of its
// dtype and shape, on the host or a GPU (check_view checked the device).
bool fits_into(const client::FastPath::Entry& e, const TensorView& dst) {
  return dst.is_contiguous() && e.kind == wire::ObjectKind::tensor && e.dtype == dst.dtype() &&
         e.shape == dst.shape();
}

// Into the caller's contiguous view of the key's dtype and shape
// (Store::get_into): a memcpy into host memory, one CUDA copy into GPU
// memory (host to device, straight from the volume's mapping on a direct
// read).
FastOutcome fast_get_into(client::FastPath& fast, const std::string& key,
                          std::chrono::milliseconds timeout, const TensorView& dst) {
  const bool to_device = internal::cuda::on_device(dst);
  return fast.read(
      key, [&dst](const client::FastPath::Entry& e) { return fits_into(e, dst); },
      [&dst, to_device](const client::FastPath::Entry&, const std::byte* data, std::size_t n) {
        if (n == 0 || data == dst.data()) return true;  // empty, or placed there (below)
        if (!to_device) {
          copy_here(dst.data(), data, n);
          return true;
        }
        return internal::cuda::copy_bytes(dst.data(), data, n).ok();
      },
      timeout, to_device,
      [&dst, to_device](const client::FastPath::Entry&) {
        return to_device ? nullptr : static_cast<std::byte*>(dst.data());
      });
}

// A byte object (Store::get_object, get_stored_object).
FastOutcome fast_get_object(client::FastPath& fast, const std::string& key,
                            std::chrono::milliseconds timeout, StoredObject* out) {
  return fast.read(
      key, [](const client::FastPath::Entry& e) { return e.kind == wire::ObjectKind::object; },
      [out](const client::FastPath::Entry& e, const std::byte* data, std::size_t n) {
        out->bytes.assign(reinterpret_cast<const char*>(data), n);
        out->format = e.format;
        return true;
      },
      timeout);
}

}  // namespace meshstore::store
