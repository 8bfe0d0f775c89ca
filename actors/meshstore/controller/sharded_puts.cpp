// The controller's sharded puts: checking each shard against the pending
// shards of its key, the state-dict groups whose keys commit together, and
// what a group still waits for.
#include <algorithm>
#include <cstdio>
#include <iterator>

#include "meshstore/controller/controller_state.hpp"

namespace meshstore::controller {
namespace {

std::string hex64(std::uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

// Elements the distinct boxes of `shards` cover, counting only boxes that
// have all their replicas (identical boxes count once; the boxes are known
// not to overlap otherwise).
std::int64_t covered_elements(const std::vector<wire::ShardRecord>& shards) {
  std::int64_t n = 0;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    bool seen = false;
    std::uint32_t copies = 0;
    for (std::size_t j = 0; j < shards.size(); ++j) {
      if (shards[j].slice != shards[i].slice) continue;
      if (j < i) seen = true;
      ++copies;
    }
    if (!seen && copies >= shards[i].replicas) n += shards[i].slice.numel();
  }
  return n;
}

// Checks one shard of a sharded put against the pending shards of its key.
Status validate_shard(const ControllerState& st,
                      const std::map<std::string, wire::KeyRecord>& pending,
                      const wire::KeyRecord& r) {
  const std::string ctx = "put shard of '" + r.key + "'";
  if (r.key.empty()) return Status(Errc::invalid_argument, "put shard: empty key");
  if (r.shards.size() != 1) {
    return Status(Errc::invalid_argument, ctx + ": " + std::to_string(r.shards.size()) +
                                              " shards in one record, expected 1");
  }
  const auto& s = r.shards.front();
  if (st.volumes.count(s.volume_id) == 0) return unknown_volume(st, ctx, s.volume_id);
  if (s.slice.global_shape() != r.shape) {
    return Status(Errc::shape_mismatch, ctx + ": shard " + s.slice.to_string() +
                                            " is not in global shape " + shape_to_string(r.shape));
  }
  if (s.nbytes != static_cast<std::uint64_t>(s.slice.numel()) * dtype_size(r.dtype)) {
    return Status(Errc::invalid_argument,
                  ctx + ": shard " + s.slice.to_string() + " holds " + std::to_string(s.nbytes) +
                      " bytes, expected " + std::to_string(s.slice.numel() * dtype_size(r.dtype)));
  }
  auto it = pending.find(r.key);
  if (it == pending.end()) return Status();
  const auto& p = it->second;
  if (p.group != r.group) {
    auto part = [](const std::string& g) {
      return g.empty() ? std::string("on its own") : "as part of state dict '" + g + "'";
    };
    return Status(Errc::invalid_argument, ctx + ": it is being put " + part(p.group) +
                                              ", this shard comes " + part(r.group));
  }
  if (p.shape != r.shape) {
    return Status(Errc::shape_mismatch, "ranks disagree on the global shape of '" + r.key +
                                            "': " + shape_to_string(p.shape) + " and " +
                                            shape_to_string(r.shape));
  }
  if (p.dtype != r.dtype) {
    return Status(Errc::dtype_mismatch, "ranks disagree on the dtype of '" + r.key +
                                            "': " + std::string(dtype_name(p.dtype)) + " and " +
                                            std::string(dtype_name(r.dtype)));
  }
  std::uint32_t copies = 0;
  for (const auto& other : p.shards) {
    if (other.slice == s.slice) {  // a replica
      if (other.replicas != s.replicas) {
        return Status(Errc::invalid_argument, ctx + ": ranks disagree on the replicas of shard " +
                                                  s.slice.to_string() + ": " +
                                                  std::to_string(other.replicas) + " and " +
                                                  std::to_string(s.replicas));
      }
      if (other.checksum != 0 && s.checksum != 0 && other.checksum != s.checksum) {
        return Status(Errc::invalid_argument,
                      ctx + ": replicas of shard " + s.slice.to_string() +
                          " hold different bytes (checksums " + hex64(other.checksum) + " and " +
                          hex64(s.checksum) +
                          "); every rank holding a replica must put the same "
                          "data");
      }
      ++copies;
      continue;
    }
    if (auto both = other.slice.intersect(s.slice); both && !both->empty()) {
      return Status(Errc::invalid_argument, ctx + ": shard " + s.slice.to_string() +
                                                " overlaps shard " + other.slice.to_string() +
                                                " without being the same box");
    }
  }
  if (copies >= s.replicas) {
    return Status(Errc::invalid_argument,
                  ctx + ": shard " + s.slice.to_string() + " is in already (" +
                      std::to_string(copies) + " of " + std::to_string(s.replicas) +
                      " replicas); the next version's shards must wait until this one is "
                      "complete");
  }
  return Status();
}

// Adds a validated shard to its key's pending set.
void add_shard(std::map<std::string, wire::KeyRecord>& pending, const wire::KeyRecord& r) {
  auto& p = pending[r.key];
  if (p.shards.empty()) {
    p = r;
  } else {
    p.shards.push_back(r.shards.front());
  }
}

// Checks a put_shards call's state dict (group): every rank names the same
// keys and computed the same layout, and every record belongs to it.
Status validate_group(const ControllerState& st, const std::vector<wire::KeyRecord>& records,
                      const std::string& group, const std::vector<std::string>& members,
                      std::uint64_t layout) {
  if (group.empty()) {
    for (const auto& r : records) {
      if (!r.group.empty()) {
        return Status(Errc::invalid_argument, "put shard of '" + r.key + "': record names group '" +
                                                  r.group + "' outside a state dict put");
      }
    }
    return Status();
  }
  const std::string ctx = "put_sharded_state_dict '" + group + "'";
  if (!std::is_sorted(members.begin(), members.end()) ||
      std::adjacent_find(members.begin(), members.end()) != members.end() ||
      !std::binary_search(members.begin(), members.end(), group)) {
    return Status(Errc::invalid_argument,
                  ctx + ": its keys must be sorted, unique and include the manifest");
  }
  for (const auto& r : records) {
    if (r.group != group || !std::binary_search(members.begin(), members.end(), r.key)) {
      return Status(Errc::invalid_argument,
                    ctx + ": '" + r.key + "' is not one of the state dict's keys");
    }
  }
  auto g = st.groups.find(group);
  if (g == st.groups.end()) return Status();
  if (g->second.members != members) {
    std::vector<std::string> only_before, only_now;
    std::set_difference(g->second.members.begin(), g->second.members.end(), members.begin(),
                        members.end(), std::back_inserter(only_before));
    std::set_difference(members.begin(), members.end(), g->second.members.begin(),
                        g->second.members.end(), std::back_inserter(only_now));
    auto first = [](const std::vector<std::string>& v) {
      return v.empty() ? std::string("none")
                       : "'" + v.front() + "'" +
                             (v.size() > 1 ? " and " + std::to_string(v.size() - 1) + " more" : "");
    };
    return Status(Errc::invalid_argument, ctx +
                                              ": ranks disagree on its entries: keys only earlier "
                                              "ranks put: " +
                                              first(only_before) +
                                              "; keys only this rank puts: " + first(only_now));
  }
  if (g->second.layout != layout) {
    return Status(Errc::invalid_argument,
                  ctx +
                      ": ranks disagree on its layout (the dtype, global shape or packing of "
                      "an entry, or a value's size)");
  }
  return Status();
}

// True when `key`'s pending shards cover its tensor with all replicas.
bool pending_complete(const ControllerState& st, const std::string& key) {
  auto it = st.pending.find(key);
  return it != st.pending.end() &&
         covered_elements(it->second.shards) == shape_numel(it->second.shape);
}

// What the sharded state dict `group` being put waits for, as seen from its
// key `key`: "it belongs to sharded state dict 'P', which commits once all
// its 5 keys are complete; 3 are; waiting for 'P/a', 'P/b'".
std::string group_progress(const ControllerState& st, const std::string& group,
                           const std::string& key) {
  const auto& members = st.groups.at(group).members;
  std::vector<std::string> waiting;
  for (const auto& m : members) {
    if (!pending_complete(st, m)) waiting.push_back(m);
  }
  std::string out =
      (key == group ? "it is sharded state dict '" : "it belongs to sharded state dict '") + group +
      "', which commits once all its " + std::to_string(members.size()) + " keys are complete; " +
      std::to_string(members.size() - waiting.size()) + " are; waiting for ";
  for (std::size_t i = 0; i < waiting.size() && i < 4; ++i)
    out += (i ? ", '" : "'") + waiting[i] + "'";
  if (waiting.size() > 4) out += " and " + std::to_string(waiting.size() - 4) + " more";
  return out;
}

// Drops `key`'s pending shards (a sharded put in progress), collecting
// their objects; false when it has none.
bool drop_pending(ControllerState& st, const std::string& key,
                  std::map<std::string, std::vector<std::uint64_t>>& objects) {
  auto p = st.pending.find(key);
  if (p == st.pending.end()) return false;
  const std::string group = p->second.group;
  collect(p->second, objects);
  st.pending.erase(p);
  // A sharded state dict's keys commit together or not at all.
  if (auto g = st.groups.find(group); g != st.groups.end()) {
    const auto members = std::move(g->second.members);
    st.groups.erase(g);
    for (const auto& m : members) drop_pending(st, m, objects);
  }
  return true;
}

}  // namespace meshstore::controller
