#pragma once

#include <spdlog/logger.h>

#include <memory>
#include <string>
#include <string_view>

#include "meshstore/status.hpp"

namespace meshstore::log {

/// The logger of one component ("controller", "volume", "rpc", ...), named
/// "meshstore.<component>" and writing to stderr. Created on first use with
/// the current level. Thread-safe.
std::shared_ptr<spdlog::logger> get(std::string_view component);

/// Parses trace, debug, info, warn, error, critical or off.
Result<spdlog::level::level_enum> parse_level(std::string_view text);

/// Sets the level of every meshstore logger, present and future.
/// The initial level comes from MESHSTORE_LOG_LEVEL, else "warn".
/// Fails with Errc::invalid_argument on an unknown level name.
Status set_level(std::string_view level);

/// The level in force, as its name.
std::string current_level();

}  // namespace meshstore::log
