#pragma once

// Python's meshstore.actor.Supervision as the native calls take it: a
// tuple (policy, max_restarts, window in milliseconds), checked by the
// Python class first and here again.

#include <chrono>
#include <cstdint>
#include <string>
#include <tuple>

#include "meshstore/supervision.hpp"
#include "py_future.hpp"

namespace meshstore::python {

using PySupervision = std::tuple<std::string, int, std::int64_t>;

inline Supervision supervision_of(const PySupervision& given) {
  const auto& [policy, max_restarts, window_ms] = given;
  Supervision s;
  if (policy == "propagate") {
    s.policy = FailurePolicy::propagate;
  } else if (policy == "stop") {
    s.policy = FailurePolicy::stop;
  } else if (policy == "restart") {
    s.policy = FailurePolicy::restart;
  } else {
    raise_status(Status(Errc::invalid_argument, "Supervision: policy '" + policy +
                                                    "' is none of propagate, stop, restart"));
  }
  if (max_restarts < 0 || window_ms <= 0) {
    raise_status(Status(Errc::invalid_argument,
                        "Supervision: max_restarts must not be negative, and window positive"));
  }
  s.max_restarts = max_restarts;
  s.window = std::chrono::milliseconds(window_ms);
  return s;
}

}  // namespace meshstore::python
