#pragma once

// The shape of a mesh: named dimensions, row-major, for example
// {{"hosts", 2}, {"procs", 4}} for 8 members where member 5 is host 1, proc 1.
//
//   auto e = meshstore::Extent::make({{"hosts", 2}, {"procs", 4}}).value();
//   e.size();                       // 8
//   e.rank_of({1, 1});              // 5
//   auto host1 = e.slice("hosts", 1, 2).value();   // 4 members: ranks 4..7
//   auto row = e.slice({{"hosts", 1}, {"procs", {0, 2}}}).value();
//   row.to_string();                // "{procs: 2}": ranks 4, 5 (an index drops "hosts")
//   auto even = e.slice({{"procs", {0, 4, 2}}}).value();  // procs 0 and 2: ranks 0, 2, 4, 6

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/status.hpp"

namespace meshstore {

/// One dimension's part of a multi-dimension slice: an index keeps the
/// members at that coordinate and drops the dimension (as Monarch's
/// `mesh.slice(hosts=1)`); a range [begin, end) keeps the dimension with
/// end - begin members; a range with a step keeps every step-th coordinate
/// from begin (as Python's `slice(0, 8, 2)`: 0, 2, 4, 6).
struct Select {
  /// The members at coordinate `index`; the dimension goes.
  Select(int index) : begin(index), end(index + 1), drop(true) {}  // NOLINT: implicit on purpose
  /// The members with begin <= coordinate < end; the dimension stays.
  Select(int begin_, int end_) : begin(begin_), end(end_), drop(false) {}
  /// The members at coordinates begin, begin + step, ... below end (step
  /// >= 1); the dimension stays, with ceil((end - begin) / step) members.
  Select(int begin_, int end_, int step_) : begin(begin_), end(end_), step(step_), drop(false) {}
  int begin;     ///< First coordinate kept (the index, for an index).
  int end;       ///< One past the last coordinate of the range (index + 1, for an index).
  int step = 1;  ///< Distance between kept coordinates; 1 keeps every one.
  bool drop;     ///< True for an index: the dimension is dropped from the slice.
};

/// Named dimensions with their sizes and, for a slice, the members (ranks of
/// the whole mesh) it covers in row-major order. A value type: not
/// synchronized.
class Extent {
 public:
  /// One dimension named "ranks" of `n` members (n >= 0).
  static Extent line(int n);
  /// Dimensions in order, each with a unique non-empty name and a size of
  /// at least 1, at most 2^31 - 1 members in all. Errc::invalid_argument
  /// naming the bad dimension otherwise.
  static Result<Extent> make(std::vector<std::pair<std::string, int>> dims);

  /// The dimensions, outermost first (none for a point: a slice that
  /// dropped every dimension).
  const std::vector<std::pair<std::string, int>>& dims() const noexcept { return dims_; }
  /// Number of members.
  int size() const noexcept { return static_cast<int>(ranks_.size()); }
  /// The rank (in the whole mesh) of member `i` of this extent.
  int rank(int i) const { return ranks_.at(static_cast<std::size_t>(i)); }
  /// The ranks (in the whole mesh) of every member, in row-major order.
  const std::vector<int>& ranks() const noexcept { return ranks_; }
  /// The member at `point` (one coordinate per dimension), as an index into
  /// this extent. Errc::out_of_range naming the coordinate otherwise.
  Result<int> index_of(const std::vector<int>& point) const;

  /// The members with `begin <= coordinate(dim) < end`; the dimension keeps
  /// its name with size end - begin. Errc::invalid_argument for an unknown
  /// dimension, Errc::out_of_range for an empty or outside range.
  Result<Extent> slice(const std::string& dim, int begin, int end) const;
  /// Several dimensions at once, in one call: each named dimension is cut
  /// to its Select (an index drops it; a step keeps every step-th
  /// coordinate); dimensions not named stay whole. Dropping every
  /// dimension leaves a point: one member, no dimensions.
  /// Errc::invalid_argument for no selection, an unknown dimension or one
  /// named twice, or a step below 1; Errc::out_of_range for an empty or
  /// outside range, or an index outside the dimension.
  Result<Extent> slice(const std::vector<std::pair<std::string, Select>>& selects) const;
  /// The same members viewed with other dimensions of the same total size.
  Result<Extent> reshape(std::vector<std::pair<std::string, int>> dims) const;

  /// "{hosts: 2, procs: 4}".
  std::string to_string() const;

 private:
  // Dimension `dim` cut to coordinates begin, begin + step, ... below end.
  Result<Extent> cut(const std::string& dim, int begin, int end, int step) const;
  std::vector<std::pair<std::string, int>> dims_;
  std::vector<int> ranks_;
};

}  // namespace meshstore
