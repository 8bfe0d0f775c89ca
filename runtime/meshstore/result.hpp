#pragma once

#include <stdexcept>
#include <type_traits>
#include <utility>
#include <variant>

#include "meshstore/status.hpp"

namespace meshstore {

/// Thrown by Result::value() on an error Result: reading a value that is not
/// there is a programming error, not an error flow.
class BadResultAccess : public std::logic_error {
 public:
  explicit BadResultAccess(const Status& s)
      : std::logic_error("Result::value() on an error: " + s.to_string()) {}
};

/// A value of type T, or the Status saying why there is none.
/// A value type; thread-compatible.
template <class T>
class [[nodiscard]] Result {
 public:
  static_assert(!std::is_same_v<std::decay_t<T>, Status>, "use Status directly");

  /// A result holding `value`.
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  /// An error result. `status` must not be ok.
  Result(Status status) : v_(std::in_place_index<1>, std::move(status)) {  // NOLINT
    if (std::get<1>(v_).ok()) {
      v_.template emplace<1>(Errc::internal,
                             "Result constructed from an ok Status without a value");
    }
  }

  /// True when a value is held.
  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  /// The error, or an ok Status when a value is held.
  Status status() const { return ok() ? Status() : std::get<1>(v_); }

  /// The value; throws BadResultAccess on an error result.
  const T& value() const& {
    check();
    return std::get<0>(v_);
  }
  T& value() & {
    check();
    return std::get<0>(v_);
  }
  T&& value() && {
    check();
    return std::get<0>(std::move(v_));
  }
  /// The value, or `fallback` on an error.
  T value_or(T fallback) const& { return ok() ? std::get<0>(v_) : std::move(fallback); }

  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  void check() const {
    if (!ok()) throw BadResultAccess(std::get<1>(v_));
  }
  std::variant<T, Status> v_;
};

/// Result<void>: success or a Status.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design
  bool ok() const noexcept { return status_.ok(); }
  explicit operator bool() const noexcept { return ok(); }
  Status status() const { return status_; }
  void value() const {
    if (!ok()) throw BadResultAccess(status_);
  }

 private:
  Status status_;
};

}  // namespace meshstore

namespace meshstore::internal {
inline Status status_of(const Status& s) { return s; }
template <class T>
Status status_of(const Result<T>& r) {
  return r.status();
}
}  // namespace meshstore::internal

/// Returns early from the enclosing function with the Status of `expr` when
/// it is an error. Works with Status and Result<T> expressions.
#define MESHSTORE_RETURN_IF_ERROR(expr)                                             \
  do {                                                                              \
    ::meshstore::Status meshstore_status_ = ::meshstore::internal::status_of(expr); \
    if (!meshstore_status_.ok()) return meshstore_status_;                          \
  } while (0)
