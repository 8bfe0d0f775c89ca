#include "meshstore/logging.hpp"

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
