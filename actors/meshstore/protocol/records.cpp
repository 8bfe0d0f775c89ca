// The store's records to and from their Protobuf twins.

#include "meshstore/protocol/records.hpp"

#include <google/protobuf/arena.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <iterator>

#include "meshstore/protocol/records.pb.h"
#include "meshstore/transports/internal/region_ref_proto.hpp"

namespace meshstore::wire {
namespace {

Status malformed(const char* what, const std::string& why = "not a valid encoding") {
  return Status(Errc::protocol_error, std::string("decode ") + what + ": " + why);
}

template <class Proto>
Status parse(const std::string& bytes, Proto& p, const char* what) {
  if (!p.ParseFromString(bytes)) return malformed(what);
  return Status();
}

// Deterministic, as RegionRef's encode: the same record always encodes to
// the same bytes (a ReadLease's regions hold maps, whose order Protobuf
// leaves open otherwise; found by fuzz/wire_fuzz.cpp's round trip).
template <class Proto>
std::string serialize(const Proto& p) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    p.SerializeToCodedStream(&coded);
  }
  return out;
}

void to_proto(const TensorSlice& s, pb::Slice* p) {
  for (auto v : s.global_shape()) p->add_global_shape(v);
  for (auto v : s.offsets()) p->add_offsets(v);
  for (auto v : s.local_shape()) p->add_local_shape(v);
}

Status from_proto(const pb::Slice& p, TensorSlice& s) {
  auto r = TensorSlice::make(Shape(p.global_shape().begin(), p.global_shape().end()),
                             Shape(p.offsets().begin(), p.offsets().end()),
                             Shape(p.local_shape().begin(), p.local_shape().end()));
  if (!r.ok()) return malformed("Slice", r.status().message());
  s = std::move(r).value();
  return Status();
}

void to_proto(const KeyRecord& x, pb::KeyRecord* p) {
  p->set_key(x.key);
  p->set_kind(x.kind == ObjectKind::object ? pb::OBJECT : pb::TENSOR);
  p->set_dtype(static_cast<std::uint32_t>(x.dtype));
  for (auto d : x.shape) p->add_shape(d);
  p->set_version(x.version);
  p->set_lost_on(x.lost_on);
  p->set_maybe_lost_on(x.maybe_lost_on);
  p->set_group(x.group);
  p->set_pending(x.pending);
  p->set_object_format(static_cast<std::uint32_t>(x.object_format));
  p->set_has_expect_version(x.expect_version.has_value());
  p->set_expect_version(x.expect_version.value_or(0));
  p->set_points_to(x.points_to);
  p->set_group_commit(x.group_commit);
  p->set_group_size(x.group_size);
  p->set_copies(x.copies);
  for (const auto& s : x.shards) {
    auto* ps = p->add_shards();
    to_proto(s.slice, ps->mutable_slice());
    ps->set_volume_id(s.volume_id);
    ps->set_object_id(s.object_id);
    ps->set_nbytes(s.nbytes);
    ps->set_replicas(s.replicas);
    ps->set_checksum(s.checksum);
    ps->set_place(s.place);
  }
}

Status from_proto(const pb::KeyRecord& p, KeyRecord& x) {
  if (!is_valid_dtype(p.dtype())) {
    return malformed("KeyRecord", "unknown dtype value " + std::to_string(p.dtype()) +
                                      " for key '" + p.key() + "'");
  }
  if (p.object_format() > static_cast<std::uint32_t>(ObjectFormat::pickle)) {
    return malformed("KeyRecord", "unknown object format " + std::to_string(p.object_format()) +
                                      " for key '" + p.key() + "'");
  }
  x.key = p.key();
  x.object_format = static_cast<ObjectFormat>(p.object_format());
  x.expect_version =
      p.has_expect_version() ? std::optional<std::uint64_t>(p.expect_version()) : std::nullopt;
  x.kind = p.kind() == pb::OBJECT ? ObjectKind::object : ObjectKind::tensor;
  x.dtype = static_cast<DType>(p.dtype());
  x.shape.assign(p.shape().begin(), p.shape().end());
  x.version = p.version();
  x.lost_on = p.lost_on();
  x.maybe_lost_on = p.maybe_lost_on();
  x.group = p.group();
  x.pending = p.pending();
  x.points_to = p.points_to();
  x.group_commit = p.group_commit();
  x.group_size = p.group_size();
  x.copies = p.copies();
  x.shards.clear();
  for (const auto& ps : p.shards()) {
    ShardRecord s;
    MESHSTORE_RETURN_IF_ERROR(from_proto(ps.slice(), s.slice));
    s.volume_id = ps.volume_id();
    s.object_id = ps.object_id();
    s.nbytes = ps.nbytes();
    s.replicas = ps.replicas() == 0 ? 1 : ps.replicas();
    s.checksum = ps.checksum();
    s.place = ps.place();
    x.shards.push_back(std::move(s));
  }
  return Status();
}

}  // namespace

