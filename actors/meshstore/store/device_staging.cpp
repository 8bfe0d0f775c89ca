// GPU tensors staged through host memory for the Store facade (docs/gpu.md).

#include "meshstore/store/device_staging.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <vector>

#include "meshstore/internal/cuda_copy.hpp"

namespace meshstore::store {
namespace {

using internal::cuda::on_device;

bool has_device_tensors(const StateDict& sd) {
  return std::any_of(sd.entries().begin(), sd.entries().end(),
                     [](const StateDict::Entry& e) { return e.is_tensor() && on_device(e.view); });
}

// A put's contiguous device tensors that the store stages (packs, casts)
// are copied to the host together: one page-locked buffer, one
// copy_pieces (a kernel and one transfer per GPU, not a synchronous copy
// each). `*out` gets their host views by entry index; with fewer than
// two there is nothing to gain, and source() copies each.
Status gather_sources(const StateDict& sd, DeviceStaging& st,
                      const std::function<bool(const StateDict::Entry&)>& pass,
                      std::vector<std::optional<TensorView>>* out) {
  if (st.direct) return Status();  // contiguous device views go as they are
  std::vector<internal::cuda::DevicePiece> pieces;
  std::vector<std::size_t> which;  // entry indices
  std::size_t total = 0;
  const auto& entries = sd.entries();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    if (!e.is_tensor() || !on_device(e.view) || !e.view.is_contiguous() || (pass && pass(e))) {
      continue;
    }
    const std::size_t at = (total + 63) / 64 * 64;  // each piece 64-byte aligned
    pieces.push_back(
        internal::cuda::DevicePiece{e.view.data(), at, e.view.nbytes(), e.view.device().index});
    which.push_back(i);
    total = at + e.view.nbytes();
  }
  if (pieces.size() < 2) return Status();
  auto buf = internal::cuda::pinned(total);
  if (!buf) {
    return Status(Errc::out_of_capacity, st.what + ": no host memory for the " +
                                             std::to_string(total) + " bytes of " +
                                             std::to_string(pieces.size()) + " GPU tensors");
  }
  MESHSTORE_RETURN_IF_ERROR(
      internal::cuda::copy_pieces(buf.get(), pieces, true)
          .with_context(st.what + ": " + std::to_string(pieces.size()) + " tensors from the GPU"));
  st.buffers.push_back(buf);
  out->assign(entries.size(), std::nullopt);
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    const auto& v = entries[which[k]].view;
    (*out)[which[k]] = TensorView(buf.get() + pieces[k].offset, v.dtype(), v.shape());
  }
  return Status();
}

// When `sd` holds CUDA tensors: `st` gets a stand-in with host tensors in
// their place (copies for a put, empty buffers for a get: `for_get`), which
// the call uses instead of `sd`, except a get none of whose device views
// needs one (st.sd stays null); a put's entries for which `pass` says so
// stay the device views they are. Device views are checked first.
Status stage_state_dict(const StateDict& sd, DeviceStaging& st, bool for_get,
                        const std::function<bool(const StateDict::Entry&)>& pass = {}) {
  internal::cuda::KnownAllocations known;
  for (const auto& e : sd.entries()) {
    // A view within an allocation already checked costs neither a call
    // to the driver nor the naming of it.
    if (e.is_tensor() && on_device(e.view) && !known.holds(e.view)) {
      MESHSTORE_RETURN_IF_ERROR(
          internal::cuda::check_device_view(e.view, st.what + " '" + e.name + "'", &known));
    }
  }
  if (for_get && st.direct &&
      std::none_of(sd.entries().begin(), sd.entries().end(), [](const StateDict::Entry& e) {
        return e.is_tensor() && on_device(e.view) && !e.view.is_contiguous();
      })) {
    return Status();  // every device view is read into as it is: no stand-in
  }
  std::vector<std::optional<TensorView>> gathered;
  if (!for_get) MESHSTORE_RETURN_IF_ERROR(gather_sources(sd, st, pass, &gathered));
  auto host = std::make_unique<StateDict>();
  for (std::size_t i = 0; i < sd.entries().size(); ++i) {
    const auto& e = sd.entries()[i];
    if (!e.is_tensor()) {
      MESHSTORE_RETURN_IF_ERROR(host->insert(e.name, *e.value));
      continue;
    }
    if (i < gathered.size() && gathered[i]) {
      MESHSTORE_RETURN_IF_ERROR(host->insert(e.name, *gathered[i]));
      continue;
    }
    auto view = for_get ? st.target(e.view, e.name)
                        : st.source(e.view, e.name, on_device(e.view) && pass && pass(e));
    if (!view.ok()) return view.status();
    MESHSTORE_RETURN_IF_ERROR(host->insert(e.name, *view));
  }
  st.sd = std::move(host);
  return Status();
}

}  // namespace

