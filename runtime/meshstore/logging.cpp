#include "meshstore/logging.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <mutex>
#include <unordered_map>

namespace meshstore::log {
namespace {

struct Registry {
  std::mutex mu;  // guards loggers and level
  std::unordered_map<std::string, std::shared_ptr<spdlog::logger>> loggers;
  spdlog::level::level_enum level = spdlog::level::warn;
  std::shared_ptr<spdlog::sinks::stderr_color_sink_mt> sink =
      std::make_shared<spdlog::sinks::stderr_color_sink_mt>();

  Registry() {
    if (const char* env = std::getenv("MESHSTORE_LOG_LEVEL"); env && *env) {
      if (auto l = parse_level(env); l.ok()) {
        level = *l;
      } else {
        std::fprintf(stderr, "meshstore: ignoring MESHSTORE_LOG_LEVEL: %s\n",
                     l.status().message().c_str());
      }
    }
  }
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: loggers outlive static teardown
  return *r;
}

}  // namespace

std::shared_ptr<spdlog::logger> get(std::string_view component) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::string name = "meshstore." + std::string(component);
  auto it = r.loggers.find(name);
  if (it != r.loggers.end()) return it->second;
  auto logger = std::make_shared<spdlog::logger>(name, r.sink);
  logger->set_level(r.level);
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%^%l%$] %v");
  r.loggers.emplace(name, logger);
  return logger;
}

Result<spdlog::level::level_enum> parse_level(std::string_view text) {
  using spdlog::level::level_enum;
  static const std::pair<std::string_view, level_enum> kLevels[] = {
      {"trace", level_enum::trace},       {"debug", level_enum::debug},  {"info", level_enum::info},
      {"warn", level_enum::warn},         {"warning", level_enum::warn}, {"error", level_enum::err},
      {"critical", level_enum::critical}, {"off", level_enum::off}};
  for (const auto& [name, level] : kLevels) {
    if (text == name) return level;
  }
  return Status(Errc::invalid_argument,
                "unknown log level '" + std::string(text) +
                    "' (expected trace, debug, info, warn, error, critical or off)");
}

Status set_level(std::string_view level) {
  auto l = parse_level(level);
  if (!l.ok()) return l.status();
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.level = *l;
  for (auto& [name, logger] : r.loggers) logger->set_level(*l);
  return Status();
}

std::string current_level() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto sv = spdlog::level::to_string_view(r.level);
  return std::string(sv.data(), sv.size());
}

}  // namespace meshstore::log