bool KeyRecord::copied() const noexcept {
  if (shards.size() < 2) return false;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    if (!shards[i].slice.is_full()) return false;
    for (std::size_t j = 0; j < i; ++j) {
      if (shards[j].volume_id == shards[i].volume_id) return false;
    }
  }
  return true;
}

std::uint64_t KeyRecord::nbytes() const noexcept {
  if (copied()) return shards.front().nbytes;
  std::uint64_t n = 0;
  for (const auto& s : shards) n += s.nbytes;
  return n;
}

std::string encode(const KeyRecord& x) {
  pb::KeyRecord p;
  to_proto(x, &p);
  return serialize(p);
}

Status decode(const std::string& bytes, KeyRecord& x) {
  pb::KeyRecord p;
  MESHSTORE_RETURN_IF_ERROR(parse(bytes, p, "KeyRecord"));
  return from_proto(p, x);
}

namespace {

// A KeyRecordList of `n` records, which `add` puts into it. A list's
// messages are many small allocations: on an arena they go in one sweep (a
// volume's records for a rebuild are a million of them).
template <class Add>
std::string encode_list(std::size_t n, Add add) {
  google::protobuf::Arena arena;
  auto* p = google::protobuf::Arena::CreateMessage<pb::KeyRecordList>(&arena);
  p->mutable_records()->Reserve(static_cast<int>(n));
  add(p);
  return serialize(*p);
}

}  // namespace

std::string encode(const std::vector<KeyRecord>& x) {
  return encode_list(x.size(), [&](pb::KeyRecordList* p) {
    for (const auto& r : x) to_proto(r, p->add_records());
  });
}

Status decode(const std::string& bytes, std::vector<KeyRecord>& x) {
  google::protobuf::Arena arena;
  auto* p = google::protobuf::Arena::CreateMessage<pb::KeyRecordList>(&arena);
  MESHSTORE_RETURN_IF_ERROR(parse(bytes, *p, "KeyRecordList"));
  x.clear();
  x.resize(static_cast<std::size_t>(p->records_size()));
  for (int i = 0; i < p->records_size(); ++i) {
    MESHSTORE_RETURN_IF_ERROR(from_proto(p->records(i), x[static_cast<std::size_t>(i)]));
  }
  return Status();
}

std::string encode(const HeldRecords& x) {
  return encode_list(x.size(), [&](pb::KeyRecordList* p) {
    for (const auto& r : x.kept) to_proto(*r, p->add_records());
    for (const auto& r : x.records) to_proto(r, p->add_records());
  });
}

Status decode(const std::string& bytes, HeldRecords& x) {
  x.kept.clear();
  return decode(bytes, x.records);
}

std::vector<KeyRecord> HeldRecords::take() && {
  if (kept.empty()) return std::move(records);
  std::vector<KeyRecord> out;
  out.reserve(size());
  for (const auto& r : kept) out.push_back(*r);
  std::move(records.begin(), records.end(), std::back_inserter(out));
  kept.clear();
  records.clear();
  return out;
}

std::string encode(const StageRequest& x) {
  pb::StageRequest p;
  p.set_key(x.key);
  p.set_nbytes(x.nbytes);
  p.set_has_data(x.has_data);
  if (x.has_data) p.set_data(x.data);
  p.set_device_plus_one(x.device + 1);
  return serialize(p);
}

