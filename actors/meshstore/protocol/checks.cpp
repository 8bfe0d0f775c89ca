// The argument checks every Store call makes before anything is sent.

#include "meshstore/protocol/checks.hpp"

#include <set>

#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/status.hpp"

namespace meshstore::protocol {

Status check_key(const std::string& op, const std::string& key) {
  if (key.empty()) return Status(Errc::invalid_argument, op + ": key is empty");
  if (key.size() > kMaxKeyBytes) {
    return Status(Errc::invalid_argument, op + ": key of " + std::to_string(key.size()) +
                                              " bytes is longer than the limit of " +
                                              std::to_string(kMaxKeyBytes) + " (starts '" +
                                              key.substr(0, 32) + "')");
  }
  if (key.find('\0') != std::string::npos) {
    return Status(Errc::invalid_argument,
                  op + ": key '" + key.substr(0, key.find('\0')) + "...' contains a NUL byte");
  }
  return Status();
}

Status check_keys(const std::string& op, const std::vector<std::string>& keys, bool unique) {
  std::set<std::string> seen;
  for (const auto& k : keys) {
    MESHSTORE_RETURN_IF_ERROR(check_key(op, k));
    if (unique && !seen.insert(k).second) {
      return Status(Errc::invalid_argument, op + ": key '" + k + "' appears twice");
    }
  }
  return Status();
}

Status check_view(const std::string& op, const std::string& key, const TensorView& view) {
  const std::string what = op + " '" + key + "'";
  MESHSTORE_RETURN_IF_ERROR(view.validate(what));
  if (internal::cuda::on_device(view)) {
    return internal::cuda::check_device_view(view, what);
  }
  return Status();
}

}  // namespace meshstore::protocol
