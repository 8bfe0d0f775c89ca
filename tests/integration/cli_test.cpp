// The meshstore command-line tool against a real `meshstore serve` process.

#include <regex>

#include "meshstore/store.hpp"
#include "testing/subprocess.hpp"
#include "testing/test_util.hpp"

namespace meshstore::testing {
namespace {

using namespace std::chrono_literals;

const std::string kTool = MESHSTORE_TOOL_PATH;

// Starts `meshstore serve` on a free port and reads back its address.
class ServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<Child>(
        std::vector<std::string>{kTool, "serve", "--port", "0", "--capacity", "1000000"});
    ASSERT_TRUE(server_->wait_for_output("serving on", 60s)) << server_->output();
    std::smatch m;
    const std::string out = server_->output();
    ASSERT_TRUE(std::regex_search(out, m, std::regex("serving on (127\\.0\\.0\\.1:[0-9]+)")));
    address_ = m[1];
  }
  std::string run(const std::vector<std::string>& args, int expect_code) {
    std::vector<std::string> argv{kTool};
    argv.insert(argv.end(), args.begin(), args.end());
    Child c(argv);
    EXPECT_TRUE(c.wait(60s));
    EXPECT_EQ(c.exit_code(), expect_code) << c.output();
    return c.output();
  }
  std::unique_ptr<Child> server_;
  std::string address_;
};

TEST_F(ServeTest, ToolsListRemoveAndReportOnARunningStore) {
  StoreOptions o;
  o.local_rank = 1;
  auto store = Store::connect(address_, o).value();
  std::vector<std::uint16_t> w(6, 1);
  ASSERT_OK(store.put("model.w", TensorView(w.data(), DType::bfloat16, {2, 3})).get(kWait));
  ASSERT_OK(store.put_object("model.cfg", "{}").get(kWait));

  auto ls = run({"ls", "model", "--store", address_}, 0);
  EXPECT_TRUE(std::regex_search(ls, std::regex("model\\.w +bfloat16 +\\[2, 3\\] +12 "))) << ls;
  EXPECT_TRUE(std::regex_search(ls, std::regex("model\\.cfg +object +- +2 "))) << ls;

  auto stat = run({"stat", "--store", address_}, 0);
  EXPECT_NE(stat.find("2 keys, 1 volumes"), std::string::npos) << stat;
  EXPECT_TRUE(std::regex_search(stat, std::regex("volume-0 +14 B +976\\.6 KiB +2 "))) << stat;

  run({"rm", "model.w", "--store", address_}, 0);
  EXPECT_FALSE(*store.exists("model.w").get(kWait));
  auto missing = run({"rm", "model.w", "--store", address_}, 1);
  EXPECT_NE(missing.find("not_found: remove 'model.w': no such key"), std::string::npos) << missing;

  server_->signal(SIGTERM);
  ASSERT_TRUE(server_->wait(60s));
  EXPECT_EQ(server_->exit_code(), 0) << server_->output();
  EXPECT_NE(server_->output().find("meshstore serve: stopped"), std::string::npos)
      << server_->output();
}

TEST_F(ServeTest, ToolsNameAnUnreachableStore) {
  auto out = run({"ls", "--store", "127.0.0.1:1"}, 1);
  EXPECT_NE(out.find("no meshstore answered at 127.0.0.1:1"), std::string::npos) << out;
}

TEST(Cli, BadArgumentsAreUsageErrors) {
  for (auto args : std::vector<std::vector<std::string>>{{kTool, "serve", "--port", "http"},
                                                         {kTool, "serve", "--bogus", "1"},
                                                         {kTool, "rm"},
                                                         {kTool, "frobnicate"}}) {
    Child c(args);
    ASSERT_TRUE(c.wait(60s));
    EXPECT_EQ(c.exit_code(), 2) << c.output();
  }
}

}  // namespace
}  // namespace meshstore::testing
