#pragma once
// Whole decimal integers from text the user set (environment variables):
// one parser, so every variable refuses the same things with the same words.
#include <string>

#include "meshstore/status.hpp"

namespace meshstore::internal {

/// Parses `text` (the value of `name`) as a whole decimal integer in
/// [lo, hi]. Errc::invalid_argument naming `name` when it is null ("is not
/// set"), not an integer (empty, trailing characters, out of long's range)
/// or outside the range.
Result<long> parse_int(const char* name, const char* text, long lo, long hi);

}  // namespace meshstore::internal
