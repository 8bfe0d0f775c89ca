// The helpers every file of the client uses: settling futures, naming calls.

#include "meshstore/client/client_state.hpp"

#include <algorithm>

namespace meshstore::client {

Future<void> settle_all(std::vector<Future<void>> futures) {
  return when_all(std::move(futures)).then([](const std::vector<Result<void>>& results) -> Status {
    for (const auto& r : results) {
      if (!r.ok()) return r.status();
    }
    return Status();
  });
}

std::string describe(const std::string& op, const std::vector<std::string>& keys) {
  if (keys.size() == 1) return op + " '" + keys.front() + "'";
  return op + " of " + std::to_string(keys.size()) + " keys" +
         (keys.empty() ? std::string() : " (first '" + keys.front() + "')");
}

}  // namespace meshstore::client
