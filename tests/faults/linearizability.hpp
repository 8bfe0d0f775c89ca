#pragma once
// A linearizability checker for histories of one key of the store, seen as
// a register: put writes a value, get reads it (or finds the key absent),
// remove empties it. Wing and Gong's search with Lowe's memoisation, as
// Porcupine runs it: the history's call and return events in time order,
// each call linearized as soon as the model allows and no return is
// passed by; a configuration (the set of operations linearized, the
// register's value) seen before is not searched again.
// docs/reliability.md, "The linearizability check".
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace meshstore::testing {

/// One call on one key, as a client saw it.
struct RegisterOp {
  enum class Kind { put, get, remove };
  enum class Outcome {
    done,     ///< answered: a get's `value`, a remove that removed
    absent,   ///< a get or remove that found no key
    unknown,  ///< failed: a put or remove may or may not have happened
  };
  static constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();
  Kind kind = Kind::get;
  Outcome outcome = Outcome::done;
  std::int64_t value = 0;  ///< put: written; get: read (done)
  std::int64_t call = 0;   ///< when it was made
  std::int64_t ret = 0;    ///< when it was answered (kNever: outcome unknown)
  int client = 0;          ///< for the report
};

/// Whether `history` (one key's operations; failed gets left out) is
/// linearizable from an absent key. `why`, when not, names the first
/// operation no order can place; `states` counts the configurations
/// searched.
bool linearizable(const std::vector<RegisterOp>& history, std::string* why = nullptr,
                  std::size_t* states = nullptr);

/// "put 7 by client 2 [100, 250]" and the like, for reports.
std::string describe(const RegisterOp& op);

}  // namespace meshstore::testing
