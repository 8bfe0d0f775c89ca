#include "meshstore/status.hpp"

namespace meshstore {

std::string_view errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::ok:
      return "ok";
    case Errc::invalid_argument:
      return "invalid_argument";
    case Errc::not_found:
      return "not_found";
    case Errc::dtype_mismatch:
      return "dtype_mismatch";
    case Errc::shape_mismatch:
      return "shape_mismatch";
    case Errc::out_of_range:
      return "out_of_range";
    case Errc::out_of_capacity:
      return "out_of_capacity";
    case Errc::timeout:
      return "timeout";
    case Errc::shutdown:
      return "shutdown";
    case Errc::broken_promise:
      return "broken_promise";
    case Errc::unavailable:
      return "unavailable";
    case Errc::partially_committed:
      return "partially_committed";
    case Errc::transport_error:
      return "transport_error";
    case Errc::protocol_error:
      return "protocol_error";
    case Errc::io_error:
      return "io_error";
    case Errc::wrong_kind:
      return "wrong_kind";
    case Errc::unsupported:
      return "unsupported";
    case Errc::conflict:
      return "conflict";
    case Errc::internal:
      return "internal";
    case Errc::wait_timeout:
      return "wait_timeout";
    case Errc::unauthenticated:
      return "unauthenticated";
    case Errc::cancelled:
      return "cancelled";
  }
  return "unknown_error";
}

Status::Status(Errc code, std::string message) : code_(code) {
  if (code_ != Errc::ok) message_ = std::make_shared<const std::string>(std::move(message));
}

const std::string& Status::message() const noexcept {
  static const std::string empty;
  return message_ ? *message_ : empty;
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string out(errc_name(code_));
  if (!message().empty()) {
    out += ": ";
    out += message();
  }
  return out;
}

Status Status::with_context(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message());
}

std::ostream& operator<<(std::ostream& os, const Status& s) { return os << s.to_string(); }

}  // namespace meshstore
