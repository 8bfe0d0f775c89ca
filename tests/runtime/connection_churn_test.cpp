// A process that accepts connections keeps answering a peer that connects
// just after another one left, however late the leaver's last message is
// read. This test binary is also the server (MESHSTORE_TEST_ROLE=server).
//
// CAF 0.17 names a connection by its socket's fd and cleans a closed one up
// only once every message read from it before the close has been
// delivered. With BASP workers deserializing, the cleanup waited for them,
// and meanwhile the kernel gave the freed fd to the next accepted
// connection: the late cleanup erased that connection's route, so every
// reply to the new peer was dropped and its first request timed out
// (multiprocess.reshard_worlds failed this way about once in 60 runs under
// load). The runtime now deserializes on the middleman's thread
// (`middleman.workers` = 0), so the cleanup runs before the fd can be
// handed out again.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "meshstore/foreign_thread.hpp"
#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/internal/connect.hpp"
#include "testing/subprocess.hpp"

namespace meshstore {
namespace {

using namespace std::chrono_literals;
using ping_atom = caf::atom_constant<caf::atom("ping")>;

// How long the server takes to read one SlowToRead: the window in which
// the leaver's connection is closed and the next peer connects.
constexpr auto kSlowRead = 1500ms;

// A message the server is slow to deserialize (its load callback stalls the
// reading thread for kSlowRead). It announces the stall on stdout, so the
// test knows the read has begun.
struct SlowToRead {
  std::int32_t tag = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SlowToRead& x) {
  return f(caf::meta::type_name("SlowToRead"), x.tag, caf::meta::load_callback([]() -> caf::error {
             std::printf("slow read started\n");
             std::fflush(stdout);
             std::this_thread::sleep_for(kSlowRead);
             return caf::none;
           }));
}

using pong_actor = caf::typed_actor<caf::reacts_to<SlowToRead>,
                                    caf::replies_to<ping_atom, std::int32_t>::with<std::int32_t>>;

Result<std::unique_ptr<internal::ActorRuntime>> make_runtime() {
  internal::RuntimeOptions o;
  o.with_middleman = true;
  o.add_types = [](caf::actor_system_config& cfg) {
    cfg.add_message_type<SlowToRead>("meshstore.test.SlowToRead");
  };
  return internal::ActorRuntime::create(o);
}

// The server: publishes a pong actor on loopback, prints its port, and
// runs until killed.
int server_main() {
  auto rt = make_runtime();
  if (!rt.ok()) return 2;
  auto& sys = (*rt)->system();
  ForeignThreadGuard guard;
  pong_actor pong = sys.spawn([]() -> pong_actor::behavior_type {
    return {[](const SlowToRead&) {}, [](ping_atom, std::int32_t x) { return x + 1; }};
  });
  auto port = internal::publish_actor(sys, pong, 0, "127.0.0.1", true);
  if (!port.ok()) return 3;
  std::printf("listening on port %u\n", static_cast<unsigned>(*port));
  std::fflush(stdout);
  for (;;) std::this_thread::sleep_for(1h);
}

// Connects a runtime of this process to the server's pong actor.
struct Peer {
  std::unique_ptr<internal::ActorRuntime> rt;
  std::optional<pong_actor> pong;

  static Peer connect(std::uint16_t port) {
    Peer p;
    auto rt = make_runtime();
    EXPECT_TRUE(rt.ok()) << rt.status().to_string();
    if (!rt.ok()) return p;
    p.rt = std::move(rt).value();
    ForeignThreadGuard guard;
    auto h = internal::connect_with_retry<pong_actor>(p.rt->system(), "127.0.0.1", port, 10s,
                                                      "test server");
    EXPECT_TRUE(h.ok()) << h.status().to_string();
    if (h.ok()) p.pong = std::move(h).value();
    return p;
  }

  // The pong actor's answer to `x`, or the error (within 10 s).
  Result<std::int32_t> ping(std::int32_t x) {
    if (!pong) return Status(Errc::unavailable, "not connected");
    Result<std::int32_t> answer = Status(Errc::internal, "no answer");
    ForeignThreadGuard guard;
    caf::scoped_actor self{rt->system()};
    self->request(*pong, 10s, ping_atom::value, x)
        .receive([&](std::int32_t y) { answer = y; },
                 [&](caf::error& e) { answer = internal::from_caf_error(e, "ping"); });
    return answer;
  }

  // Drops the handle, then the runtime: the connection closes.
  void leave() {
    pong.reset();
    rt.reset();
  }
};

TEST(ConnectionChurn, APeerThatConnectsWhileALeaversLastMessageIsReadIsAnswered) {
  testing::Child server({"/proc/self/exe"}, {"MESHSTORE_TEST_ROLE=server"});
  // The line may follow log lines of the server's: find it. It comes in
  // one write (fflush of one short line), so all of it or none.
  ASSERT_TRUE(server.wait_for_output("listening on port ", 30s)) << server.output();
  const std::string& out = server.output();
  unsigned port = 0;
  ASSERT_EQ(
      std::sscanf(out.c_str() + out.find("listening on port "), "listening on port %u", &port), 1)
      << out;

  // The leaver: answered once (its connection is fully set up), then sends
  // a message the server reads slowly, and leaves while it is being read.
  Peer leaver = Peer::connect(static_cast<std::uint16_t>(port));
  auto first = leaver.ping(1);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(*first, 2);
  caf::anon_send(*leaver.pong, SlowToRead{7});
  ASSERT_TRUE(server.wait_for_output("slow read started", 30s)) << server.output();
  leaver.leave();

  // The next peer connects at once (on the server, the kernel hands it the
  // leaver's fd number) and must be answered, after the slow read too.
  Peer next = Peer::connect(static_cast<std::uint16_t>(port));
  auto answer = next.ping(41);
  ASSERT_TRUE(answer.ok()) << answer.status().to_string();
  EXPECT_EQ(*answer, 42);
  auto again = next.ping(99);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(*again, 100);
  next.leave();
}

}  // namespace
}  // namespace meshstore

int main(int argc, char** argv) {
  const char* role = std::getenv("MESHSTORE_TEST_ROLE");
  if (role && std::string(role) == "server") return meshstore::server_main();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
