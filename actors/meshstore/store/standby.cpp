#include "meshstore/store/standby.hpp"

#include <algorithm>
#include <caf/all.hpp>

#include "meshstore/internal/address.hpp"
#include "meshstore/internal/connect.hpp"
#include "meshstore/logging.hpp"

namespace meshstore::store {

namespace {

// One server's share of a turn when several are tried: a server that
// refuses answers at once, so this bounds only one that hangs.
constexpr std::chrono::milliseconds kTurn{300};

}  // namespace

Result<std::vector<std::string>> servers_of(const std::string& address) {
  std::vector<std::string> out;
  std::size_t from = 0;
  for (;;) {
    const auto comma = address.find(',', from);
    std::string one = address.substr(from, comma == std::string::npos ? comma : comma - from);
    auto parsed = internal::parse_address(one);
    if (!parsed.ok()) return parsed.status().with_context("connect: address '" + one + "'");
    if (parsed->port == 0) {
      return Status(Errc::invalid_argument, "connect: address '" + one + "' has port 0");
    }
    out.push_back(std::move(one));
    if (comma == std::string::npos) return out;
    from = comma + 1;
  }
}

Result<protocol::directory_actor> reach_one(caf::actor_system& sys,
                                            const std::vector<std::string>& servers,
                                            std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Status last(Errc::unavailable, "no server was tried");
  for (std::size_t turn = 0;; ++turn) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 && turn >= servers.size()) break;
    const auto& at = servers[turn % servers.size()];
    auto a = internal::parse_address(at).value();  // checked by servers_of
    const auto slice = servers.size() == 1 ? left : std::min(left, kTurn);
    auto reached = internal::connect_with_retry<protocol::directory_actor>(
        sys, a.host, a.port, std::max(slice, std::chrono::milliseconds(1)), "meshstore");
    if (reached.ok()) return reached;
    last = reached.status();
    if (servers.size() == 1) break;
  }
  if (servers.size() == 1) return last;
  std::string named;
  for (const auto& s : servers) named += (named.empty() ? "" : ", ") + s;
  return Status(Errc::unavailable, "no store answered at any of " + named + " within " +
                                       std::to_string(timeout.count()) +
                                       " ms (the last: " + last.to_string() + ")");
}

Status await_primary_loss(caf::actor_system& sys, const std::string& primary,
                          std::chrono::milliseconds timeout) {
  auto servers = servers_of(primary);
  if (!servers.ok()) return servers.status().with_context("StoreOptions: standby_of");
  if (servers->size() != 1) {
    return Status(Errc::invalid_argument,
                  "StoreOptions: standby_of names one primary (HOST:PORT), got '" + primary + "'");
  }
  auto reached = reach_one(sys, *servers, timeout);
  if (!reached.ok()) {
    return reached.status().with_context("standby of " + primary +
                                         ": the primary must be serving when a standby starts");
  }
  auto log = log::get("store");
  log->info("standing by for the store at {}", primary);
  caf::scoped_actor self{sys};
  self->monitor(*reached);
  const auto watched = caf::actor_cast<caf::actor_addr>(*reached);
  bool gone = false;
  self->receive_while([&] { return !gone; })([&](caf::down_msg& m) {
    gone = m.source == watched;
    if (gone) {
      log->warn("the store at {} is gone ({}): taking over", primary, sys.render(m.reason));
    }
  });
  return Status();
}

}  // namespace meshstore::store
