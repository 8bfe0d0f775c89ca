#pragma once

// How a transport describes a region to its clients: the bytes its server
// puts in RegionRef::described under its own name (TransportServer::describe)
// and its client reads back. Each transport owns its format; these helpers
// write and read it field by field (64-bit integers little-endian, byte
// strings with their length first), and the reader refuses a description
// that is missing, short or too long, naming the region and the transport:
// a description comes from a peer, so it is input to validate like any other.
//
//   ref.described["cma"] = DescriptionWriter().u64(address).take();      // server
//   DescriptionReader r(ref, "cma", "cma read");                          // client
//   MESHSTORE_RETURN_IF_ERROR(r.present());
//   auto address = r.u64();  ...  MESHSTORE_RETURN_IF_ERROR(r.finish());

#include <cstdint>
#include <string>
#include <string_view>

#include "meshstore/status.hpp"
#include "meshstore/transports/wire/region_ref.hpp"

namespace meshstore::transports {

/// Builds one transport's description of a region. Not synchronized.
class DescriptionWriter {
 public:
  /// Appends a 64-bit unsigned integer.
  DescriptionWriter& u64(std::uint64_t v);
  /// Appends a byte string (its length, then its bytes).
  DescriptionWriter& bytes(std::string_view s);
  /// The description written so far.
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

/// Reads the description `transport` gave of `ref`, in the order its writer
/// wrote it. Every failure is Errc::protocol_error, its message naming `op`,
/// the region and the transport. Not synchronized; `ref` must outlive it.
class DescriptionReader {
 public:
  DescriptionReader(const wire::RegionRef& ref, std::string_view transport, std::string op);

  /// True when the volume described the region for this transport.
  bool present() const noexcept { return bytes_ != nullptr; }
  /// The next 64-bit unsigned integer.
  Result<std::uint64_t> u64();
  /// The next byte string.
  Result<std::string> bytes();
  /// Fails when bytes are left over (a description this client does not know).
  Status finish() const;
  /// A protocol_error about this description: `op` of region N: transport: why.
  Status malformed(const std::string& why) const;

 private:
  const wire::RegionRef& ref_;
  std::string transport_;
  std::string op_;
  const std::string* bytes_ = nullptr;
  std::size_t at_ = 0;
};

}  // namespace meshstore::transports
