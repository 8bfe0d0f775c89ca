#pragma once
// The Store facade's reads of whole keys on the caller's thread, through
// the client's FastPath (client/fast_path.hpp): each helper says which
// cached entries its call can be served from (kind, dtype, shape) and
// where the bytes go. On miss or stale the caller takes the actor path
// (stale: locating afresh). Internal to the store module.

#include <chrono>
#include <cstddef>
#include <string>

#include "meshstore/client/fast_path.hpp"
#include "meshstore/store_types.hpp"
#include "meshstore/tensor.hpp"

namespace meshstore::store {

using FastOutcome = client::FastPath::Outcome;

/// Into a new tensor (Store::get).
FastOutcome fast_get_tensor(client::FastPath& fast, const std::string& key,
                            std::chrono::milliseconds timeout, Tensor* out);
/// Whether `dst` can take the key `e` describes: contiguous memory of its
/// dtype and shape, on the host or a GPU.
bool fits_into(const client::FastPath::Entry& e, const TensorView& dst);
/// Into the caller's contiguous view of the key's dtype and shape
/// (Store::get_into).
FastOutcome fast_get_into(client::FastPath& fast, const std::string& key,
                          std::chrono::milliseconds timeout, const TensorView& dst);
/// A byte object (Store::get_object, get_stored_object).
FastOutcome fast_get_object(client::FastPath& fast, const std::string& key,
                            std::chrono::milliseconds timeout, StoredObject* out);

// Keys 0..n-1 read on the fast path in turn (`read(i)`), up to the first
// one not served: true when every one was; else `*fresh` says whether that
// one found its location stale (the actors then locate afresh).
template <class Read>
bool fast_every_key(std::size_t n, bool* fresh, const Read& read) {
  for (std::size_t i = 0; i < n; ++i) {
    const auto outcome = read(i);
    if (outcome != FastOutcome::hit) {
      *fresh = outcome == FastOutcome::stale;
      return false;
    }
  }
  return true;
}

}  // namespace meshstore::store
