#pragma once

#include <memory>
#include <ostream>
#include <string>

#include "meshstore/errc.hpp"

namespace meshstore {

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

}  // namespace meshstore
