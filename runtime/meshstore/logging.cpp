#include "meshstore/logging.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>

namespace meshstore::log {
namespace {

constexpr const char* kTextPattern = "[%Y-%m-%d %H:%M:%S.%e] [%n] [%^%l%$] %v";

// The launcher's rank of this process, or -1: what a JSON line's "rank" says.
int launcher_rank() {
  for (const char* name : {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}) {
    const char* v = std::getenv(name);
    if (!v || !*v) continue;
    char* end = nullptr;
    const long r = std::strtol(v, &end, 10);
    if (*end == '\0' && r >= 0 && r < (1L << 30)) return static_cast<int>(r);
  }
  return -1;
}

// The key a message names: the quoted name after a call's or a key's word
// ("get 'w': ...", "key 'w' ..."), as the store's messages write them; "".
std::string named_key(const std::string& text) {
  static const char* const kWords[] = {"key",        "put",       "get",    "get_into",
                                       "remove",     "publish",   "stage",  "state dict",
                                       "get_latest", "get_next",  "stream", "put_object",
                                       "get_object", "put_shard", "exists", "list"};
  for (std::size_t open = text.find('\''); open != std::string::npos;
       open = text.find('\'', open + 1)) {
    const auto close = text.find('\'', open + 1);
    if (close == std::string::npos) break;
    for (const char* w : kWords) {
      const std::string word = std::string(w) + " ";
      if (open >= word.size() && text.compare(open - word.size(), word.size(), word) == 0 &&
          (open == word.size() ||
           !std::isalnum(static_cast<unsigned char>(text[open - word.size() - 1])))) {
        return text.substr(open + 1, close - open - 1);
      }
    }
    open = close;
  }
  return {};
}

// One JSON object per line (set_format("json")), escaped by nlohmann-json.
class JsonFormatter final : public spdlog::formatter {
 public:
  explicit JsonFormatter(int rank) : rank_(rank) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto since = msg.time.time_since_epoch();
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(since);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(since - secs).count();
    const std::time_t t = static_cast<std::time_t>(secs.count());
    std::tm utc{};
    gmtime_r(&t, &utc);
    char when[40];
    const auto n = std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &utc);
    std::snprintf(when + n, sizeof when - n, ".%03dZ", static_cast<int>(ms));
    const std::string text(msg.payload.data(), msg.payload.size());
    const auto level = spdlog::level::to_string_view(msg.level);
    nlohmann::json line = {{"time", when},
                           {"level", std::string(level.data(), level.size())},
                           {"logger", std::string(msg.logger_name.data(), msg.logger_name.size())},
                           {"message", text}};
    if (auto key = named_key(text); !key.empty()) line["key"] = std::move(key);
    if (rank_ >= 0) line["rank"] = rank_;
    // Invalid UTF-8 in a message is replaced, never thrown on.
    const auto out = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    dest.append(out.data(), out.data() + out.size());
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>(rank_);
  }

 private:
  int rank_;
};

struct Registry {
  std::mutex mu;  // guards loggers, level and json
  std::unordered_map<std::string, std::shared_ptr<spdlog::logger>> loggers;
  spdlog::level::level_enum level = spdlog::level::warn;
  bool json = false;
  std::shared_ptr<spdlog::sinks::stderr_color_sink_mt> sink =
      std::make_shared<spdlog::sinks::stderr_color_sink_mt>();

  void format(spdlog::logger& l) const {
    if (json) {
      l.set_formatter(std::make_unique<JsonFormatter>(launcher_rank()));
    } else {
      l.set_pattern(kTextPattern);
    }
  }

  Registry() {
    if (const char* env = std::getenv("MESHSTORE_LOG_FORMAT"); env && *env) {
      if (std::string(env) == "json") {
        json = true;
      } else if (std::string(env) != "text") {
        std::fprintf(stderr, "meshstore: ignoring MESHSTORE_LOG_FORMAT '%s' (text or json)\n", env);
      }
    }
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
  r.format(*logger);
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

Status set_format(std::string_view format) {
  if (format != "text" && format != "json") {
    return Status(Errc::invalid_argument,
                  "unknown log format '" + std::string(format) + "' (expected text or json)");
  }
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.json = format == "json";
  for (auto& [name, logger] : r.loggers) r.format(*logger);
  return Status();
}

std::string current_format() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.json ? "json" : "text";
}

std::string current_level() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto sv = spdlog::level::to_string_view(r.level);
  return std::string(sv.data(), sv.size());
}

}  // namespace meshstore::log
