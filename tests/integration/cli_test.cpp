// The meshstore command-line tool against a real `meshstore serve` process.

#include <cstdlib>
#include <cstring>
#include <regex>

#include "meshstore/safetensors.hpp"
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
    address_ = served_address(*server_, 60s);
    ASSERT_FALSE(address_.empty()) << server_->output();
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
  o.placement.local_rank = 1;
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

TEST_F(ServeTest, InspectLoadAndSaveCheckpoints) {
  char tmpl[] = "/tmp/meshstore-cli-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  std::vector<float> w(16);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) / 4;
  std::vector<std::uint16_t> b{0x3f80, 0x4000, 0xc040};
  const std::string file = dir + "/in.safetensors";
  ASSERT_OK(safetensors::write_file(file,
                                    {{"layers.0.w", TensorView::of(w.data(), {4, 4})},
                                     {"b", TensorView(b.data(), DType::bfloat16, {3})}},
                                    {{"format", "pt"}}));
  auto inspect = run({"inspect", file}, 0);
  EXPECT_TRUE(std::regex_search(inspect, std::regex("layers\\.0\\.w +F32 +\\[4, 4\\] +64")))
      << inspect;
  EXPECT_TRUE(std::regex_search(inspect, std::regex("  b +BF16 +\\[3\\] +6"))) << inspect;
  EXPECT_NE(inspect.find("metadata format = pt"), std::string::npos) << inspect;
  EXPECT_NE(inspect.find("total: 2 tensor(s) in 1 file(s), 70 B (70 bytes)"), std::string::npos)
      << inspect;

  auto load = run({"load", file, "--prefix", "ckpt", "--store", address_}, 0);
  EXPECT_NE(load.find("loaded 2 tensor(s), 70 B, from 1 file(s) under 'ckpt/'"), std::string::npos)
      << load;
  EXPECT_NE(load.find("load: 100% (70 B of 70 B)"), std::string::npos) << load;
  auto ls = run({"ls", "ckpt", "--store", address_}, 0);
  EXPECT_TRUE(std::regex_search(ls, std::regex("ckpt/layers\\.0\\.w +float32 +\\[4, 4\\]"))) << ls;

  // Saved back in shards of at most 64 bytes: two files and the index,
  // with the original names and bytes.
  auto save =
      run({"save", "ckpt", dir + "/out", "--max-shard-size", "64B", "--store", address_}, 0);
  EXPECT_NE(save.find("saved 2 tensor(s), 70 B, into 2 file(s)"), std::string::npos) << save;
  auto out = safetensors::open_checkpoint(dir + "/out");
  ASSERT_OK(out);
  EXPECT_EQ(out->files.size(), 2u);
  auto back = out->files[out->weight_map.at("layers.0.w")].view("layers.0.w");
  ASSERT_OK(back);
  EXPECT_EQ(std::memcmp(back->data(), w.data(), 64), 0);
  auto again = run({"inspect", dir + "/out"}, 0);
  EXPECT_NE(again.find("total: 2 tensor(s) in 2 file(s)"), std::string::npos) << again;
  EXPECT_NE(again.find("index " + dir +
                       "/out/model.safetensors.index.json: 2 tensor(s) in 2 "
                       "file(s)"),
            std::string::npos)
      << again;
  EXPECT_NE(again.find("model-00002-of-00002.safetensors (144 B, 1 tensor(s))"), std::string::npos)
      << again;

  // Errors: a malformed file, a bad size, a prefix with nothing under it.
  std::FILE* f = std::fopen((dir + "/bad.safetensors").c_str(), "wb");
  const std::string truncated = std::string("\x05", 1) + std::string(7, '\0') + "{\"a\":";
  std::fwrite(truncated.data(), 1, truncated.size(), f);
  std::fclose(f);
  auto bad = run({"inspect", dir + "/bad.safetensors"}, 1);
  EXPECT_NE(bad.find("bad.safetensors': the header is not valid JSON"), std::string::npos) << bad;
  run({"save", "ckpt", dir + "/x", "--max-shard-size", "lots", "--store", address_}, 2);
  auto none = run({"save", "nothing", dir + "/y", "--store", address_}, 1);
  EXPECT_NE(none.find("not_found: save 'nothing': no tensor keys under it"), std::string::npos)
      << none;
  std::system(("rm -rf '" + dir + "'").c_str());
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

// `meshstore info` reports the copy engine's threads, which
// MESHSTORE_COPY_THREADS sets; a bad value is named and the default kept.
TEST(Cli, InfoReportsTheCopyThreadsTheEnvironmentSets) {
  Child three({kTool, "info"}, {"MESHSTORE_COPY_THREADS=3"});
  ASSERT_TRUE(three.wait(60s));
  EXPECT_EQ(three.exit_code(), 0) << three.output();
  EXPECT_NE(three.output().find("copy threads 3 "), std::string::npos) << three.output();
  for (const std::string bad : {"0", "many", "257", "4x"}) {
    Child c({kTool, "info"}, {"MESHSTORE_COPY_THREADS=" + bad});
    ASSERT_TRUE(c.wait(60s));
    EXPECT_EQ(c.exit_code(), 0) << c.output();
    EXPECT_NE(c.output().find("MESHSTORE_COPY_THREADS='" + bad + "' is not a number from 1 to 256"),
              std::string::npos)
        << c.output();
    EXPECT_EQ(c.output().find("copy threads " + bad + " "), std::string::npos) << c.output();
  }
}

// `meshstore info` reports how long an idle scheduler worker polls before
// it sleeps, which MESHSTORE_SCHEDULER_POLLS sets; a bad value is named and
// the host's default kept.
TEST(Cli, InfoReportsTheSchedulerPollsTheEnvironmentSets) {
  for (const std::string good : {"0", "123", "1000000"}) {
    Child c({kTool, "info"}, {"MESHSTORE_SCHEDULER_POLLS=" + good});
    ASSERT_TRUE(c.wait(60s));
    EXPECT_EQ(c.exit_code(), 0) << c.output();
    EXPECT_NE(c.output().find("scheduler polls " + good + " "), std::string::npos) << c.output();
  }
  for (const std::string bad : {"-1", "often", "1000001", "5k"}) {
    Child c({kTool, "info"}, {"MESHSTORE_SCHEDULER_POLLS=" + bad});
    ASSERT_TRUE(c.wait(60s));
    EXPECT_EQ(c.exit_code(), 0) << c.output();
    EXPECT_NE(c.output().find("MESHSTORE_SCHEDULER_POLLS='" + bad +
                              "' is not a number from 0 to 1000000"),
              std::string::npos)
        << c.output();
    const bool defaulted = c.output().find("scheduler polls 100 ") != std::string::npos ||
                           c.output().find("scheduler polls 5000 ") != std::string::npos;
    EXPECT_TRUE(defaulted) << c.output();
  }
}

// MESHSTORE_SPIN turns waiting threads' spinning on or off whatever the
// CPUs, and the scheduler's polls with it; a bad value is named and auto
// (by the CPUs) used.
TEST(Cli, InfoReportsTheSpinTheEnvironmentSets) {
  Child on({kTool, "info"}, {"MESHSTORE_SPIN=on"});
  ASSERT_TRUE(on.wait(60s));
  EXPECT_NE(on.output().find("spinning on "), std::string::npos) << on.output();
  EXPECT_NE(on.output().find("scheduler polls 5000 "), std::string::npos) << on.output();
  Child off({kTool, "info"}, {"MESHSTORE_SPIN=off"});
  ASSERT_TRUE(off.wait(60s));
  EXPECT_NE(off.output().find("spinning off "), std::string::npos) << off.output();
  EXPECT_NE(off.output().find("scheduler polls 100 "), std::string::npos) << off.output();
  Child bad({kTool, "info"}, {"MESHSTORE_SPIN=sometimes"});
  ASSERT_TRUE(bad.wait(60s));
  EXPECT_EQ(bad.exit_code(), 0) << bad.output();
  EXPECT_NE(bad.output().find("MESHSTORE_SPIN='sometimes' is not on, off or auto"),
            std::string::npos)
      << bad.output();
}

// `meshstore agent --listen` takes what every address option takes:
// HOST:PORT or [V6]:PORT, and names what is wrong otherwise.
TEST(Cli, TheAgentListensWhereToldAndRefusesABadAddress) {
  for (const std::string bad : {"29600", "[::1:29600", "127.0.0.1:http", ":29600"}) {
    Child c({kTool, "agent", "--listen", bad});
    ASSERT_TRUE(c.wait(60s));
    EXPECT_EQ(c.exit_code(), 2) << bad << ": " << c.output();
    EXPECT_NE(c.output().find("--listen wants HOST:PORT or [V6]:PORT"), std::string::npos)
        << c.output();
  }
  Child v4({kTool, "agent", "--listen", "127.0.0.1:0"});
  ASSERT_TRUE(v4.wait_for_output("; stop with", 60s)) << v4.output();
  EXPECT_NE(v4.output().find("agent listening on 127.0.0.1:"), std::string::npos) << v4.output();
  v4.signal(SIGTERM);
  ASSERT_TRUE(v4.wait(60s));
  EXPECT_EQ(v4.exit_code(), 0) << v4.output();
  Child v6({kTool, "agent", "--listen", "[::1]:0"});
  ASSERT_TRUE(v6.wait_for_output("\n", 60s)) << v6.output();
  if (v6.output().find("cannot listen") != std::string::npos) {
    ASSERT_TRUE(v6.wait(60s));
    GTEST_SKIP() << "this host has no IPv6 loopback: " << v6.output();
  }
  ASSERT_TRUE(v6.wait_for_output("; stop with", 60s)) << v6.output();
  EXPECT_NE(v6.output().find("agent listening on ::1:"), std::string::npos) << v6.output();
  v6.signal(SIGTERM);
  ASSERT_TRUE(v6.wait(60s));
  EXPECT_EQ(v6.exit_code(), 0) << v6.output();
}

}  // namespace
}  // namespace meshstore::testing
