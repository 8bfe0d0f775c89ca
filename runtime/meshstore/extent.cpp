// Extent (extent.hpp): named dimensions of a mesh and the members a slice
// of it covers.
#include "meshstore/extent.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>

namespace meshstore {

Extent Extent::line(int n) {
  Extent e;
  e.dims_ = {{"ranks", n < 0 ? 0 : n}};
  e.ranks_.resize(static_cast<std::size_t>(n < 0 ? 0 : n));
  std::iota(e.ranks_.begin(), e.ranks_.end(), 0);
  return e;
}

namespace {

Status check_dims(const std::vector<std::pair<std::string, int>>& dims, std::int64_t& total) {
  total = 1;
  std::set<std::string> seen;
  if (dims.empty()) return Status(Errc::invalid_argument, "extent: no dimensions");
  for (const auto& [name, n] : dims) {
    if (name.empty()) return Status(Errc::invalid_argument, "extent: a dimension has no name");
    if (!seen.insert(name).second) {
      return Status(Errc::invalid_argument, "extent: dimension '" + name + "' appears twice");
    }
    if (n < 1) {
      return Status(Errc::invalid_argument,
                    "extent: dimension '" + name + "' has size " + std::to_string(n));
    }
    total *= n;
    if (total > std::numeric_limits<int>::max()) {
      return Status(Errc::invalid_argument, "extent: more than 2^31 - 1 members");
    }
  }
  return Status();
}

}  // namespace

Result<Extent> Extent::make(std::vector<std::pair<std::string, int>> dims) {
  std::int64_t total = 0;
  MESHSTORE_RETURN_IF_ERROR(check_dims(dims, total));
  Extent e;
  e.dims_ = std::move(dims);
  e.ranks_.resize(static_cast<std::size_t>(total));
  std::iota(e.ranks_.begin(), e.ranks_.end(), 0);
  return e;
}

Result<int> Extent::index_of(const std::vector<int>& point) const {
  if (point.size() != dims_.size()) {
    return Status(Errc::out_of_range, "extent " + to_string() + ": a point needs " +
                                          std::to_string(dims_.size()) + " coordinates, got " +
                                          std::to_string(point.size()));
  }
  int index = 0;
  for (std::size_t d = 0; d < dims_.size(); ++d) {
    if (point[d] < 0 || point[d] >= dims_[d].second) {
      return Status(Errc::out_of_range, "extent " + to_string() + ": " + dims_[d].first + " " +
                                            std::to_string(point[d]) + " outside [0, " +
                                            std::to_string(dims_[d].second) + ")");
    }
    index = index * dims_[d].second + point[d];
  }
  return index;
}

Result<Extent> Extent::slice(const std::string& dim, int begin, int end) const {
  return cut(dim, begin, end, 1);
}

Result<Extent> Extent::cut(const std::string& dim, int begin, int end, int step) const {
  std::size_t d = 0;
  while (d < dims_.size() && dims_[d].first != dim) ++d;
  if (d == dims_.size()) {
    return Status(Errc::invalid_argument,
                  "slice: extent " + to_string() + " has no dimension '" + dim + "'");
  }
  const int n = dims_[d].second;
  if (step < 1) {
    return Status(Errc::invalid_argument,
                  "slice: " + dim + " step " + std::to_string(step) + " is below 1");
  }
  if (begin < 0 || end > n || begin >= end) {
    return Status(Errc::out_of_range, "slice: " + dim + " [" + std::to_string(begin) + ", " +
                                          std::to_string(end) + ") is empty or outside [0, " +
                                          std::to_string(n) + ")");
  }
  // Row-major: `inner` members per step of dimension d, `outer` blocks.
  int inner = 1;
  for (std::size_t k = d + 1; k < dims_.size(); ++k) inner *= dims_[k].second;
  const int outer = size() / (n * inner);
  Extent out;
  out.dims_ = dims_;
  out.dims_[d].second =
      static_cast<int>((static_cast<std::int64_t>(end) - begin + step - 1) / step);
  for (int o = 0; o < outer; ++o) {
    for (std::int64_t c = begin; c < end; c += step) {
      for (int i = 0; i < inner; ++i) {
        out.ranks_.push_back(ranks_[static_cast<std::size_t>((o * n + c) * inner + i)]);
      }
    }
  }
  return out;
}

Result<Extent> Extent::slice(const std::vector<std::pair<std::string, Select>>& selects) const {
  if (selects.empty()) return Status(Errc::invalid_argument, "slice: no dimension selected");
  std::set<std::string> seen;
  Extent out = *this;
  for (const auto& [dim, sel] : selects) {
    if (!seen.insert(dim).second) {
      return Status(Errc::invalid_argument, "slice: dimension '" + dim + "' selected twice");
    }
    // Where `dim` is (slice() below refuses an unknown one); slicing keeps
    // the dimensions in place.
    const auto d =
        static_cast<std::size_t>(std::find_if(out.dims_.begin(), out.dims_.end(),
                                              [&](const auto& kv) { return kv.first == dim; }) -
                                 out.dims_.begin());
    if (sel.drop && d < out.dims_.size() && (sel.begin < 0 || sel.begin >= out.dims_[d].second)) {
      return Status(Errc::out_of_range, "slice: " + dim + " index " + std::to_string(sel.begin) +
                                            " outside [0, " + std::to_string(out.dims_[d].second) +
                                            ")");
    }
    auto cut = out.cut(dim, sel.begin, sel.end, sel.step);
    if (!cut.ok()) return cut.status();
    out = std::move(cut).value();
    // A dropped dimension has size 1 now: erasing it keeps the members in order.
    if (sel.drop) out.dims_.erase(out.dims_.begin() + static_cast<std::ptrdiff_t>(d));
  }
  return out;
}

Result<Extent> Extent::reshape(std::vector<std::pair<std::string, int>> dims) const {
  std::int64_t total = 0;
  MESHSTORE_RETURN_IF_ERROR(check_dims(dims, total));
  if (total != size()) {
    return Status(Errc::invalid_argument, "reshape: extent " + to_string() + " has " +
                                              std::to_string(size()) + " members, the new one " +
                                              std::to_string(total));
  }
  Extent out;
  out.dims_ = std::move(dims);
  out.ranks_ = ranks_;
  return out;
}

std::string Extent::to_string() const {
  std::string out = "{";
  for (std::size_t d = 0; d < dims_.size(); ++d) {
    out += (d ? ", " : "") + dims_[d].first + ": " + std::to_string(dims_[d].second);
  }
  return out + "}";
}

}  // namespace meshstore
