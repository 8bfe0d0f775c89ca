// DescriptionWriter and DescriptionReader (region_description.hpp): one
// transport's description of a region, written and checked field by field.
#include "meshstore/transports/region_description.hpp"

#include <cstring>

namespace meshstore::transports {

DescriptionWriter& DescriptionWriter::u64(std::uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out_.append(b, 8);
  return *this;
}

DescriptionWriter& DescriptionWriter::bytes(std::string_view s) {
  u64(s.size());
  out_.append(s.data(), s.size());
  return *this;
}

DescriptionReader::DescriptionReader(const wire::RegionRef& ref, std::string_view transport,
                                     std::string op)
    : ref_(ref), transport_(transport), op_(std::move(op)) {
  if (auto it = ref.described.find(transport_); it != ref.described.end()) bytes_ = &it->second;
}

Status DescriptionReader::malformed(const std::string& why) const {
  return Status(Errc::protocol_error, op_ + " of region " + std::to_string(ref_.region_id) +
                                          ": the volume's " + transport_ + " description " + why);
}

Result<std::uint64_t> DescriptionReader::u64() {
  if (bytes_ == nullptr) return malformed("is missing");
  if (bytes_->size() - at_ < 8) {
    return malformed("is cut short (" + std::to_string(bytes_->size()) + " bytes)");
  }
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) {
    v |= std::uint64_t{static_cast<unsigned char>((*bytes_)[at_ + i])} << (8 * i);
  }
  at_ += 8;
  return v;
}

Result<std::string> DescriptionReader::bytes() {
  auto n = u64();
  if (!n.ok()) return n.status();
  if (*n > bytes_->size() - at_) {
    return malformed("names a field of " + std::to_string(*n) + " bytes past its end");
  }
  std::string out = bytes_->substr(at_, *n);
  at_ += *n;
  return out;
}

Status DescriptionReader::finish() const {
  if (bytes_ == nullptr) return malformed("is missing");
  if (at_ != bytes_->size()) {
    return malformed("has " + std::to_string(bytes_->size() - at_) + " bytes too many");
  }
  return Status();
}

}  // namespace meshstore::transports
