// A sharded save straight into the final files (checkpoint.hpp,
// save_sharded; docs/persistence.md, "A sharded save"): one exchange of
// local shapes, the same plan on every rank, each rank's boxes written in
// place, one barrier, rank 0's renames.

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "meshstore/checkpoint.hpp"
#include "meshstore/internal/file_writes.hpp"

namespace meshstore {
namespace {

namespace st = safetensors;
using json = nlohmann::json;

// One rank's part of the exchange: its tensors' dtypes and local shapes in
// its order, or why it cannot take part.
struct Report {
  std::string error;
  std::string nonce;  // rank 0's names the temporaries
  std::vector<std::pair<std::string, std::pair<DType, Shape>>> tensors;
};

std::string encode(const Report& r) {
  json j;
  j["error"] = r.error;
  j["nonce"] = r.nonce;
  json ts = json::array();
  for (const auto& [name, t] : r.tensors) {
    ts.push_back({name, std::string(dtype_name(t.first)), t.second});
  }
  j["tensors"] = std::move(ts);
  return j.dump();
}

Result<Report> decode(const std::string& text, std::int64_t rank) {
  try {
    auto j = json::parse(text);
    Report r;
    r.error = j.at("error").get<std::string>();
    r.nonce = j.at("nonce").get<std::string>();
    for (const auto& t : j.at("tensors")) {
      auto d = parse_dtype(t.at(1).get<std::string>());
      if (!d.ok()) return d.status();
      r.tensors.push_back({t.at(0).get<std::string>(), {*d, t.at(2).get<Shape>()}});
    }
    return r;
  } catch (const json::exception& e) {
    return Status(Errc::protocol_error,
                  "rank " + std::to_string(rank) + "'s report is malformed: " + e.what());
  }
}

// Every rank's bytes, checked: one string per rank.
Result<std::vector<std::string>> exchange(const ShardedSaveOptions& o, std::int64_t world,
                                          const std::string& mine) {
  if (world == 1) return std::vector<std::string>{mine};
  if (!o.all_gather) return Status(Errc::invalid_argument, "no all_gather to exchange with");
  auto all = o.all_gather(mine);
  if (!all.ok()) return all.status().with_context("exchanging with the other ranks");
  if (static_cast<std::int64_t>(all->size()) != world) {
    return Status(Errc::protocol_error, "the exchange answered " + std::to_string(all->size()) +
                                            " ranks' parts, not " + std::to_string(world));
  }
  return all;
}

// This rank's checks, before the exchange: "" when it can take part.
std::string check_local(const StateDict& local, const std::map<std::string, Placement>& placements,
                        std::int64_t rank, std::int64_t world, const ShardedSaveOptions& o) {
  if (world < 1 || rank < 0 || rank >= world) {
    return "rank " + std::to_string(rank) + " is not in a world of " + std::to_string(world);
  }
  if (world > 1 && !o.all_gather) return "a world of more than one rank needs all_gather";
  for (const auto& e : local.entries()) {
    if (!e.is_tensor()) return "'" + e.name + "' is a value; a sharded save holds tensors only";
    auto p = placements.find(e.name);
    if (p == placements.end()) return "'" + e.name + "' has no placement";
    if (p->second.world_size() != world) {
      return "'" + e.name + "': its placement " + p->second.to_string() + " has " +
             std::to_string(p->second.world_size()) + " ranks, the world " + std::to_string(world);
    }
    if (!o.file_of.empty() && o.file_of.count(e.name) == 0) {
      return "'" + e.name + "' is not in file_of (fqn_to_index), which must name every tensor";
    }
    if (auto s = e.view.validate("'" + e.name + "'"); !s.ok()) return s.message();
  }
  for (const auto& [name, p] : placements) {
    if (!local.find(name)) return "a placement names '" + name + "', which is not a tensor here";
  }
  return "";
}

// The global shape of a tensor from every rank's local shape: along a
// dimension that mesh dimensions shard, the sum of the local sizes of the
// ranks at coordinate 0 on every other mesh dimension (torch.chunk's
// pieces tile it); along the others, the local size. Checked against every
// rank by slice_for.
Result<Shape> global_shape(const std::string& name, const Placement& p,
                           const std::vector<Shape>& locals) {
  const Shape& first = locals.front();
  Shape global(first.size(), 0);
  std::set<std::int64_t> sharded;
  for (const auto& d : p.dims()) {
    if (d.kind == DimPlacement::Kind::shard) {
      if (d.dim >= static_cast<std::int64_t>(first.size())) {
        return Status(Errc::invalid_argument, "'" + name + "': placement " + p.to_string() +
                                                  " shards dimension " + std::to_string(d.dim) +
                                                  " of a tensor of " +
                                                  std::to_string(first.size()));
      }
      sharded.insert(d.dim);
    }
  }
  for (std::size_t t = 0; t < first.size(); ++t) {
    if (sharded.count(static_cast<std::int64_t>(t)) == 0) {
      global[t] = first[t];
      continue;
    }
    for (std::size_t r = 0; r < locals.size(); ++r) {
      auto c = p.coordinates(static_cast<std::int64_t>(r)).value();
      bool at_origin = true;
      for (std::size_t m = 0; m < c.size(); ++m) {
        const auto& d = p.dims()[m];
        const bool shards_t =
            d.kind == DimPlacement::Kind::shard && d.dim == static_cast<std::int64_t>(t);
        if (!shards_t && c[m] != 0) at_origin = false;
      }
      if (at_origin) global[t] += locals[r][t];
    }
  }
  for (std::size_t r = 0; r < locals.size(); ++r) {
    auto box = p.slice_for(global, static_cast<std::int64_t>(r));
    if (!box.ok()) return box.status().with_context("'" + name + "'");
    if (box->local_shape() != locals[r]) {
      return Status(Errc::invalid_argument, "'" + name + "': rank " + std::to_string(r) +
                                                " holds " + shape_to_string(locals[r]) + ", but " +
                                                p.to_string() + " of " + shape_to_string(global) +
                                                " gives it " + shape_to_string(box->local_shape()));
    }
  }
  return global;
}

// One file of the plan.
struct PlannedFile {
  std::string final_path, temp_path;
  st::Layout layout;
};

struct Plan {
  std::vector<PlannedFile> files;
  // Tensor name -> (file index, its global shape).
  std::map<std::string, std::pair<std::size_t, Shape>> where;
  std::uint64_t total = 0;
};

// The same plan on every rank, from every rank's report.
Result<Plan> make_plan(const std::string& dir, const std::vector<Report>& reports,
                       const std::map<std::string, Placement>& placements,
                       const ShardedSaveOptions& o) {
  const auto& order = reports.front().tensors;
  std::vector<st::Writer::Spec> specs;
  std::vector<std::uint64_t> sizes;
  Plan plan;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto& [name, info] = order[i];
    std::vector<Shape> locals;
    for (std::size_t r = 0; r < reports.size(); ++r) {
      const auto& theirs = reports[r].tensors;
      auto it = std::find_if(theirs.begin(), theirs.end(),
                             [&](const auto& t) { return t.first == name; });
      if (it == theirs.end() || theirs.size() != order.size()) {
        return Status(Errc::invalid_argument,
                      "rank " + std::to_string(r) + " saves " + std::to_string(theirs.size()) +
                          " tensors" + (it == theirs.end() ? ", not '" + name + "'" : "") +
                          "; rank 0 saves " + std::to_string(order.size()));
      }
      if (it->second.first != info.first) {
        return Status(Errc::invalid_argument,
                      "'" + name + "' is " + std::string(dtype_name(it->second.first)) +
                          " on rank " + std::to_string(r) + ", " +
                          std::string(dtype_name(info.first)) + " on rank 0");
      }
      locals.push_back(it->second.second);
    }
    auto global = global_shape(name, placements.at(name), locals);
    if (!global.ok()) return global.status();
    specs.push_back(st::Writer::Spec{name, info.first, *global});
    sizes.push_back(static_cast<std::uint64_t>(shape_numel(*global)) * dtype_size(info.first));
    plan.total += sizes.back();
  }
  std::vector<std::size_t> file_of(specs.size());
  std::size_t n = 1;
  if (!o.file_of.empty()) {
    std::set<std::size_t> used;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const auto f = o.file_of.at(specs[i].name);
      if (f < 1) {
        return Status(Errc::invalid_argument,
                      "file_of numbers files from 1; '" + specs[i].name + "' has 0");
      }
      file_of[i] = f - 1;
      used.insert(f);
      n = std::max(n, f);
    }
    if (used.size() != n) {
      return Status(Errc::invalid_argument, "file_of uses " + std::to_string(used.size()) +
                                                " of files 1.." + std::to_string(n) +
                                                ": every file must hold a tensor");
    }
  } else {
    std::tie(file_of, n) = st::plan_shards(sizes, o.max_shard_bytes);
  }
  const std::string& nonce = reports.front().nonce;
  for (std::size_t f = 0; f < n; ++f) {
    std::vector<st::Writer::Spec> in_file;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      if (file_of[i] == f) in_file.push_back(specs[i]);
    }
    PlannedFile pf;
    pf.final_path = dir + "/" + (n == 1 ? "model.safetensors" : st::shard_file_name(f, n));
    pf.temp_path = pf.final_path + ".tmp." + nonce;
    auto layout = st::plan_file(in_file, o.metadata, "save_sharded '" + dir + "'");
    if (!layout.ok()) return layout.status();
    pf.layout = std::move(layout).value();
    for (const auto& s : in_file) plan.where[s.name] = {f, s.shape};
    plan.files.push_back(std::move(pf));
  }
  return plan;
}

