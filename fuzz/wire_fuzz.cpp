// libFuzzer target: every decoder a peer's bytes reach on the control plane
// (the store's wire records, RegionRef) and the state-dict manifest and
// value codecs (stored bytes a reader decodes). The first input byte picks
// the decoder; the rest are its bytes. Whatever the bytes, a decoder must
// fail cleanly or succeed, and what it accepts must encode and decode again
// to the same encoding (no undefined behaviour: built with ASan and UBSan).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "meshstore/state_dict.hpp"
#include "meshstore/state_dict/manifest.hpp"
#include "meshstore/transports/wire/region_ref.hpp"
#include "meshstore/wire/records.hpp"

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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 10) {
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
    default:
      value(bytes);
      break;
  }
  return 0;
}
