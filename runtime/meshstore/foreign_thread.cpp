// ForeignThreadGuard (meshstore/foreign_thread.hpp): restores the calling
// thread's CAF logger reference when the guard goes out of scope.
#include "meshstore/foreign_thread.hpp"

#include <caf/logger.hpp>

#include "meshstore/internal/foreign_thread.hpp"

namespace meshstore {

ForeignThreadGuard::ForeignThreadGuard() noexcept : before_(caf::logger::current_logger()) {}

ForeignThreadGuard::~ForeignThreadGuard() {
  if (caf::logger::current_logger() == before_) return;
  if (before_ == nullptr) {
    caf::logger::set_current_actor_system(nullptr);
  } else if (auto* sys = internal::system_of(before_)) {
    caf::logger::set_current_actor_system(sys);
  }
}

}  // namespace meshstore
