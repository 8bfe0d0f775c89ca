// The tcp transport's server against a peer that knows the secret and still
// misbehaves: unknown ops, offsets and lengths outside a region (including
// ones whose sum wraps 64 bits), unknown regions, a wrong secret. Each is
// refused with a clear code, nothing outside a region is touched, and the
// server keeps serving real clients. The frame layout is the server's
// (tcp_transport.cpp): a hello of "MSTC", version 1 and a 32-byte secret,
// answered by one verdict byte; then 32-byte requests (op, reserved,
// region, offset, length) answered by (code, message length, message).
#include <arpa/inet.h>
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/memory.hpp"
#include "meshstore/transports/copy_engine.hpp"
#include "meshstore/transports/registry.hpp"
#include "testing/region_ref.hpp"
#include "testing/test_util.hpp"

namespace meshstore::transports {
namespace {

using testing::eventually;
using testing::kWait;

struct Request {
  std::uint32_t op;
  std::uint32_t reserved;
  std::uint64_t region;
  std::uint64_t offset;
  std::uint64_t length;
};
struct Reply {
  std::uint32_t code;
  std::uint32_t message_length;
};

class TcpHostilePeer : public ::testing::Test {
 protected:
  void SetUp() override {
    runtime_ = internal::ActorRuntime::create({}).value();
    regions_ = std::make_shared<RegionTable>();
    config_.request_timeout = std::chrono::milliseconds(5000);
    auto factory = builtin_registry().find("tcp").value();
    server_ =
        factory.make_server(ServerContext{&runtime_->system(), regions_, config_, "v", "127.0.0.1"})
            .value();
    client_ = factory.make_client(ClientContext{&runtime_->system(), config_}, server_->endpoint())
                  .value();
    region_ = std::make_shared<Region>(1, internal::allocate_aligned(4096), 4096);
    std::memset(region_->data(), 0x5a, 4096);
    regions_->add(region_);
    ref_ = testing::region_ref(1, 4096);
    ASSERT_OK(server_->describe(*region_, ref_));
    const auto& address = server_->endpoint().address;
    port_ = static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
    secret_ = server_->endpoint().secret;
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    runtime_.reset();
  }

