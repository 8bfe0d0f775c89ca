#include "meshstore/future.hpp"

#include "meshstore/logging.hpp"

namespace meshstore::internal {

void report_callback_exception(const char* what) noexcept {
  try {
    log::get("future")->error("exception escaped a future callback and was ignored: {}", what);
  } catch (...) {
  }
}

}  // namespace meshstore::internal
