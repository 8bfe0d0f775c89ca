// The host agent's requests with numbers no controller sends, through a real
// CAF connection as from the network: a signal to a rank far outside the
// job (int32's extremes), a launch whose first rank plus count overflows,
// and a stop with a grace that would overflow the clock. Each is answered
// with a clear error or done at once, and the agent keeps serving. (The
// fuzz.agent target sends such requests at random; these are the cases
// found while writing it, pinned down.)

#include "meshstore/host_agent.hpp"

#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <limits>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/internal/connect.hpp"
#include "meshstore/internal/proc_protocol.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

using namespace internal::proc;
using namespace std::chrono_literals;

class HostAgentRequests : public ::testing::Test {
 protected:
  void SetUp() override {
    AgentOptions ao;
    ao.stop_grace = 100ms;
    agent_ = std::make_unique<HostAgent>(HostAgent::start(ao).value());
    internal::RuntimeOptions ro;
    ro.with_middleman = true;
    ro.add_types = add_proc_types;
    runtime_ = internal::ActorRuntime::create(ro).value();
    auto& sys = runtime_->system();
    remote_ = internal::connect_with_retry<agent_actor>(sys, "127.0.0.1", agent_->port(), 10s,
                                                        "host agent")
                  .value();
    self_ = std::make_unique<caf::scoped_actor>(sys);
    sink_ = sys.spawn(
        [](int) -> sink_actor::behavior_type {
          return {[](proc_output_atom, std::int32_t, bool, const std::string&) {},
                  [](proc_exit_atom, std::int32_t, const std::string&) {}};
        },
        0);
  }
  void TearDown() override {
    caf::anon_send_exit(sink_, caf::exit_reason::user_shutdown);
    self_.reset();
    remote_ = nullptr;
    sink_ = nullptr;
    runtime_.reset();
    agent_.reset();
  }
  // A request's answer: its value, or the error as a Status.
  template <class T, class... Ts>
  Result<T> ask(Ts&&... xs) {
    Result<T> out = Status(Errc::timeout, "no answer");
    (*self_)
        ->request(remote_, 10s, std::forward<Ts>(xs)...)
        .receive([&](T v) { out = v; },
                 [&](caf::error& e) { out = internal::from_caf_error(e, "agent"); });
    return out;
  }
  // A job of one process, ranks from `first`: by default one that waits on
  // its lifeline (reads the agent's end of the pipe until it closes).
  std::uint64_t launch(std::int32_t first, std::string program = "cat",
                       std::vector<std::string> args = {"/proc/self/fd/247"}) {
    auto job =
        ask<std::uint64_t>(agent_launch_atom::value, sink_, std::move(program), std::move(args),
                           std::vector<std::string>{}, first, std::int32_t{1});
    EXPECT_OK(job);
    return job.ok() ? *job : 0;
  }

  std::unique_ptr<HostAgent> agent_;
  std::unique_ptr<internal::ActorRuntime> runtime_;
  agent_actor remote_;
  sink_actor sink_;
  std::unique_ptr<caf::scoped_actor> self_;
};

TEST_F(HostAgentRequests, ASignalToARankOutsideTheJobIsOutOfRange) {
  const auto job = launch(1000);
  for (std::int32_t rank : {std::numeric_limits<std::int32_t>::min(), std::int32_t{-1},
                            std::int32_t{999}, std::numeric_limits<std::int32_t>::max()}) {
    EXPECT_ERROR(ask<bool>(agent_signal_atom::value, job, rank, std::int32_t{0}),
                 Errc::out_of_range, "")
        << rank;
  }
  // Rank 1000 is the job's: signal 0 only checks it is there.
  EXPECT_OK(ask<bool>(agent_signal_atom::value, job, std::int32_t{1000}, std::int32_t{0}));
  EXPECT_OK(ask<bool>(agent_stop_atom::value, job, std::int64_t{0}));
}

TEST_F(HostAgentRequests, ALaunchWhoseRanksOverflowIsRefused) {
  EXPECT_ERROR(ask<std::uint64_t>(agent_launch_atom::value, sink_, std::string("true"),
                                  std::vector<std::string>{}, std::vector<std::string>{},
                                  std::numeric_limits<std::int32_t>::max(), std::int32_t{2}),
               Errc::invalid_argument, "first rank");
}

TEST_F(HostAgentRequests, AStopWithAnEnormousGraceStillStopsTheJob) {
  // A process that ends on its own a moment later: the stop waits for it
  // (up to the grace, clamped to an hour rather than overflowing the clock)
  // and answers once it is gone.
  const auto job = launch(0, "sleep", {"0.2"});
  EXPECT_OK(ask<bool>(agent_stop_atom::value, job, std::numeric_limits<std::int64_t>::max()));
  EXPECT_OK(ask<bool>(agent_stop_atom::value, job, std::numeric_limits<std::int64_t>::min()));
}

// What the agent reports of its jobs and processes (HostAgent::stats, the
// meshstore_agent_* series): a launch of two, one that ends, and a stop.
TEST_F(HostAgentRequests, StatsCountTheJobsAndProcessesAsTheyComeAndGo) {
  EXPECT_EQ(agent_->stats().processes, 0u);
  const auto waiting = launch(0);
  ASSERT_NE(waiting, 0u);
  const auto ending = launch(1, "true", {});
  ASSERT_NE(ending, 0u);
  AgentStats s;
  ASSERT_TRUE(testing::eventually([&] {
    s = agent_->stats();
    return s.process_exits == 1;
  })) << s.processes
      << " alive";
  EXPECT_EQ(s.jobs, 2u);
  EXPECT_EQ(s.processes_started, 2u);
  EXPECT_EQ(s.processes, 1u);
  EXPECT_OK(ask<bool>(agent_stop_atom::value, waiting, std::int64_t{1000}));
  EXPECT_OK(ask<bool>(agent_stop_atom::value, ending, std::int64_t{1000}));
  ASSERT_TRUE(testing::eventually([&] {
    s = agent_->stats();
    return s.process_exits == 2;
  })) << s.processes
      << " alive";
  EXPECT_EQ(s.jobs, 0u);
  EXPECT_EQ(s.processes, 0u);
}

}  // namespace
}  // namespace meshstore
