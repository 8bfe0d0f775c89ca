// Writes wire_fuzz's seed corpus into a directory: one valid encoding of
// each decoder's input, prefixed by the byte that picks that decoder
// (wire_fuzz.cpp). Run by tests/integration/run_wire_fuzz.sh before the
// fuzzer, so the seeds always match the current encodings.
//   wire_fuzz_seeds DIR
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "meshstore/protocol/fast_get.hpp"
#include "meshstore/protocol/records.hpp"
#include "meshstore/state_dict.hpp"
#include "meshstore/state_dicts/manifest.hpp"
#include "meshstore/transports/wire/region_ref.hpp"

using namespace meshstore;

namespace {

// A put of a 2 x 2 float32 tensor whose bytes come inline.
std::string fast_put_request() {
  const float v[4] = {1, 2, 3, 4};
  wire::KeyRecord r;
  r.key = "model.w";
  r.dtype = DType::float32;
  r.shape = {2, 2};
  r.shards.push_back(wire::ShardRecord{TensorSlice::full(r.shape), "v", 0, sizeof(v)});
  protocol::fast_get::CommitRequest req;
  req.records = {r};
  req.inlined = {std::string_view(reinterpret_cast<const char*>(v), sizeof(v))};
  std::vector<std::byte> out;
  protocol::fast_get::encode_into(req, out);
  return std::string(reinterpret_cast<const char*>(out.data()), out.size());
}

// What a volume answers that put: a version, the object staged for it.
std::string fast_put_reply() {
  protocol::fast_get::CommitDone d;
  d.versions = {12};
  d.placed = {{34, "meshstore.1-2.3;64"}};
  auto out = protocol::fast_get::encode_commit_done(d);
  return std::string(reinterpret_cast<const char*>(out.data()), out.size());
}

// What a volume answers that commit: two versions, two objects staged.
std::string fast_commit_reply() {
  protocol::fast_get::CommitDone d;
  d.versions = {7, 8};
  for (std::uint64_t i = 0; i < 2; ++i) {
    wire::RegionRef r;
    r.region_id = 20 + i;
    r.nbytes = 64;
    r.described.emplace("shm", "meshstore.1-2.3;" + std::to_string(64 * i));
    d.staged.push_back(std::move(r));
  }
  auto out = protocol::fast_get::encode_commit_done(d);
  return std::string(reinterpret_cast<const char*>(out.data()), out.size());
}

// A commit of a manifest and a bucket staged on volume "v" under "sd",
// giving two objects back and staging the next put's two.
std::string fast_commit_request() {
  protocol::fast_get::CommitRequest req;
  for (std::uint64_t i = 0; i < 2; ++i) {
    wire::KeyRecord r;
    r.key = i == 0 ? "sd" : "sd#packed";
    r.dtype = DType::uint8;
    r.shape = {64};
    r.group = "sd";
    r.shards.push_back(
        wire::ShardRecord{TensorSlice::full(r.shape), "v", 10 + i, 64, 1, 0, "meshstore.1-2.3;64"});
    req.records.push_back(std::move(r));
  }
  req.prefixes = {"sd"};
  req.release = {8, 9};
  req.stage = {{"sd", 64}, {"sd#packed", 64}};
  std::vector<std::byte> out;
  protocol::fast_get::encode_into(req, out);
  return std::string(reinterpret_cast<const char*>(out.data()), out.size());
}

bool write(const std::string& dir, int which, const std::string& name, const std::string& bytes) {
  std::ofstream f(dir + "/" + name, std::ios::binary);
  f.put(static_cast<char>(which));
  f << bytes;
  return static_cast<bool>(f);
}

std::string as_string(const std::vector<std::byte>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: wire_fuzz_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  wire::RegionRef region;
  region.region_id = 7;
  region.nbytes = 4096;
  region.described["shm"] = "meshstore.123.0";
  region.described["tcp"] = std::string("\x01\x02secret", 8);
  wire::KeyRecord rec;
  rec.key = "model.layers.0.w";
  rec.dtype = DType::bfloat16;
  rec.shape = {4, 8};
  rec.version = 12;
  rec.group = "model";
  rec.expect_version = 0;
  rec.shards.push_back(
      wire::ShardRecord{TensorSlice::make({4, 8}, {0, 0}, {2, 8}).value(), "volume-0", 3, 32});
  rec.shards.push_back(
      wire::ShardRecord{TensorSlice::make({4, 8}, {2, 0}, {2, 8}).value(), "volume-1", 4, 32});
  wire::KeyRecord object;
  object.key = "cfg";
  object.kind = wire::ObjectKind::object;
  object.object_format = ObjectFormat::pickle;
  object.shape = {5};
  object.version = 3;
  object.shards.push_back(wire::ShardRecord{TensorSlice::full({5}), "volume-0", 9, 5});
  wire::StageRequest stage;
  stage.key = "k";
  stage.nbytes = 5;
  stage.has_data = true;
  stage.data = "hello";
  wire::ReadLease lease;
  lease.lease_id = 4;
  lease.regions.push_back(region);
  lease.data.push_back("inline bytes");
  wire::RemoveReply removed{2, {"a", "b"}};
  wire::VolumeInfo volume{"volume-0", "host-a", 1 << 20, {"shm", "tcp", "rpc"}, 0, ""};
  wire::VolumeStat stat{"volume-0", 100, 1 << 20, 3, 1, 2};
  wire::ClientInfo client{1, 0, "host-a"};
  state_dicts::Manifest m;
  state_dicts::lay_out(m, "model.embed.weight", DType::bfloat16, {16, 8}, 64 << 10, 0);
  state_dicts::lay_out(m, "model.norm.weight", DType::float32, {8}, 64 << 10, 0);
  state_dicts::lay_out(m, "model.big", DType::float32, {1 << 16}, 64 << 10, 0);
  state_dicts::lay_out_value(m, "step", Value::int64(7));
  bool ok =
      write(dir, 0, "key_record", wire::encode(rec)) &&
      write(dir, 0, "object_record", wire::encode(object)) &&
      write(dir, 1, "stage_request", wire::encode(stage)) &&
      write(dir, 2, "read_lease", wire::encode(lease)) &&
      write(dir, 3, "remove_reply", wire::encode(removed)) &&
      write(dir, 4, "volume_info", wire::encode(volume)) &&
      write(dir, 5, "volume_stat", wire::encode(stat)) &&
      write(dir, 6, "client_info", wire::encode(client)) &&
      write(dir, 7, "region_ref", wire::encode(region)) &&
      write(dir, 8, "manifest", state_dicts::encode_manifest(m)) &&
      write(dir, 9, "value_string", Value::string("lr=0.1").encode()) &&
      write(dir, 9, "value_float", Value::float64(0.5).encode()) &&
      write(dir, 10, "fast_get_request",
            as_string(protocol::fast_get::encode(protocol::fast_get::Request{7, "model.step"}))) &&
      write(
          dir, 10, "fast_get_reply",
          as_string(protocol::fast_get::encode(protocol::fast_get::ReplyStatus::ok, "abcd", 4))) &&
      write(dir, 10, "fast_put_request", fast_put_request()) &&
      write(dir, 10, "fast_put_reply", fast_put_reply()) &&
      write(dir, 10, "fast_put_error",
            as_string(protocol::fast_get::encode_error(Status(Errc::out_of_capacity, "full")))) &&
      write(dir, 10, "fast_commit_request", fast_commit_request()) &&
      write(dir, 10, "fast_commit_reply", fast_commit_reply()) &&
      write(dir, 11, "key_record_list", wire::encode(std::vector<wire::KeyRecord>{rec, object}));
  if (!ok) {
    std::fprintf(stderr, "wire_fuzz_seeds: cannot write into %s\n", dir.c_str());
    return 1;
  }
  return 0;
}