  // A connection that passed the hello with `secret`; -1 when refused.
  int dial(const std::string& secret) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port_);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char hello[4 + 4 + 32] = {'M', 'S', 'T', 'C'};
    const std::uint32_t version = 1;
    std::memcpy(hello + 4, &version, 4);
    std::memcpy(hello + 8, secret.data(), std::min<std::size_t>(secret.size(), 32));
    EXPECT_TRUE(send_all(fd, hello, sizeof(hello)));
    char verdict = 1;
    if (::recv(fd, &verdict, 1, MSG_WAITALL) != 1 || verdict != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }
  static bool send_all(int fd, const void* p, std::size_t n) {
    return ::send(fd, p, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
  }
  // The reply to one request: its code and message, or code -1 when the
  // server closed the connection instead.
  static std::pair<int, std::string> ask(int fd, const Request& r, const void* payload = nullptr,
                                         std::size_t payload_bytes = 0) {
    if (!send_all(fd, &r, sizeof(r))) return {-1, ""};
    if (payload_bytes && !send_all(fd, payload, payload_bytes)) return {-1, ""};
    Reply h{};
    if (::recv(fd, &h, sizeof(h), MSG_WAITALL) != static_cast<ssize_t>(sizeof(h))) return {-1, ""};
    std::string msg(h.message_length, '\0');
    if (h.message_length &&
        ::recv(fd, msg.data(), msg.size(), MSG_WAITALL) != static_cast<ssize_t>(msg.size())) {
      return {-1, ""};
    }
    return {static_cast<int>(h.code), msg};
  }
  // A connection that asked for all of a new region 2 of `n` bytes (each
  // `fill`) and reads nothing: once this returns, the server is sending it
  // (and holds `region`). The connection, or -1 (reported) on failure.
  int stall_reading(std::shared_ptr<Region>& region, std::uint64_t n, std::uint8_t fill) {
    region = std::make_shared<Region>(2, internal::allocate_aligned(n), n);
    std::memset(region->data(), fill, n);
    regions_->add(region);
    constexpr std::uint32_t kRead = 2;
    const Request r{kRead, 0, 2, 0, n};
    const int fd = dial(secret_);
    if (fd < 0 || !send_all(fd, &r, sizeof(r)) ||
        !eventually([&] { return region.use_count() > 1; })) {
      ADD_FAILURE() << "the server did not start sending region 2";
      if (fd >= 0) ::close(fd);
      return -1;
    }
    return fd;
  }
  // The server still serves a real client, and the region holds its bytes.
  void still_serving() {
    std::vector<std::uint8_t> back(4096);
    ASSERT_OK(client_->read(ref_, 0, reinterpret_cast<std::byte*>(back.data()), 4096).get(kWait));
    for (auto b : back) ASSERT_EQ(b, 0x5a);
  }

  std::unique_ptr<internal::ActorRuntime> runtime_;
  std::shared_ptr<RegionTable> regions_;
  TransportConfig config_;
  std::unique_ptr<TransportServer> server_;
  std::unique_ptr<Transport> client_;
  std::shared_ptr<Region> region_;
  wire::RegionRef ref_;
  std::uint16_t port_ = 0;
  std::string secret_;
};

TEST_F(TcpHostilePeer, AWrongSecretIsRefusedAtTheHello) {
  std::string wrong = secret_;
  wrong[0] = static_cast<char>(wrong[0] ^ 1);
  EXPECT_EQ(dial(wrong), -1);
  EXPECT_EQ(dial(std::string(32, '\0')), -1);
  still_serving();
}

TEST_F(TcpHostilePeer, RequestsOutsideARegionAreRefusedAndTheConnectionLives) {
  const int fd = dial(secret_);
  ASSERT_GE(fd, 0);
  constexpr std::uint32_t kWrite = 1, kRead = 2;
  // Past the end, and an offset whose sum with the length wraps 64 bits.
  for (const auto& [offset, length] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{
           {4000, 200}, {~std::uint64_t{0} - 10, 100}, {1, ~std::uint64_t{0}}}) {
    auto [code, msg] = ask(fd, Request{kRead, 0, 1, offset, length});
    EXPECT_EQ(code, static_cast<int>(Errc::out_of_range)) << msg;
  }
  // An unknown region; a write's payload is drained, not written anywhere.
  std::vector<std::uint8_t> junk(64 << 10, 0xee);
  auto [code, msg] = ask(fd, Request{kWrite, 0, 999, 0, junk.size()}, junk.data(), junk.size());
  EXPECT_NE(code, 0) << msg;
  EXPECT_NE(code, -1) << "the server dropped the connection instead of answering";
  // A write past the end of the real region is refused too, and drained.
  auto [code2, msg2] = ask(fd, Request{kWrite, 0, 1, 4000, 200}, junk.data(), 200);
  EXPECT_EQ(code2, static_cast<int>(Errc::out_of_range)) << msg2;
  // The same connection still reads the region.
  std::vector<std::uint8_t> back(16);
  auto [ok, none] = ask(fd, Request{kRead, 0, 1, 0, 16});
  EXPECT_EQ(ok, 0) << none;
  ASSERT_EQ(::recv(fd, back.data(), 16, MSG_WAITALL), 16);
  EXPECT_EQ(back[0], 0x5a);
  ::close(fd);
  still_serving();
}

TEST_F(TcpHostilePeer, AnUnknownOpIsAProtocolErrorAndEndsTheConnection) {
  const int fd = dial(secret_);
  ASSERT_GE(fd, 0);
  auto [code, msg] = ask(fd, Request{77, 0, 1, 0, 16});
  EXPECT_EQ(code, static_cast<int>(Errc::protocol_error));
  EXPECT_NE(msg.find("unknown op 77"), std::string::npos) << msg;
  char c;
  EXPECT_EQ(::recv(fd, &c, 1, 0), 0) << "the connection should be closed";
  ::close(fd);
  still_serving();
}

// A reader that stalls mid-read (asks for 64 MiB and reads nothing) keeps
// the server's send blocked, holding the region, until the request timeout.
// When the region is withdrawn (a revoked loan) and the server interrupted,
// that connection ends at once and the region's other holders are its last;
// the next request for it is refused, and the server serves others on.
TEST_F(TcpHostilePeer, AnInterruptEndsATransferToAStalledReaderAtOnce) {
  std::shared_ptr<Region> big;
  const int fd = stall_reading(big, std::uint64_t{64} << 20, 0x33);
  ASSERT_GE(fd, 0);
  const auto t0 = std::chrono::steady_clock::now();
  regions_->withdraw({2});
  server_->interrupt({2});
  // Well before the 5 s request timeout that would end it otherwise.
  EXPECT_TRUE(eventually([&] { return big.use_count() == 1; }, std::chrono::milliseconds(2500)))
      << "the stalled transfer still holds the region";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(2500));
  ::close(fd);
  // Withdrawn: refused to a new request, while region 1 is still served.
  const int again = dial(secret_);
  ASSERT_GE(again, 0);
  constexpr std::uint32_t kRead = 2;
  auto [code, msg] = ask(again, Request{kRead, 0, 2, 0, 16});
  EXPECT_EQ(code, static_cast<int>(Errc::not_found)) << msg;
  ::close(again);
  still_serving();
}

// An interrupt for other regions leaves a transfer alone.
TEST_F(TcpHostilePeer, AnInterruptOfOtherRegionsLeavesATransferAlone) {
  constexpr std::uint64_t kBig = std::uint64_t{16} << 20;
  std::shared_ptr<Region> big;
  const int fd = stall_reading(big, kBig, 0x33);
  ASSERT_GE(fd, 0);
  server_->interrupt({1, 7});
  Reply h{};
  ASSERT_EQ(::recv(fd, &h, sizeof(h), MSG_WAITALL), static_cast<ssize_t>(sizeof(h)));
  EXPECT_EQ(h.code, 0u);
  std::vector<std::uint8_t> back(kBig);
  ASSERT_EQ(::recv(fd, back.data(), kBig, MSG_WAITALL), static_cast<ssize_t>(kBig));
  EXPECT_EQ(std::count(back.begin(), back.end(), 0x33), static_cast<std::ptrdiff_t>(kBig));
  ::close(fd);
  still_serving();
}

// The transport's threads carry names a profiler shows (the copy engine's
// too), rather than the name of the thread that started them.
TEST_F(TcpHostilePeer, ItsThreadsAreNamedForProfilers) {
  // A read: the client's worker and a server connection have run (each
  // names itself first thing); the copy engine's threads are named as it
  // starts them.
  still_serving();
  EXPECT_EQ(testing::threads_named("ms.tcp.accept"), 1);
  EXPECT_GE(testing::threads_named("ms.tcp.serve"), 1);
  EXPECT_GE(testing::threads_named("ms.tcp.client"), 1);
  const int copy_threads = CopyEngine::instance().threads();
  EXPECT_EQ(testing::threads_named("ms.copy"), copy_threads);
}

// This process's CPU seconds so far, every thread.
double process_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return secs(u.ru_utime) + secs(u.ru_stime);
}