Status io_error(const std::string& path, const std::string& what, int e) {
  return Status(Errc::io_error, "'" + path + "': " + what + ": " + std::strerror(e));
}

// This rank's part: the headers (rank 0) and its boxes, flushed.
Status write_part(const Plan& plan, const StateDict& local,
                  const std::map<std::string, Placement>& placements, std::int64_t rank,
                  const ShardedSaveOptions& o, CheckpointReport& report) {
  std::vector<int> fds(plan.files.size(), -1);
  struct Closer {
    std::vector<int>& fds;
    ~Closer() {
      for (int fd : fds) {
        if (fd >= 0) ::close(fd);
      }
    }
  } closer{fds};
  auto fd_of = [&](std::size_t f) -> Result<int> {
    if (fds[f] >= 0) return fds[f];
    const auto& pf = plan.files[f];
    const int fd = ::open(pf.temp_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return io_error(pf.temp_path, "create", errno);
    fds[f] = fd;
    // Every rank sets the same size (no space reserved ahead: see
    // write_file).
    if (::ftruncate(fd, static_cast<off_t>(pf.layout.size())) != 0) {
      return io_error(pf.temp_path, "ftruncate", errno);
    }
    return fd;
  };
  if (rank == 0) {
    for (std::size_t f = 0; f < plan.files.size(); ++f) {
      auto fd = fd_of(f);
      if (!fd.ok()) return fd.status();
      const auto& prefix = plan.files[f].layout.prefix;
      MESHSTORE_RETURN_IF_ERROR(
          st::internal::pwrite_all(*fd, reinterpret_cast<const std::byte*>(prefix.data()),
                                   prefix.size(), 0, plan.files[f].temp_path));
    }
  }
  std::uint64_t mine = 0;
  std::vector<std::pair<const StateDict::Entry*, TensorSlice>> boxes;
  for (const auto& e : local.entries()) {
    const auto& p = placements.at(e.name);
    if (!p.is_primary(rank).value()) continue;  // a replica: its first holder writes it
    auto box = p.slice_for(plan.where.at(e.name).second, rank).value();
    mine += e.view.nbytes();
    boxes.push_back({&e, std::move(box)});
  }
  for (const auto& [e, box] : boxes) {
    const auto f = plan.where.at(e->name).first;
    auto fd = fd_of(f);
    if (!fd.ok()) return fd.status();
    const auto& pf = plan.files[f];
    MESHSTORE_RETURN_IF_ERROR(
        st::internal::write_box(*fd, pf.temp_path, pf.layout.offsets.at(e->name), box, e->view)
            .with_context("'" + e->name + "'"));
    report.bytes += e->view.nbytes();
    ++report.tensors;
    if (o.progress) o.progress(report.bytes, mine);
  }
  for (std::size_t f = 0; f < fds.size(); ++f) {
    if (fds[f] >= 0 && ::fsync(fds[f]) != 0) {
      return io_error(plan.files[f].temp_path, "fsync", errno);
    }
  }
  return Status();
}

// Older temporaries of the plan's files (a save killed before this one).
void remove_stale_temporaries(const std::string& dir, const Plan& plan) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    for (const auto& f : plan.files) {
      const std::string base = f.final_path.substr(f.final_path.rfind('/') + 1) + ".tmp.";
      if (name.compare(0, base.size(), base) == 0) stale.push_back(dir + "/" + name);
    }
  }
  ::closedir(d);
  for (const auto& path : stale) ::unlink(path.c_str());
}

