#include "meshstore/logging.hpp"

#include "meshstore/internal/address.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

TEST(Logging, LevelsParseAndApply) {
  EXPECT_ERROR(log::parse_level("loud"), Errc::invalid_argument, "loud");
  EXPECT_ERROR(log::set_level("loud"), Errc::invalid_argument, "");
  const auto before = log::current_level();
  ASSERT_OK(log::set_level("debug"));
  EXPECT_EQ(log::get("test")->level(), spdlog::level::debug);
  ASSERT_OK(log::set_level(before));
  EXPECT_EQ(log::get("test")->name(), "meshstore.test");
}

}  // namespace
}  // namespace meshstore

TEST(Address, LoopbackHostsAreKnown) {
  using meshstore::internal::is_loopback_host;
  for (const char* h : {"127.0.0.1", "127.1.2.3", "::1", "localhost"}) {
    EXPECT_TRUE(is_loopback_host(h)) << h;
  }
  for (const char* h :
       {"0.0.0.0", "::", "", "10.0.0.1", "192.168.1.5", "example.org", "128.0.0.1"}) {
    EXPECT_FALSE(is_loopback_host(h)) << h;
  }
}
