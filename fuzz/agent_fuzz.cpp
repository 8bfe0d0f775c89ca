// libFuzzer target for the host agent's requests: what a controller (or
// anyone who reaches the agent's port) can make it do. A live agent
// (HostAgent on loopback, its code instrumented) is sent one request per
// input over a real CAF connection, so the agent's side decodes it with
// CAF's deserializer exactly as from the network. The input's first byte
// picks how the request is made:
// - even: a launch, signal or stop built from the rest (FuzzedDataProvider):
//   any counts, ranks, first ranks, signals, job ids, graces, args and
//   environment entries;
// - odd: the rest decoded by CAF's binary deserializer into a message of
//   any registered types (the seeds are serialized agent requests), sent as
//   it is.
// The agent must answer every request within 5 s (a value or an error),
// never crash (ASan, UBSan), and keep serving: every 32 inputs a stop of an
// unknown job must answer true. No fuzzed request runs a program: a launch
// always names a program that does not exist, except the harness's own
// waiting job, which signals and stops aim at. Built with clang when it is
// present (fuzz/CMakeLists.txt); ctest runs it for a short while (label
// fuzz). With AGENT_FUZZ_WRITE_SEEDS=DIR it writes its seed corpus and exits.

#include <fuzzer/FuzzedDataProvider.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "meshstore/host_agent.hpp"
#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/connect.hpp"
#include "meshstore/internal/proc_protocol.hpp"
#include "meshstore/logging.hpp"

namespace {

using namespace meshstore;
using namespace meshstore::internal::proc;
using namespace std::chrono_literals;

// A program no fuzzed launch may start: it does not exist, so the agent
// refuses the launch before forking anything.
constexpr const char* kNoProgram = "/nonexistent/meshstore-agent-fuzz";
constexpr auto kAnswerBound = 5s;

struct Target {
  std::unique_ptr<HostAgent> agent;
  std::unique_ptr<internal::ActorRuntime> runtime;  // the fuzzer's side
  std::unique_ptr<caf::scoped_actor> self;
  agent_actor remote;
  sink_actor sink;
  std::uint64_t live_job = 0;  // the job signals and stops aim at
  std::uint64_t inputs = 0;
};

Target* target = nullptr;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "agent_fuzz: %s\n", what.c_str());
  std::abort();
}

// Sends `msg` to the agent and waits for its answer; false when none came
// within the bound (a hang).
bool answered(const caf::message& msg, caf::message* reply = nullptr) {
  bool got = false;
  // The error handler first, then a catch-all for whatever value came back
  // (CAF 0.17's blocking receive takes exactly these two).
  (*target->self)
      ->request(caf::actor_cast<caf::actor>(target->remote), kAnswerBound, msg)
      .receive(
          [&](caf::error& e) {
            got = e != caf::sec::request_timeout;
            if (!got) std::fprintf(stderr, "agent_fuzz: no answer to %s\n", to_string(msg).c_str());
            if (reply) *reply = caf::make_message(std::move(e));
          },
          caf::others >> [&](caf::message_view& x) -> caf::result<caf::message> {
            got = true;
            if (reply) *reply = x.move_content_to_message();
            return caf::message{};
          });
  return got;
}

// (Re)starts the harness's own job: one process, rank 1000, that waits on
// the lifeline every agent child holds (fd 247, process_group.cpp), so it
// ends with this process however the run ends.
void start_live_job() {
  if (target->live_job != 0) {
    answered(caf::make_message(agent_stop_atom::value, target->live_job, std::int64_t{0}));
  }
  caf::message reply;
  const auto launch =
      caf::make_message(agent_launch_atom::value, target->sink, std::string("cat"),
                        std::vector<std::string>{"/proc/self/fd/247"}, std::vector<std::string>{},
                        std::int32_t{1000}, std::int32_t{1});
  if (!answered(launch, &reply) || !reply.match_elements<std::uint64_t>()) {
    fail("the harness's own job did not start: " + to_string(reply));
  }
  target->live_job = reply.get_as<std::uint64_t>(0);
}

std::vector<std::string> strings(FuzzedDataProvider& in, std::size_t max) {
  std::vector<std::string> v(in.ConsumeIntegralInRange<std::size_t>(0, max));
  for (auto& s : v) s = in.ConsumeRandomLengthString(64);
  return v;
}

// An even input: a request built field by field. True when it touched the
// live job (so the harness starts it again).
bool structured(FuzzedDataProvider& in) {
  const std::uint64_t job =
      in.ConsumeBool() ? target->live_job : in.ConsumeIntegral<std::uint64_t>();
  caf::message msg;
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: {
      const bool with_sink = in.ConsumeBool();
      const auto count = in.ConsumeIntegral<std::int32_t>();
      const auto first = in.ConsumeIntegral<std::int32_t>();
      auto args = strings(in, 4);
      auto env = strings(in, 4);
      msg =
          caf::make_message(agent_launch_atom::value, with_sink ? target->sink : sink_actor{},
                            std::string(kNoProgram), std::move(args), std::move(env), first, count);
      break;
    }
    case 1:
      msg = caf::make_message(agent_signal_atom::value, job, in.ConsumeIntegral<std::int32_t>(),
                              in.ConsumeIntegral<std::int32_t>());
      break;
    case 2:  // the live job's rank runs: refused, logged, nothing started
      msg = caf::make_message(agent_relaunch_atom::value, job, in.ConsumeIntegral<std::int32_t>());
      break;
    default: {
      // A stop of the live job waits for it: keep that grace short.
      const auto grace = job == target->live_job ? in.ConsumeIntegralInRange<std::int64_t>(-5, 20)
                                                 : in.ConsumeIntegral<std::int64_t>();
      msg = caf::make_message(agent_stop_atom::value, job, grace);
    }
  }
  if (!answered(msg)) fail("a request went unanswered");
  return job == target->live_job;
}