// Rank 0: the temporaries renamed into place, the index, the directory
// flushed; older temporaries of the same names (a save killed before)
// removed.
Status publish(const std::string& dir, const Plan& plan) {
  // A failure half way removes the files already renamed: no shard of an
  // unfinished save stays under a final name. The index comes last.
  std::size_t renamed = 0;
  auto undo = [&](const Status& s) {
    for (std::size_t i = 0; i < renamed; ++i) ::unlink(plan.files[i].final_path.c_str());
    return s;
  };
  for (const auto& f : plan.files) {
    if (::rename(f.temp_path.c_str(), f.final_path.c_str()) != 0) {
      return undo(io_error(f.final_path, "rename", errno));
    }
    ++renamed;
  }
  if (plan.files.size() > 1) {
    std::map<std::string, std::string> weight_map;
    for (const auto& [name, where] : plan.where) {
      const auto& path = plan.files[where.first].final_path;
      weight_map[name] = path.substr(path.rfind('/') + 1);
    }
    if (auto s = st::write_index(dir, plan.total, weight_map); !s.ok()) return undo(s);
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  remove_stale_temporaries(dir, plan);
  return Status();
}

void remove_temporaries(const Plan& plan) {
  for (const auto& f : plan.files) ::unlink(f.temp_path.c_str());
}

std::string random_nonce() {
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%08x%08x.%d", rd(), rd(), static_cast<int>(::getpid()));
  return buf;
}

}  // namespace

