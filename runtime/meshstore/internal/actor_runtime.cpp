#include "meshstore/internal/actor_runtime.hpp"

#include <algorithm>
#include <caf/io/all.hpp>
#include <caf/openssl/manager.hpp>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/internal/connect.hpp"
#include "meshstore/internal/idle_spin.hpp"
#include "meshstore/internal/tls_watch.hpp"
#include "meshstore/mesh_values.hpp"

namespace meshstore::internal {

namespace {

// The message a meshstore error carries as its CAF context.
std::string context_message(const caf::message& ctx) {
  return ctx.match_elements<std::string>() ? ctx.get_as<std::string>(0) : std::string();
}

}  // namespace

caf::error to_caf_error(const Status& s) {
  if (s.ok()) return caf::error();
  return caf::error(static_cast<std::uint8_t>(s.code()), kErrorCategory,
                    caf::make_message(s.message()));
}

Status from_caf_error(const caf::error& e, std::string_view context) {
  if (!e) return Status();
  const std::string ctx(context);
  if (e.category() == kErrorCategory) {
    const std::string msg = context_message(e.context());
    const auto code = e.code();
    if (code > static_cast<std::uint8_t>(kLastErrc)) {
      return Status(Errc::internal,
                    ctx + ": unknown meshstore error code " + std::to_string(code) + ": " + msg);
    }
    return Status(static_cast<Errc>(code), ctx.empty() ? msg : ctx + ": " + msg);
  }
  const std::string rendered = caf::to_string(e);
  if (e.category() == caf::atom("system")) {
    switch (static_cast<caf::sec>(e.code())) {
      case caf::sec::request_timeout:
        return Status(Errc::timeout, ctx + ": no answer in time (" + rendered + ")");
      case caf::sec::request_receiver_down:
      case caf::sec::remote_linking_failed:
      case caf::sec::cannot_connect_to_node:
      case caf::sec::no_route_to_receiving_node:
      case caf::sec::cannot_forward_to_invalid_actor:
      case caf::sec::connection_timeout:
        return Status(Errc::unavailable, ctx + ": peer unavailable (" + rendered + ")");
      case caf::sec::unexpected_message:
      case caf::sec::unexpected_response:
      case caf::sec::unexpected_actor_messaging_interface:
      case caf::sec::malformed_basp_message:
        return Status(Errc::protocol_error, ctx + ": unexpected message (" + rendered + ")");
      default:
        break;
    }
  }
  return Status(Errc::internal, ctx + ": " + rendered);
}

namespace {

struct MeshstoreConfig : caf::actor_system_config {
  MeshstoreConfig(int threads, const RuntimeOptions& options) {
    set("scheduler.max-threads", threads);
    // An idle worker goes from its 100 spinning polls straight to waiting.
    // The default 500 "moderate" polls, 50 us apart, wake it 20,000 times a
    // second for 25 ms after every burst of messages, preempting the copy
    // engine's threads on a 2-vCPU host: store_bench --scenario reshard
    // went from 0.54-0.57 to 0.66-0.70 x memcpy, and small round trips got
    // no slower (docs/internals/wire-and-threads.md, "Scheduler threads and
    // waiting").
    set("work-stealing.moderate-poll-attempts", static_cast<std::size_t>(0));
    // How long it spins first: longer on a host with cores to spare, where
    // waking a sleeping worker cost a small put most of its time
    // (scheduler_polls()).
    set("work-stealing.aggressive-poll-attempts", scheduler_polls());
    set("logger.verbosity", caf::atom("quiet"));
    add_error_category(
        kErrorCategory,
        [](std::uint8_t code, caf::atom_value, const caf::message& ctx) -> std::string {
          return "meshstore(" + std::string(errc_name(static_cast<Errc>(code))) + ": " +
                 context_message(ctx) + ")";
        });
    add_message_type<std::vector<std::uint64_t>>("std::vector<uint64_t>");
    add_message_type<std::vector<char>>("std::vector<char>");
    // Floating-point values as their bits (mesh_values.hpp, Exact).
    add_message_type<Exact<float>>("meshstore::Exact<float>");
    add_message_type<Exact<double>>("meshstore::Exact<double>");
    add_message_type<std::vector<Exact<float>>>("std::vector<meshstore::Exact<float>>");
    add_message_type<std::vector<Exact<double>>>("std::vector<meshstore::Exact<double>>");
    add_message_type<CallContext>("meshstore::CallContext");
    if (options.add_types) options.add_types(*this);
    if (options.with_middleman) {
      load<caf::io::middleman>();
      set("middleman.heartbeat-interval", caf::timespan{options.heartbeat_interval});
      set("middleman.connection-timeout", caf::timespan{options.connection_timeout});
      // Deserialize incoming messages on the middleman's own thread, not on
      // BASP workers. CAF 0.17 names a connection by its socket's fd and
      // cleans a closed one up only once every message read before the
      // close is delivered; while a worker is still deserializing, the
      // kernel can hand that fd to a new connection, whose handshake the
      // late cleanup then erases: its replies are dropped for good
      // (docs/internals/connections.md, "No BASP workers").
      set("middleman.workers", static_cast<std::size_t>(0));
      if (options.tls.enabled()) {
        // Setting any of these turns on CAF's mutual authentication:
        // SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT on both ends.
        load<caf::openssl::manager>();
        openssl_certificate = options.tls.certificate;
        openssl_key = options.tls.key;
        openssl_cafile = options.tls.ca_file;
      }
    }
  }
};

// Every live actor system an ActorRuntime made, by its logger, for
// ForeignThreadGuard. Never destroyed: guards may run during exit.
struct Systems {
  std::mutex mu;  // guards by_logger
  std::unordered_map<const caf::logger*, caf::actor_system*> by_logger;
};
Systems& systems() {
  static auto* s = new Systems();
  return *s;
}
void remember_system(caf::actor_system& sys) {
  std::lock_guard<std::mutex> lock(systems().mu);
  systems().by_logger[&sys.logger()] = &sys;
}
void forget_system(caf::actor_system& sys) {
  std::lock_guard<std::mutex> lock(systems().mu);
  systems().by_logger.erase(&sys.logger());
}

}  // namespace

caf::actor_system* system_of(const caf::logger* logger) noexcept {
  std::lock_guard<std::mutex> lock(systems().mu);
  auto it = systems().by_logger.find(logger);
  return it == systems().by_logger.end() ? nullptr : it->second;
}

Result<std::unique_ptr<ActorRuntime>> ActorRuntime::create(const RuntimeOptions& options) {
  if (options.scheduler_threads < 0 || options.scheduler_threads > 256) {
    return Status(Errc::invalid_argument, "scheduler_threads must be in [0, 256], got " +
                                              std::to_string(options.scheduler_threads));
  }
  if (options.tls.enabled()) {
    if (!options.with_middleman) {
      return Status(Errc::invalid_argument, "TLS options given to a runtime without a network");
    }
    MESHSTORE_RETURN_IF_ERROR(check_tls(options.tls));
  }
  int threads = options.scheduler_threads;
  if (threads == 0) {
    threads = std::clamp(static_cast<int>(usable_cpus()), 2, 8);
  }
  std::unique_ptr<ActorRuntime> rt(new ActorRuntime());
  rt->options_ = options;
  rt->options_.add_types = nullptr;
  rt->threads_ = threads;
  rt->tls_ = options.with_middleman && options.tls.enabled();
  rt->config_ = std::make_unique<MeshstoreConfig>(threads, options);
  {
    ForeignThreadGuard guard;  // the caller's thread may outlive the system
    rt->system_ = std::make_unique<caf::actor_system>(*rt->config_);
  }
  remember_system(*rt->system_);
  if (rt->tls_) tls_watch_begin();
  return rt;
}

Result<std::string> ActorRuntime::door(const std::string& host) {
  if (!options_.with_middleman) {
    return Status(Errc::unavailable, "door: this runtime has no network");
  }
  std::lock_guard<std::mutex> lock(doors_mu_);
  for (const auto& [h, port] : doors_) {
    if (h == host) return host + ":" + std::to_string(port);
  }
  ForeignThreadGuard guard;  // any thread may open it
  if (!door_) {
    // Nothing comes through it but connections: it answers no message.
    door_ = system_->spawn([]() -> caf::behavior { return {[](caf::ok_atom) {}}; });
  }
  auto port = publish_actor(*system_, door_, 0, host, false);
  if (!port.ok()) return port.status().with_context("door on " + host);
  doors_.emplace_back(host, *port);
  return host + ":" + std::to_string(*port);
}

ActorRuntime::~ActorRuntime() {
  if (door_) {
    ForeignThreadGuard guard;
    for (const auto& [host, port] : doors_) unpublish_actor(*system_, door_, port);
    caf::anon_send_exit(door_, caf::exit_reason::user_shutdown);
    door_ = nullptr;
  }
  if (system_) forget_system(*system_);
  system_.reset();
  if (tls_) tls_watch_end();
  config_.reset();
}

}  // namespace meshstore::internal
