#pragma once
// Entries that wait until a deadline, kept in a vector by an actor that
// checks them with one timer message (the client's calls parked through a
// failover, a volume's commits held for a new controller): what is due is
// taken out in order, and the timer is set for the first deadline left.
// T has a member `deadline` (a steady_clock time point).

#include <algorithm>
#include <chrono>
#include <iterator>
#include <vector>

namespace meshstore::internal {

/// Takes the entries of `items` whose deadline is not after `now` out of
/// it, in their order; the rest stay, in theirs.
template <class T>
std::vector<T> take_due(std::vector<T>& items, std::chrono::steady_clock::time_point now) {
  auto due = std::stable_partition(items.begin(), items.end(),
                                   [&](const T& x) { return x.deadline > now; });
  std::vector<T> out(std::make_move_iterator(due), std::make_move_iterator(items.end()));
  items.erase(due, items.end());
  return out;
}

/// How long until the first deadline of `items` (not empty), at least 1 ms:
/// the delay of the timer message that checks them.
template <class T>
std::chrono::milliseconds until_first(const std::vector<T>& items) {
  auto first = std::min_element(items.begin(), items.end(),
                                [](const T& a, const T& b) { return a.deadline < b.deadline; });
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      first->deadline - std::chrono::steady_clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

}  // namespace meshstore::internal