Result<CheckpointReport> save_sharded(const std::string& dir, const StateDict& local,
                                      const std::map<std::string, Placement>& placements,
                                      std::int64_t rank, std::int64_t world,
                                      const ShardedSaveOptions& options) {
  const std::string what = "save_sharded '" + dir + "' (rank " + std::to_string(rank) + ")";
  Report mine;
  mine.error = check_local(local, placements, rank, world, options);
  struct stat sb {};
  if (mine.error.empty() && (::stat(dir.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode))) {
    mine.error = "'" + dir + "' is not a directory";
  }
  if (rank == 0) mine.nonce = random_nonce();
  for (const auto& e : local.entries()) {
    if (e.is_tensor()) mine.tensors.push_back({e.name, {e.view.dtype(), e.view.shape()}});
  }
  // A rank that cannot take part still joins the exchange, so that no
  // other rank waits for it.
  auto texts = exchange(options, world, encode(mine));
  if (!mine.error.empty()) return Status(Errc::invalid_argument, what + ": " + mine.error);
  if (!texts.ok()) return texts.status().with_context(what);
  std::vector<Report> reports;
  for (std::size_t r = 0; r < texts->size(); ++r) {
    auto rep = decode((*texts)[r], static_cast<std::int64_t>(r));
    if (!rep.ok()) return rep.status().with_context(what);
    if (!rep->error.empty()) {
      return Status(Errc::invalid_argument,
                    what + ": rank " + std::to_string(r) + " cannot save: " + rep->error);
    }
    reports.push_back(std::move(rep).value());
  }
  auto plan = make_plan(dir, reports, placements, options);
  if (!plan.ok()) return plan.status().with_context(what);

  CheckpointReport report;
  report.files = plan->files.size();
  const Status wrote = write_part(*plan, local, placements, rank, options, report);
  // The barrier: every rank's writes are flushed (or why not).
  auto outcomes = exchange(options, world, wrote.ok() ? "" : wrote.to_string());
  Status failed = wrote.with_context(what);
  if (failed.ok() && !outcomes.ok()) {
    failed = outcomes.status().with_context(what + ": at the barrier after the writes");
  }
  for (std::size_t r = 0; failed.ok() && outcomes.ok() && r < outcomes->size(); ++r) {
    if (!(*outcomes)[r].empty()) {
      failed = Status(Errc::io_error,
                      what + ": rank " + std::to_string(r) + " failed: " + (*outcomes)[r]);
    }
  }
  if (!failed.ok()) {
    remove_temporaries(*plan);
    return failed;
  }
  Status placed;
  if (rank == 0) {
    placed = publish(dir, *plan);
    if (!placed.ok()) remove_temporaries(*plan);
  }
  // Every rank returns once the files are in place (or knows why not).
  auto last = exchange(options, world, placed.ok() ? "" : placed.to_string());
  if (!placed.ok()) return placed.with_context(what);
  if (!last.ok()) return last.status().with_context(what);
  if (!last->front().empty()) {
    return Status(Errc::io_error,
                  what + ": rank 0 could not put the files in place: " + last->front());
  }
  return report;
}

}  // namespace meshstore