Result<TensorView> DeviceStaging::source(const TensorView& v, const std::string& name, bool pass) {
  if (!on_device(v) || pass || (direct && v.is_contiguous())) return v;
  auto buf = internal::cuda::pinned(v.nbytes());
  if (!buf) return no_memory(v, name);
  if (auto s = internal::cuda::to_host(buf.get(), v); !s.ok()) {
    return s.with_context(what + " '" + name + "' from " + v.device().to_string());
  }
  buffers.push_back(buf);
  return TensorView(buf.get(), v.dtype(), v.shape());
}

Result<TensorView> DeviceStaging::target(const TensorView& v, const std::string& name) {
  if (!on_device(v) || (direct && v.is_contiguous())) return v;
  auto buf = internal::cuda::pinned(v.nbytes());
  if (!buf) return no_memory(v, name);
  buffers.push_back(buf);
  back.emplace_back(v, buf.get());
  return TensorView(buf.get(), v.dtype(), v.shape());
}

Status DeviceStaging::finish() const {
  for (const auto& [dst, src] : back) {
    if (auto s = internal::cuda::to_device(dst, src); !s.ok()) {
      return s.with_context(what + " to " + dst.device().to_string());
    }
  }
  if (sd && caller) {
    for (const auto& e : sd->entries()) {
      if (!e.is_tensor()) MESHSTORE_RETURN_IF_ERROR(caller->set_value(e.name, *e.value));
    }
  }
  return Status();
}

Status DeviceStaging::no_memory(const TensorView& v, const std::string& name) const {
  return Status(Errc::out_of_capacity, what + " '" + name + "': no host memory for the " +
                                           std::to_string(v.nbytes()) + " bytes of its " +
                                           v.device().to_string() + " tensor");
}

std::shared_ptr<DeviceStaging> staging(std::string what, bool direct) {
  auto st = std::make_shared<DeviceStaging>();
  st->what = std::move(what);
  st->direct = direct;
  return st;
}

Result<const StateDict*> put_source(const StateDict& sd, DeviceStaging& st,
                                    const StateDictPutOptions& options,
                                    const std::map<std::string, RankShard>* layout) {
  if (!has_device_tensors(sd)) return &sd;
  auto pass = [&](const StateDict::Entry& e) {
    if (!e.view.is_contiguous()) return false;
    if (options.transfer_dtype && e.view.dtype() == DType::float32) return false;  // cast
    if (layout) {
      auto it = layout->find(e.name);
      if (it != layout->end()) return it->second.replicas == 1;  // boxes are never packed
    }
    return e.view.nbytes() > options.pack_max_tensor_bytes;  // else packed
  };
  MESHSTORE_RETURN_IF_ERROR(stage_state_dict(sd, st, false, pass));
  return st.sd.get();
}

Result<StateDict*> get_target(StateDict& sd, DeviceStaging& st) {
  if (!has_device_tensors(sd)) return &sd;
  MESHSTORE_RETURN_IF_ERROR(stage_state_dict(sd, st, true));
  if (!st.sd) return &sd;
  st.caller = &sd;
  return st.sd.get();
}

}  // namespace meshstore::store
