// The process's runtime: one CAF actor system that every store, mesh and
// agent of a process shares (actor_runtime.hpp, process_runtime).

#include <atomic>
#include <mutex>
#include <set>
#include <typeindex>
#include <vector>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/mesh.hpp"

namespace meshstore::internal {

namespace {

struct Live {
  TlsOptions tls;  // the identity it speaks with on the network
  std::weak_ptr<ActorRuntime> runtime;
};

struct ProcessRuntimes {
  std::mutex mu;  // guards live and layers
  std::vector<Live> live;
  std::vector<std::function<void(caf::actor_system_config&)>> layers;
};

// Never destroyed: a store may close during static destruction.
ProcessRuntimes& runtimes() {
  static auto* r = new ProcessRuntimes();
  return *r;
}

bool same_identity(const TlsOptions& a, const TlsOptions& b) {
  return a.certificate == b.certificate && a.key == b.key && a.ca_file == b.ca_file;
}

// The message and actor types `add` registers that `have` lacks, by name;
// "std::vector<T>" and "stream<T>" go without saying when T is named.
std::vector<std::string> missing_types(const std::function<void(caf::actor_system_config&)>& add,
                                       const caf::actor_system_config& have) {
  if (!add) return {};
  caf::actor_system_config plain;
  caf::actor_system_config with;
  add(with);
  std::set<std::string> out;
  for (const auto& [rtti, name] : with.type_names_by_rtti) {
    if (plain.type_names_by_rtti.count(rtti) || have.type_names_by_rtti.count(rtti)) continue;
    out.insert(name);
  }
  for (const auto& [name, factory] : with.actor_factories) {
    if (!plain.actor_factories.count(name) && !have.actor_factories.count(name)) out.insert(name);
  }
  std::vector<std::string> named;
  for (const auto& name : out) {
    bool derived = false;
    for (const char* wrapper : {"std::vector<", "stream<"}) {
      const std::string w(wrapper);
      if (name.rfind(w, 0) == 0 && name.back() == '>' &&
          out.count(name.substr(w.size(), name.size() - w.size() - 1))) {
        derived = true;
      }
    }
    if (!derived) named.push_back(name);
  }
  return named;
}

// 'a', 'b', 'c'
std::string quoted(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
  return out;
}

Status admit(const ActorRuntime& rt, const RuntimeOptions& wanted, const std::string& who) {
  const auto missing = missing_types(wanted.add_types, rt.config());
  if (!missing.empty()) {
    const std::string names = quoted(missing);
    return Status(Errc::invalid_argument,
                  who + ": type(s) " + names +
                      " were not registered when this process's actor runtime started, and a "
                      "running runtime takes no new types: register them before the first "
                      "store, mesh or agent of the process (meshstore::add_process_types, or "
                      "the first one's MeshOptions::add_types)");
  }
  const RuntimeOptions& have = rt.options();
  static std::atomic<bool> told{false};
  const bool threads_differ =
      wanted.scheduler_threads != 0 && wanted.scheduler_threads != rt.scheduler_threads();
  const bool beats_differ =
      wanted.with_middleman && (wanted.heartbeat_interval != have.heartbeat_interval ||
                                wanted.connection_timeout != have.connection_timeout);
  if ((threads_differ || beats_differ) && !told.exchange(true)) {
    log::get("runtime")->warn(
        "{}: this process's actor runtime is running already with {} scheduler threads, "
        "heartbeats every {} ms and a {} ms connection timeout; it keeps them (every store, "
        "mesh and agent of a process shares it)",
        who, rt.scheduler_threads(), have.heartbeat_interval.count(),
        have.connection_timeout.count());
  }
  return Status();
}

// The runtime that serves `wanted`, if one lives: the one with its TLS
// identity, or any for a caller that does not use the network.
std::shared_ptr<ActorRuntime> find_live(ProcessRuntimes& r, const RuntimeOptions& wanted) {
  std::shared_ptr<ActorRuntime> any;
  for (auto it = r.live.begin(); it != r.live.end();) {
    auto rt = it->runtime.lock();
    if (!rt) {
      it = r.live.erase(it);
      continue;
    }
    if (same_identity(it->tls, wanted.tls)) return rt;
    if (!any) any = std::move(rt);
    ++it;
  }
  return wanted.with_middleman || wanted.tls.enabled() ? nullptr : any;
}

}  // namespace

bool register_process_types(std::function<void(caf::actor_system_config&)> add) {
  auto& r = runtimes();
  std::lock_guard<std::mutex> lock(r.mu);
  r.layers.push_back(std::move(add));
  return true;
}

Result<std::shared_ptr<ActorRuntime>> process_runtime(const RuntimeOptions& wanted,
                                                      const std::string& who) {
  auto& r = runtimes();
  std::lock_guard<std::mutex> lock(r.mu);
  if (auto rt = find_live(r, wanted)) {
    MESHSTORE_RETURN_IF_ERROR(admit(*rt, wanted, who));
    return rt;
  }
  RuntimeOptions options = wanted;
  options.with_middleman = true;  // later callers may need it; it cannot be added
  options.add_types = [layers = r.layers, own = wanted.add_types](caf::actor_system_config& cfg) {
    for (const auto& add : layers) add(cfg);
    if (own) own(cfg);
  };
  auto made = ActorRuntime::create(options);
  if (!made.ok()) return made.status().with_context(who);
  std::shared_ptr<ActorRuntime> rt = std::move(made).value();
  r.live.push_back(Live{wanted.tls, rt});
  return rt;
}

std::size_t stop_actors(caf::actor_system& sys, const std::vector<caf::actor>& all,
                        std::chrono::milliseconds limit) {
  std::vector<caf::actor> actors;
  for (const auto& a : all) {
    if (a) actors.push_back(a);
  }
  if (actors.empty()) return 0;
  ForeignThreadGuard guard;  // any thread may stop its actors
  caf::scoped_actor self{sys};
  for (const auto& a : actors) self->monitor(a);
  for (const auto& a : actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  std::size_t down = 0;
  bool late = false;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (down < actors.size() && !late) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    self->receive([&](const caf::down_msg&) { ++down; },
                  caf::after(std::max(left, std::chrono::milliseconds(0))) >> [&] { late = true; });
  }
  return actors.size() - down;
}

}  // namespace meshstore::internal

namespace meshstore {

Status add_process_types(std::function<void(caf::actor_system_config&)> add) {
  if (!add) return Status(Errc::invalid_argument, "add_process_types: no function given");
  auto& r = internal::runtimes();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const auto& live : r.live) {
    auto rt = live.runtime.lock();
    if (!rt) continue;
    if (auto missing = internal::missing_types(add, rt->config()); !missing.empty()) {
      const std::string names = internal::quoted(missing);
      return Status(Errc::invalid_argument,
                    "add_process_types: this process's actor runtime is running already, "
                    "without type(s) " +
                        names + ": call it before the first store, mesh or agent");
    }
  }
  r.layers.push_back(std::move(add));  // for every runtime made from now on
  return Status();
}

}  // namespace meshstore
