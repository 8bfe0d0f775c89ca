// libFuzzer target: every decoder a peer's bytes reach on the control plane
// (the store's wire records and their list, RegionRef), the fast path's ring messages
// (fast_get: get, put and commit requests a volume decodes, replies a client
// decodes) and the
// state-dict manifest and value codecs (stored bytes a reader decodes). The first input byte picks
// the decoder; the rest are its bytes. Whatever the bytes, a decoder must
// fail cleanly or succeed, and what it accepts must encode and decode again
// to the same encoding (no undefined behaviour: built with ASan and UBSan).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "meshstore/protocol/fast_get.hpp"
#include "meshstore/protocol/records.hpp"
#include "meshstore/state_dict.hpp"
#include "meshstore/state_dicts/manifest.hpp"
#include "meshstore/transports/wire/region_ref.hpp"

namespace {

using namespace meshstore;

template <class T>
void round_trip(const std::string& bytes) {
  T x;
  if (!wire::decode(bytes, x).ok()) return;
  const std::string again = wire::encode(x);
  T y;
  if (!wire::decode(again, y).ok()) std::abort();  // accepted once, refused after encoding
  if (wire::encode(y) != again) std::abort();      // the encoding is not stable
}

void manifest(const std::string& bytes) {
  auto m = state_dicts::decode_manifest(bytes, "k");
  if (!m.ok()) return;
  const std::string again = state_dicts::encode_manifest(*m);
  auto n = state_dicts::decode_manifest(again, "k");
  if (!n.ok()) std::abort();
  if (state_dicts::encode_manifest(*n) != again) std::abort();
}

void value(const std::string& bytes) {
  auto v = Value::decode(bytes);
  if (!v.ok()) return;
  auto w = Value::decode(v->encode());
  if (!w.ok() || *w != *v) std::abort();
}

// A ring message, read as a request and as a reply: each accepted one
// encodes back to what decodes to the same.
void fast_get_message(const std::string& bytes) {
  namespace fg = protocol::fast_get;
  std::vector<std::byte> in(bytes.size());
  if (!bytes.empty()) std::memcpy(in.data(), bytes.data(), bytes.size());
  if (auto req = fg::decode_request(in); req.ok()) {
    if (fg::encode(*req) != in) std::abort();  // every field of a request is kept
  }
  if (auto rep = fg::decode_reply(in); rep.ok()) {
    auto again = fg::decode_reply(fg::encode(rep->status, rep->bytes.data(), rep->bytes.size()));
    if (!again.ok() || again->status != rep->status || again->bytes != rep->bytes) std::abort();
  }
  // As a commit request (every put over a channel) and its reply.
  if (auto commit = fg::decode_commit(in); commit.ok()) {
    std::vector<std::byte> out;
    fg::encode_into(*commit, out);
    auto again = fg::decode_commit(out);
    if (!again.ok() || again->prefixes != commit->prefixes ||
        again->records.size() != commit->records.size() || again->release != commit->release ||
        again->stage != commit->stage || again->inlined != commit->inlined) {
      std::abort();
    }
    for (std::size_t i = 0; i < commit->records.size(); ++i) {
      if (wire::encode(again->records[i]) != wire::encode(commit->records[i])) std::abort();
    }
  }
  bool refused = false;
  const std::size_t records = (in.size() / 8) % 8;
  const std::size_t stages = in.size() % 3;
  const std::size_t inlined = records == 0 ? 0 : (in.size() / 3) % (records + 1);
  if (auto done = fg::decode_commit_reply(in, records, inlined, stages, &refused); done.ok()) {
    auto again =
        fg::decode_commit_reply(fg::encode_commit_done(*done), records, inlined, stages, &refused);
    if (!again.ok() || again->versions != done->versions ||
        again->staged.size() != done->staged.size() ||
        again->placed.size() != done->placed.size()) {
      std::abort();
    }
    for (std::size_t i = 0; i < done->placed.size(); ++i) {
      if (again->placed[i].object_id != done->placed[i].object_id ||
          again->placed[i].place != done->placed[i].place) {
        std::abort();
      }
    }
    for (std::size_t i = 0; i < done->staged.size(); ++i) {
      if (again->staged[i].region_id != done->staged[i].region_id ||
          again->staged[i].nbytes != done->staged[i].nbytes ||
          again->staged[i].described != done->staged[i].described) {
        std::abort();
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 12) {
    case 0:
      round_trip<wire::KeyRecord>(bytes);
      break;
    case 1:
      round_trip<wire::StageRequest>(bytes);
      break;
    case 2:
      round_trip<wire::ReadLease>(bytes);
      break;
    case 3:
      round_trip<wire::RemoveReply>(bytes);
      break;
    case 4:
      round_trip<wire::VolumeInfo>(bytes);
      break;
    case 5:
      round_trip<wire::VolumeStat>(bytes);
      break;
    case 6:
      round_trip<wire::ClientInfo>(bytes);
      break;
    case 7:
      round_trip<wire::RegionRef>(bytes);
      break;
    case 8:
      manifest(bytes);
      break;
    case 9:
      value(bytes);
      break;
    case 11:
      round_trip<std::vector<wire::KeyRecord>>(bytes);
      break;
    default:
      fast_get_message(bytes);
      break;
  }
  return 0;
}