// An odd input: whatever CAF's deserializer makes of the bytes. A launch
// is disarmed (its program replaced); a stop of the live job gets no grace.
bool decoded(const std::uint8_t* data, std::size_t size) {
  caf::message msg;
  caf::binary_deserializer source(target->runtime->system(), reinterpret_cast<const char*>(data),
                                  size);
  if (auto err = inspect(source, msg); err || msg.empty()) return false;
  if (msg.match_element<agent_launch_atom>(0) && msg.size() > 2 &&
      msg.match_element<std::string>(2)) {
    msg.get_mutable_as<std::string>(2) = kNoProgram;
  }
  bool live = false;
  if (msg.size() > 1 && msg.match_element<std::uint64_t>(1) &&
      msg.get_as<std::uint64_t>(1) == target->live_job) {
    live = true;
    if (msg.match_elements<agent_stop_atom, std::uint64_t, std::int64_t>()) {
      msg.get_mutable_as<std::int64_t>(2) = 0;
    }
  }
  if (!answered(msg)) fail("a decoded request went unanswered");
  return live;
}

void write_seeds(const char* dir) {
  auto& sys = target->runtime->system();
  const std::vector<caf::message> seeds = {
      caf::make_message(agent_launch_atom::value, target->sink, std::string(kNoProgram),
                        std::vector<std::string>{"--flag"}, std::vector<std::string>{"K=V"},
                        std::int32_t{0}, std::int32_t{2}),
      caf::make_message(agent_signal_atom::value, target->live_job, std::int32_t{1000},
                        std::int32_t{0}),
      caf::make_message(agent_signal_atom::value, std::uint64_t{999}, std::int32_t{0},
                        std::int32_t{15}),
      caf::make_message(agent_relaunch_atom::value, target->live_job, std::int32_t{1000}),
      caf::make_message(agent_relaunch_atom::value, std::uint64_t{999}, std::int32_t{3}),
      caf::make_message(agent_stop_atom::value, std::uint64_t{999}, std::int64_t{100}),
      caf::make_message(agent_stop_atom::value, target->live_job, std::int64_t{0}),
  };
  int n = 0;
  for (const auto& m : seeds) {
    std::vector<char> buf;
    caf::binary_serializer sink(sys, buf);
    auto copy = m;
    if (auto err = inspect(sink, copy)) fail("cannot serialize a seed: " + sys.render(err));
    std::ofstream(std::string(dir) + "/decoded_" + std::to_string(n++), std::ios::binary)
        .write("\x01", 1)
        .write(buf.data(), static_cast<std::streamsize>(buf.size()));
  }
  // Structured seeds: a launch, a signal and a stop of the live job.
  const char* structured_seeds[] = {"\x00\x00\x00", "\x00\x01\x01\x00\x00\x03\xe8\x00\x00\x00\x0f",
                                    "\x00\x01\x02\x00"};
  const std::size_t lengths[] = {3, 11, 4};
  for (int i = 0; i < 3; ++i) {
    std::ofstream(std::string(dir) + "/structured_" + std::to_string(i), std::ios::binary)
        .write(structured_seeds[i], static_cast<std::streamsize>(lengths[i]));
  }
  std::printf("agent_fuzz: wrote %d seeds to %s\n", n + 3, dir);
  std::fflush(stdout);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)log::set_level("off");  // refused requests are logged as warnings
  target = new Target;
  AgentOptions ao;
  ao.stop_grace = 50ms;
  auto agent = HostAgent::start(ao);
  if (!agent.ok()) fail("cannot start the agent: " + agent.status().to_string());
  target->agent = std::make_unique<HostAgent>(std::move(agent).value());
  internal::RuntimeOptions ro;
  ro.with_middleman = true;
  ro.add_types = add_proc_types;
  auto rt = internal::ActorRuntime::create(ro);
  if (!rt.ok()) fail("cannot start an actor system: " + rt.status().to_string());
  target->runtime = std::move(rt).value();
  auto& sys = target->runtime->system();
  auto remote = internal::connect_with_retry<agent_actor>(sys, "127.0.0.1", target->agent->port(),
                                                          10s, "host agent");
  if (!remote.ok()) fail("cannot reach the agent: " + remote.status().to_string());
  target->remote = *remote;
  target->self = std::make_unique<caf::scoped_actor>(sys);
  // Spawned with an argument: CAF 0.17's spawn of a function taking none
  // dereferences an empty argument tuple (UBSan reports it).
  target->sink = sys.spawn(
      [](int) -> sink_actor::behavior_type {
        return {[](proc_output_atom, std::int32_t, bool, const std::string&) {},
                [](proc_exit_atom, std::int32_t, const std::string&) {}};
      },
      0);
  start_live_job();
  if (const char* dir = std::getenv("AGENT_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::_Exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool live = (data[0] & 1) == 0 ? [&] {
    FuzzedDataProvider in(data + 1, size - 1);
    return structured(in);
  }()
                                       : decoded(data + 1, size - 1);
  if (live) start_live_job();
  if (++target->inputs % 32 == 0) {
    caf::message reply;
    if (!answered(caf::make_message(agent_stop_atom::value, ~std::uint64_t{0}, std::int64_t{0}),
                  &reply) ||
        !reply.match_elements<bool>() || !reply.get_as<bool>(0)) {
      fail("the agent stopped serving: " + to_string(reply));
    }
  }
  return 0;
}