Status decode(const std::string& bytes, StageRequest& x) {
  pb::StageRequest p;
  MESHSTORE_RETURN_IF_ERROR(parse(bytes, p, "StageRequest"));
  x.key = p.key();
  x.nbytes = p.nbytes();
  x.has_data = p.has_data();
  x.data = p.data();
  x.device = p.device_plus_one() - 1;
  if (x.has_data && x.data.size() != x.nbytes) {
    return malformed("StageRequest", "inline data of " + std::to_string(x.data.size()) +
                                         " bytes for " + std::to_string(x.nbytes) + " announced");
  }
  return Status();
}

std::string encode(const ReadLease& x) {
  pb::ReadLease p;
  p.set_lease_id(x.lease_id);
  for (const auto& r : x.regions) to_proto(r, p.add_regions());
  for (const auto& d : x.data) p.add_data(d);
  p.set_revocable(x.revocable);
  return serialize(p);
}

Status decode(const std::string& bytes, ReadLease& x) {
  pb::ReadLease p;
  MESHSTORE_RETURN_IF_ERROR(parse(bytes, p, "ReadLease"));
  x.lease_id = p.lease_id();
  x.regions.clear();
  for (const auto& r : p.regions()) x.regions.push_back(from_proto(r));
  x.data.assign(p.data().begin(), p.data().end());
  x.revocable = p.revocable();
  return Status();
}

std::string encode(const RemoveReply& x) {
  pb::RemoveReply p;
  p.set_removed(x.removed);
  for (const auto& k : x.missing) p.add_missing(k);
  return serialize(p);
}

Status decode(const std::string& bytes, RemoveReply& x) {
  pb::RemoveReply p;
  MESHSTORE_RETURN_IF_ERROR(parse(bytes, p, "RemoveReply"));
  x.removed = p.removed();
  x.missing.assign(p.missing().begin(), p.missing().end());
  return Status();
}

std::string encode(const VolumeInfo& x) {
  pb::VolumeInfo p;
  p.set_volume_id(x.volume_id);
  p.set_host(x.host);
  p.set_capacity_bytes(x.capacity_bytes);
  for (const auto& t : x.transports) p.add_transports(t);
  p.set_local_rank(x.local_rank);
  p.set_control(x.control);
  return serialize(p);
}

Status decode(const std::string& bytes, VolumeInfo& x) {
  pb::VolumeInfo p;
  MESHSTORE_RETURN_IF_ERROR(parse(bytes, p, "VolumeInfo"));
  x.volume_id = p.volume_id();
  x.host = p.host();
  x.capacity_bytes = p.capacity_bytes();
  x.transports.assign(p.transports().begin(), p.transports().end());
  x.local_rank = p.local_rank();
  x.control = p.control();
  return Status();
}

std::string encode(const VolumeStat& x) {
  pb::VolumeStat p;
  p.set_volume_id(x.volume_id);
  p.set_bytes_held(x.bytes_held);
  p.set_capacity_bytes(x.capacity_bytes);
  p.set_objects(x.objects);
  p.set_staged(x.staged);
  p.set_leases(x.leases);
  p.set_evictions(x.evictions);
  p.set_evicted_bytes(x.evicted_bytes);
  return serialize(p);
}

Status decode(const std::string& bytes, VolumeStat& x) {
  pb::VolumeStat p;
  MESHSTORE_RETURN_IF_ERROR(parse(bytes, p, "VolumeStat"));
  x.volume_id = p.volume_id();
  x.bytes_held = p.bytes_held();
  x.capacity_bytes = p.capacity_bytes();
  x.objects = p.objects();
  x.staged = p.staged();
  x.leases = p.leases();
  x.evictions = p.evictions();
  x.evicted_bytes = p.evicted_bytes();
  return Status();
}

std::string encode(const ClientInfo& x) {
  pb::ClientInfo p;
  p.set_rank(x.rank);
  p.set_local_rank(x.local_rank);
  p.set_host(x.host);
  return serialize(p);
}

Status decode(const std::string& bytes, ClientInfo& x) {
  pb::ClientInfo p;
  MESHSTORE_RETURN_IF_ERROR(parse(bytes, p, "ClientInfo"));
  x.rank = p.rank();
  x.local_rank = p.local_rank();
  x.host = p.host();
  return Status();
}

std::string maybe_lost_note(const KeyRecord& r) {
  if (r.maybe_lost_on.empty()) return {};
  return "; it may have been on volume '" + r.maybe_lost_on +
         "', which did not come back after the controller's failover";
}

}  // namespace meshstore::wire