// The CPU this process spends in the half second after one small operation
// over a tcp server and client whose config sets `spin`.
double cpu_after_a_small_op(std::chrono::microseconds spin) {
  auto runtime = internal::ActorRuntime::create({}).value();
  TransportConfig config;
  config.small_ops_spin = spin;
  auto factory = builtin_registry().find("tcp").value();
  auto server = factory
                    .make_server(ServerContext{&runtime->system(), std::make_shared<RegionTable>(),
                                               config, "v", "127.0.0.1"})
                    .value();
  server->serve_small_ops(
      [](const std::byte* p, std::size_t n) { return std::vector<std::byte>(p, p + n); });
  auto client =
      factory.make_client(ClientContext{&runtime->system(), config}, server->endpoint()).value();
  auto ops = client->open_small_ops().value();
  const std::byte hi[2] = {std::byte{'h'}, std::byte{'i'}};
  EXPECT_OK(ops->exchange(hi, 2, std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  const double before = process_cpu_seconds();
  // The window measured, not a wait: the server's end is idle meanwhile.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double used = process_cpu_seconds() - before;
  ops.reset();  // the server's end sees the close and stops spinning
  client.reset();
  server.reset();
  return used;
}

// The small-operations connection spins as long as the config says
// (StoreOptions::transport.fast_path_spin): after answering, a server end with a 1 s
// spin keeps a core busy polling for the next request, one with 0 sleeps
// in the kernel at once. No latency is asserted, only where the CPU goes.
TEST(TcpSmallOpsSpin, TheServerEndSpinsAsLongAsItsConfigSays) {
  const double sleeping = cpu_after_a_small_op(std::chrono::microseconds(0));
  const double spinning = cpu_after_a_small_op(std::chrono::seconds(1));
  EXPECT_GT(spinning, sleeping + 0.05) << "CPU seconds in the idle half second: " << spinning
                                       << " with a 1 s spin, " << sleeping << " with none";
}

// Small operations (the fast path across hosts, SmallOps): requests reach
// the volume's handler and its replies come back, on a connection of their
// own; without a handler they are refused and the connection lives; one
// larger than the limit is a protocol error that ends the connection.
TEST_F(TcpHostilePeer, SmallOpsReachTheHandlerAndOversizedOnesEndTheConnection) {
  auto ops = client_->open_small_ops();
  ASSERT_OK(ops);
  const std::string hello = "hello";
  auto deadline = [] { return std::chrono::steady_clock::now() + std::chrono::seconds(5); };
  auto ask_ops = [&](const std::string& s) {
    return (*ops)->exchange(reinterpret_cast<const std::byte*>(s.data()), s.size(), deadline());
  };
  auto none = ask_ops(hello);
  EXPECT_EQ(none.status().code(), Errc::unsupported) << none.status().to_string();
  server_->serve_small_ops([](const std::byte* p, std::size_t n) {
    std::vector<std::byte> out(p, p + n);
    std::reverse(out.begin(), out.end());
    return out;
  });
  auto back = ask_ops(hello);  // the same channel: a refusal did not break it
  ASSERT_OK(back);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(back->data()), back->size()), "olleh");
  auto empty = ask_ops("");
  ASSERT_OK(empty);
  EXPECT_TRUE(empty->empty());
  // Too large for the client to send at all.
  std::vector<std::byte> huge(kMaxSmallOpBytes + 1);
  EXPECT_EQ((*ops)->exchange(huge.data(), huge.size(), deadline()).status().code(),
            Errc::invalid_argument);
  // A peer that announces more than the limit: refused, and closed.
  const int fd = dial(secret_);
  ASSERT_GE(fd, 0);
  constexpr std::uint32_t kSmall = 3;
  auto [code, msg] = ask(fd, Request{kSmall, 0, 0, 0, std::uint64_t{1} << 40});
  EXPECT_EQ(code, static_cast<int>(Errc::protocol_error)) << msg;
  char c;
  EXPECT_EQ(::recv(fd, &c, 1, 0), 0) << "the connection should be closed";
  ::close(fd);
  still_serving();
  auto again = ask_ops("abc");
  ASSERT_OK(again);
  EXPECT_EQ(again->size(), 3u);
}

