#pragma once

// GPU tensors the Store facade stages through host memory: page-locked
// copies a put sends, host stand-ins a get fills (docs/gpu.md).

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/state_dict.hpp"
#include "meshstore/status.hpp"
#include "meshstore/store.hpp"
#include "meshstore/tensor.hpp"

namespace meshstore::store {

// Contiguous CUDA tensors go to the client as they are: per volume, it
// copies them in one CUDA copy where the transport can (shm, cuda-ipc),
// else through page-locked host memory in pipelined pieces. What the store
// itself must touch on the host (strided views, state dict entries it
// packs or casts, replicated boxes it checksums, boxes it cuts) is staged
// here instead: a put copies it to the host before the call goes out; a get
// reads into host memory, then copies to the devices once the read has
// completed. CPU tensors pass untouched, at no cost.

/// The host memory one call stages its GPU tensors through. Not
/// thread-safe: one call builds it, then its completion finishes it.
struct DeviceStaging {
  std::vector<std::shared_ptr<std::byte>> buffers;      // host copies
  std::vector<std::pair<TensorView, std::byte*>> back;  // a get's device targets and their bytes
  std::unique_ptr<StateDict> sd;                        // a state dict's host stand-in
  StateDict* caller = nullptr;                          // whose values a get fills
  std::string what;
  // Contiguous device views go to the client as they are.
  bool direct = false;

  /// The host view a put sends for `v` (`v` itself when `pass`).
  Result<TensorView> source(const TensorView& v, const std::string& name, bool pass = false);
  /// The host view a get fills for `v`.
  Result<TensorView> target(const TensorView& v, const std::string& name);
  /// After a get: the bytes to their devices, the values to the caller's
  /// state dict.
  Status finish() const;
  Status no_memory(const TensorView& v, const std::string& name) const;
};

/// A call's staging; `what` names the call in errors. With `direct`,
/// contiguous device views go to the client as they are.
std::shared_ptr<DeviceStaging> staging(std::string what, bool direct = true);

/// The state dict a put sends: `sd`, or its stand-in. Device entries the
/// client moves as they are (contiguous, stored whole or as a box with one
/// replica, neither packed nor cast) stay device views; the store packs,
/// casts or checksums the rest on the host.
Result<const StateDict*> put_source(const StateDict& sd, DeviceStaging& st,
                                    const StateDictPutOptions& options,
                                    const std::map<std::string, RankShard>* layout = nullptr);

/// The state dict a get fills: `sd`, or its host stand-in (st.finish() then
/// fills `sd`).
Result<StateDict*> get_target(StateDict& sd, DeviceStaging& st);

}  // namespace meshstore::store
