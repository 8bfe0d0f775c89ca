#include "meshstore/logging.hpp"

#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

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

// One JSON object per line: every field a log shipper reads, a message's
// key, quotes and newlines escaped; back to text after.
TEST(Logging, JsonLinesParseOneByOne) {
  EXPECT_ERROR(log::set_format("xml"), Errc::invalid_argument, "unknown log format 'xml'");
  const auto level = log::current_level();
  ASSERT_OK(log::set_level("info"));
  ASSERT_OK(log::set_format("json"));
  EXPECT_EQ(log::current_format(), "json");
  ::testing::internal::CaptureStderr();
  log::get("test")->info("get 'layer0.w': not found");
  log::get("test")->warn("a \"quoted\"\nline with transport 'tcp'");
  log::get("test")->flush();
  const std::string out = ::testing::internal::GetCapturedStderr();
  ASSERT_OK(log::set_format("text"));
  ASSERT_OK(log::set_level(level));
  std::vector<nlohmann::json> lines;
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);) {
    auto j = nlohmann::json::parse(l, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << l;
    lines.push_back(j);
  }
  ASSERT_EQ(lines.size(), 2u) << out;
  EXPECT_EQ(lines[0]["level"], "info");
  EXPECT_EQ(lines[0]["logger"], "meshstore.test");
  EXPECT_EQ(lines[0]["message"], "get 'layer0.w': not found");
  EXPECT_EQ(lines[0]["key"], "layer0.w");
  EXPECT_TRUE(std::regex_match(lines[0]["time"].get<std::string>(),
                               std::regex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\\.[0-9]{3}Z")))
      << lines[0]["time"];
  EXPECT_EQ(lines[1]["level"], "warning");
  EXPECT_EQ(lines[1]["message"], "a \"quoted\"\nline with transport 'tcp'");
  EXPECT_FALSE(lines[1].contains("key")) << "a transport is not a key";
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