// A volume that takes too long is a timeout by the caller's deadline, and
// one that stops turns the next request into unavailable at once, not a
// timeout.
TEST_F(TcpHostilePeer, ASmallOpsChannelTimesOutAndFailsFastWhenTheVolumeStops) {
  server_->serve_small_ops([](const std::byte* p, std::size_t n) {
    if (n == 4 && std::memcmp(p, "slow", 4) == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
    }
    return std::vector<std::byte>(p, p + n);
  });
  auto ops = client_->open_small_ops();
  ASSERT_OK(ops);
  const std::string slow = "slow";
  auto t0 = std::chrono::steady_clock::now();
  auto r = (*ops)->exchange(reinterpret_cast<const std::byte*>(slow.data()), slow.size(),
                            t0 + std::chrono::milliseconds(100));
  EXPECT_EQ(r.status().code(), Errc::timeout) << r.status().to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  // The channel is unusable after that: a new one serves.
  EXPECT_EQ((*ops)
                ->exchange(reinterpret_cast<const std::byte*>(slow.data()), 1,
                           std::chrono::steady_clock::now() + std::chrono::seconds(5))
                .status()
                .code(),
            Errc::unavailable);
  auto fresh = client_->open_small_ops();
  ASSERT_OK(fresh);
  const std::string x = "x";
  ASSERT_OK((*fresh)->exchange(reinterpret_cast<const std::byte*>(x.data()), 1,
                               std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  server_->shutdown();
  t0 = std::chrono::steady_clock::now();
  auto gone = (*fresh)->exchange(reinterpret_cast<const std::byte*>(x.data()), 1,
                                 t0 + std::chrono::seconds(30));
  EXPECT_EQ(gone.status().code(), Errc::unavailable) << gone.status().to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

}  // namespace
}  // namespace meshstore::transports
