#pragma once

// The argument checks every Store call makes before anything is sent: keys
// (length, NUL bytes, duplicates) and tensor views (layout, device).

#include <cstddef>
#include <string>
#include <vector>

#include "meshstore/status.hpp"
#include "meshstore/tensor.hpp"

namespace meshstore::protocol {

/// The longest key a store accepts, in bytes.
constexpr std::size_t kMaxKeyBytes = 4096;

/// Fails with Errc::invalid_argument when `key` is empty, too long or holds
/// a NUL byte; `op` names the call in the message.
Status check_key(const std::string& op, const std::string& key);

/// check_key() for each of `keys`; with `unique`, a key given twice fails too.
Status check_keys(const std::string& op, const std::vector<std::string>& keys, bool unique);

/// Checks `view` (a source or destination of `key`): its layout, and for a
/// GPU tensor, its device.
Status check_view(const std::string& op, const std::string& key, const TensorView& view);

}  // namespace meshstore::protocol
