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

/// Sets how every meshstore logger writes a line, present and future:
/// "text" ("[time] [logger] [level] message", the default) or "json": one
/// JSON object per line with time (UTC, ISO 8601, ms), level, logger,
/// message, key (when the message names one as the store's messages do:
/// "get 'w': ...", "key 'w' ...") and rank (the launcher's RANK, OMPI_COMM_WORLD_RANK or
/// SLURM_PROCID, when set), for log shippers (docs/operations.md). The
/// initial format comes from MESHSTORE_LOG_FORMAT, else "text". Fails with
/// Errc::invalid_argument on another name.
Status set_format(std::string_view format);

/// The format in force: "text" or "json".
std::string current_format();

}  // namespace meshstore::log
