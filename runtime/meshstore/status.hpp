#pragma once

// Errc and Status: every call's outcome.

#include <cstdint>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace meshstore {

/// Error codes carried by every Status. The numeric values are stable: they
/// travel in the wire schema and may be stored, so a code is never renumbered
/// or reused. New codes are appended.
enum class Errc : std::int32_t {
  /// Success.
  ok = 0,
  /// A public call got bad input (empty key, null data, bad option, ...).
  invalid_argument = 1,
  /// The key (or object, or volume) does not exist.
  not_found = 2,
  /// The stored dtype differs from the one the caller expects.
  dtype_mismatch = 3,
  /// The stored shape differs from the one the caller expects.
  shape_mismatch = 4,
  /// A slice, offset or length lies outside the tensor or region.
  out_of_range = 5,
  /// A storage volume cannot hold the bytes it was asked to store.
  out_of_capacity = 6,
  /// An operation did not finish within its deadline.
  timeout = 7,
  /// The store was closed before or while the operation ran.
  shutdown = 8,
  /// A Promise was destroyed without being completed.
  broken_promise = 9,
  /// A peer (controller, volume, transport endpoint) is unreachable or dead.
  unavailable = 10,
  /// A sharded key is not fully written yet: some regions are missing.
  partially_committed = 11,
  /// A transport failed to move bytes.
  transport_error = 12,
  /// A message on the wire was malformed or unexpected.
  protocol_error = 13,
  /// An operating-system or file operation failed.
  io_error = 14,
  /// The key holds an object where a tensor was expected, or the reverse.
  wrong_kind = 15,
  /// The requested feature or transport is not available here.
  unsupported = 16,
  /// The operation lost a race with concurrent writers too many times.
  conflict = 17,
  /// An invariant inside meshstore broke: a bug, please report it.
  internal = 18,
  /// A caller's wait gave up (Future::get with a timeout): the operation
  /// itself is still running and its future can be waited on again. Not
  /// the operation's own deadline, which is Errc::timeout.
  wait_timeout = 19,
  /// A peer refused this process's credentials, or this process refused
  /// the peer's: TLS on one side only, or a certificate the other side's
  /// CA did not sign. The message names the reason.
  unauthenticated = 20,
  /// The caller cancelled the operation (Future::cancel) before it
  /// committed: nothing of it is visible, and the caller's buffer is no
  /// longer touched.
  cancelled = 21,
};

/// The highest code; values above it off a wire are unknown codes.
constexpr Errc kLastErrc = Errc::cancelled;

/// The snake_case name of a code, for example "not_found".
std::string_view errc_name(Errc code) noexcept;

/// The outcome of an operation: Errc::ok, or an error code with a message
/// that says what was wrong and on which key, for example
/// "get_into: dtype mismatch for 'layers.3.w': stored bfloat16, destination float32".
/// A value type; thread-compatible (distinct objects may be used from
/// distinct threads, one object needs external synchronisation to mutate).
class [[nodiscard]] Status {
 public:
  /// Success.
  Status() noexcept = default;
  /// An error (or success when `code` is Errc::ok; the message is then dropped).
  Status(Errc code, std::string message);

  /// Success, spelled out.
  static Status ok_status() noexcept { return Status(); }

  /// True when the code is Errc::ok.
  bool ok() const noexcept { return code_ == Errc::ok; }
  /// The error code.
  Errc code() const noexcept { return code_; }
  /// The message; empty on success.
  const std::string& message() const noexcept;
  /// "code: message", or "ok".
  std::string to_string() const;

  /// Returns a copy whose message is `context + ": " + message()`.
  Status with_context(const std::string& context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message() == b.message();
  }
  friend bool operator!=(const Status& a, const Status& b) { return !(a == b); }

 private:
  Errc code_ = Errc::ok;
  // Shared so copying a Status is cheap on the success path and small on the
  // error path; the message is immutable once set.
  std::shared_ptr<const std::string> message_;
};

std::ostream& operator<<(std::ostream& os, const Status& s);

// -- Result<T>: a value, or the Status saying why there is none ---------------

/// Thrown by Result::value() on an error Result: reading a value that is not
/// there is a programming error, not an error flow.
class BadResultAccess : public std::logic_error {
 public:
  /// An exception whose what() names the error `s` that was read as a value.
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
  /// Same as ok().
  explicit operator bool() const noexcept { return ok(); }

  /// The error, or an ok Status when a value is held.
  Status status() const { return ok() ? Status() : std::get<1>(v_); }

  /// The value; throws BadResultAccess on an error result.
  const T& value() const& {
    check();
    return std::get<0>(v_);
  }
  /// The value, mutable; throws BadResultAccess on an error result.
  T& value() & {
    check();
    return std::get<0>(v_);
  }
  /// The value as an rvalue, to move it out of a temporary result; throws
  /// BadResultAccess on an error result.
  T&& value() && {
    check();
    return std::get<0>(std::move(v_));
  }
  /// The value, or `fallback` on an error.
  T value_or(T fallback) const& { return ok() ? std::get<0>(v_) : std::move(fallback); }

  /// Same as value().
  const T& operator*() const& { return value(); }
  /// Same as value().
  T& operator*() & { return value(); }
  /// Member access on the value; throws BadResultAccess on an error result.
  const T* operator->() const { return &value(); }
  /// Member access on the value; throws BadResultAccess on an error result.
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
  /// Success.
  Result() = default;
  /// The result `status`: success when it is ok, otherwise that error.
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design
  /// True on success.
  bool ok() const noexcept { return status_.ok(); }
  /// Same as ok().
  explicit operator bool() const noexcept { return ok(); }
  /// The error, or an ok Status on success.
  Status status() const { return status_; }
  /// Does nothing on success; throws BadResultAccess on an error result.
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
