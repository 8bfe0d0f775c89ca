#include "faults/linearizability.hpp"

#include <algorithm>
#include <optional>
#include <unordered_set>
#include <utility>

namespace meshstore::testing {
namespace {

using Kind = RegisterOp::Kind;
using Outcome = RegisterOp::Outcome;
constexpr std::int64_t kAbsent = std::numeric_limits<std::int64_t>::min();

// The register after `op` from `state`, or nullopt when `op` cannot happen
// there (a read of another value, a remove that found what is not so).
std::optional<std::int64_t> step(std::int64_t state, const RegisterOp& op) {
  switch (op.kind) {
    case Kind::put:
      return op.value;
    case Kind::get:
      if (op.outcome == Outcome::absent) {
        if (state != kAbsent) return std::nullopt;
      } else if (state != op.value) {
        return std::nullopt;
      }
      return state;
    case Kind::remove:
      if (op.outcome == Outcome::done && state == kAbsent) return std::nullopt;
      if (op.outcome == Outcome::absent && state != kAbsent) return std::nullopt;
      return kAbsent;
  }
  return std::nullopt;
}

// One call or return event of the history, in a doubly linked list.
struct Event {
  std::size_t op = 0;
  bool is_call = false;
  std::int64_t at = 0;
  std::size_t match = 0;  // the call's return event, the return's call
  std::size_t prev = 0, next = 0;
};

// A configuration searched: the operations linearized, and the register.
struct Config {
  std::vector<std::uint64_t> done;
  std::int64_t state = 0;
  bool operator==(const Config& o) const { return state == o.state && done == o.done; }
};
struct ConfigHash {
  std::size_t operator()(const Config& c) const {
    std::size_t h = std::hash<std::int64_t>()(c.state);
    for (auto w : c.done) h = h * 1099511628211ull ^ std::hash<std::uint64_t>()(w);
    return h;
  }
};

// The events of `history` in time order (a call before a return at the same
// time: they overlap), linked between two sentinels: 0 (head) and the last.
std::vector<Event> events_of(const std::vector<RegisterOp>& history) {
  std::vector<Event> ev;
  for (std::size_t i = 0; i < history.size(); ++i) {
    ev.push_back(Event{i, true, history[i].call});
    ev.push_back(Event{i, false, history[i].ret});
  }
  std::stable_sort(ev.begin(), ev.end(), [](const Event& a, const Event& b) {
    return a.at != b.at ? a.at < b.at : (a.is_call && !b.is_call);
  });
  std::vector<Event> linked(ev.size() + 2);
  std::vector<std::size_t> call_at(history.size()), ret_at(history.size());
  for (std::size_t i = 0; i < ev.size(); ++i) {
    linked[i + 1] = ev[i];
    (ev[i].is_call ? call_at : ret_at)[ev[i].op] = i + 1;
  }
  for (std::size_t i = 0; i < history.size(); ++i) {
    linked[call_at[i]].match = ret_at[i];
    linked[ret_at[i]].match = call_at[i];
  }
  for (std::size_t i = 0; i < linked.size(); ++i) {
    linked[i].prev = i == 0 ? 0 : i - 1;
    linked[i].next = i + 1 < linked.size() ? i + 1 : i;
  }
  return linked;
}

// Takes call `c` and its return out of the list, or puts them back.
void lift(std::vector<Event>& ev, std::size_t c) {
  for (std::size_t e : {c, ev[c].match}) {
    ev[ev[e].prev].next = ev[e].next;
    ev[ev[e].next].prev = ev[e].prev;
  }
}
void unlift(std::vector<Event>& ev, std::size_t c) {
  for (std::size_t e : {ev[c].match, c}) {
    ev[ev[e].prev].next = e;
    ev[ev[e].next].prev = e;
  }
}

}  // namespace

std::string describe(const RegisterOp& op) {
  std::string s =
      op.kind == Kind::put ? "put " + std::to_string(op.value)
      : op.kind == Kind::get
          ? (op.outcome == Outcome::absent ? "get (absent)" : "get " + std::to_string(op.value))
          : (op.outcome == Outcome::absent ? "remove (absent)" : "remove");
  if (op.outcome == Outcome::unknown) s += " (failed: outcome unknown)";
  return s + " by client " + std::to_string(op.client) + " [" + std::to_string(op.call) + ", " +
         (op.ret == RegisterOp::kNever ? std::string("never") : std::to_string(op.ret)) + "]";
}

bool linearizable(const std::vector<RegisterOp>& history, std::string* why, std::size_t* states) {
  auto ev = events_of(history);
  const std::size_t head = 0, tail = ev.size() - 1;
  Config config{std::vector<std::uint64_t>((history.size() + 63) / 64, 0), kAbsent};
  std::unordered_set<Config, ConfigHash> seen;
  std::vector<std::pair<std::size_t, std::int64_t>> stack;  // call linearized, state before
  std::size_t entry = ev[head].next;
  std::size_t furthest = 0, stuck = 0;
  while (ev[head].next != tail) {
    if (ev[entry].is_call) {
      const auto op = ev[entry].op;
      auto next = step(config.state, history[op]);
      Config after = config;
      if (next) {
        after.state = *next;
        after.done[op / 64] |= std::uint64_t{1} << (op % 64);
      }
      if (next && seen.insert(after).second) {
        stack.emplace_back(entry, config.state);
        config = std::move(after);
        lift(ev, entry);
        entry = ev[head].next;
      } else {
        entry = ev[entry].next;
      }
      continue;
    }
    // A return passed before its call was placed: undo the last choice.
    // The report names where the search came furthest.
    if (stack.size() >= furthest) {
      furthest = stack.size();
      stuck = ev[entry].op;
    }
    if (stack.empty()) {
      if (why) {
        *why = "no order places " + describe(history[stuck]) + " (at best " +
               std::to_string(furthest) + " operations placed before it)";
      }
      if (states) *states = seen.size();
      return false;
    }
    auto [call, state] = stack.back();
    stack.pop_back();
    const auto op = ev[call].op;
    config.state = state;
    config.done[op / 64] &= ~(std::uint64_t{1} << (op % 64));
    unlift(ev, call);
    entry = ev[call].next;
  }
  if (states) *states = seen.size();
  return true;
}

}  // namespace meshstore::testing
