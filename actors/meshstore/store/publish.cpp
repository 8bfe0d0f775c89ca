// Store::StateDicts::publish and Publication: publishing a state dict by copy or
// directly out of the caller's tensors (lent to this process's lending
// volume), and the loan's end (reclaim, retain, returned).

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "meshstore/logging.hpp"
#include "meshstore/protocol/checks.hpp"
#include "meshstore/state_dicts/client_calls.hpp"
#include "meshstore/state_dicts/put_plan.hpp"
#include "meshstore/state_dicts/versions.hpp"
#include "meshstore/store.hpp"
#include "meshstore/store/device_staging.hpp"
#include "meshstore/store/metrics.hpp"
#include "meshstore/store/store_impl.hpp"

namespace meshstore {

struct Publication::Impl {
  std::string op;
  std::string prefix;
  std::uint64_t version = 0;
  PublishMode mode = PublishMode::copy;
  std::uint64_t lent_bytes = 0;
  PublishOptions options;
  caf::actor_addr client;                // weak: the store may close first
  std::weak_ptr<client::FastPath> fast;  // the client's channels (retain)
  std::chrono::milliseconds timeout{0};
  // Borrowed views of the published state dict: what retain copies.
  StateDict views;
  std::shared_ptr<const void> staging;  // the host copies some views are of
  // Completes when the last lent region is gone (the loan's token).
  Future<void> returned;
  // With revoke_on_timeout: the loan's number and the volume it was lent
  // to (weak, as `client`), for the revoke.
  std::uint64_t loan = 0;
  caf::actor_addr lender;
  std::mutex mu;            // guards reclaiming
  Future<void> reclaiming;  // the running or successful reclaim
};

namespace internal {
struct PublicationAccess {
  using Impl = Publication::Impl;
  static Publication make(std::shared_ptr<Impl> impl) {
    Publication p;
    p.impl_ = std::move(impl);
    return p;
  }
};
}  // namespace internal

const char* publish_mode_name(PublishMode mode) noexcept {
  switch (mode) {
    case PublishMode::automatic:
      return "automatic";
    case PublishMode::copy:
      return "copy";
    case PublishMode::direct:
      return "direct";
  }
  return "unknown";
}

Publication::Publication() = default;

std::uint64_t Publication::version() const noexcept { return impl_ ? impl_->version : 0; }

PublishMode Publication::mode() const noexcept { return impl_ ? impl_->mode : PublishMode::copy; }

std::uint64_t Publication::lent_bytes() const noexcept { return impl_ ? impl_->lent_bytes : 0; }

Future<void> Publication::returned() const {
  if (!impl_) return make_error_future<void>(Status(Errc::invalid_argument, "empty Publication"));
  return impl_->returned;
}

namespace {

using PubImpl = internal::PublicationAccess::Impl;
using protocol::check_key;
using state_dicts::version_key;

// The least a reclaim waits, after revoking a loan, for the transfers the
// lending volume interrupted. They end as soon as their threads run (a tcp
// send on a connection shut down fails at once), which on a loaded machine
// can take longer than a short reclaim_timeout; the bound is only how long
// a transfer that does not end is waited for.
constexpr std::chrono::milliseconds kInterruptedTransfersWait{1000};

// Waits for `returned` up to reclaim_timeout, through a timer on the client
// actor; `revoked`: after the loan was revoked, when only the lending
// volume's own (interrupted) transfers may still read the buffers, for at
// least kInterruptedTransfersWait.
Future<void> wait_returned(const std::shared_ptr<PubImpl>& pub, bool revoked = false) {
  auto done = std::make_shared<Promise<void>>(
      Status(Errc::shutdown, pub->op + " '" + pub->prefix + "': the store was closed"));
  pub->returned.on_complete([done](const Result<void>&) { done->set_value(); });
  if (done->future().ready()) return done->future();
  auto client = caf::actor_cast<caf::actor>(pub->client);
  if (!client) return done->future();  // closed: the loan ends as the volume goes
  const auto bound = revoked ? std::max(pub->options.reclaim_timeout, kInterruptedTransfersWait)
                             : pub->options.reclaim_timeout;
  const std::string version =
      pub->op + " '" + pub->prefix + "' version " + std::to_string(pub->version) + ": ";
  const std::string why =
      revoked ? version + "transfers its lending volume serves (tcp sends) still read its " +
                    "buffers " + std::to_string(bound.count()) +
                    " ms after the loan was revoked; they stay lent (reclaim again, or wait " +
                    "for returned())"
              : version + "readers still copy out of its buffers after " +
                    std::to_string(bound.count()) +
                    " ms; they stay lent (reclaim again, or wait for returned())";
  caf::delayed_anon_send(client, bound, protocol::run_atom::value, internal::Closure{[done, why] {
                           done->set_error(Status(Errc::timeout, why));
                         }});
  return done->future();
}

// Copies the version into volume memory, in place of the lent objects, if
// it is still the one published (its manifest's commit version unchanged).
Future<void> retain_copy(const std::shared_ptr<PubImpl>& pub) {
  const std::string key = version_key(pub->prefix, pub->version);
  client::ExistsCall exists;
  exists.keys = {key};
  return state_dicts::call_client(pub->client, protocol::store_exists_atom::value,
                                  std::move(exists), pub->op + " '" + key + "'")
      .then([pub, key](const std::vector<std::uint64_t>& versions) -> Future<void> {
        if (versions.empty() || versions.front() == 0) return make_ready_future();  // retired
        auto prepared = state_dicts::prepare_put(pub->views, pub->op, pub->options.put);
        if (!prepared.ok()) return make_error_future<void>(prepared.status());
        auto p = std::make_shared<Promise<void>>();
        state_dicts::put_prepared_expecting(pub->client, key, std::move(prepared).value(),
                                            versions.front(), pub->fast, pub->timeout)
            .on_complete([p](const Result<void>& r) {
              // Retired or replaced meanwhile: nothing is left to retain.
              if (!r.ok() && r.status().code() != Errc::conflict) {
                return (void)p->set_error(r.status());
              }
              p->set_value();
            });
        return p->future();
      });
}

// Waits for the loan's end within reclaim_timeout; with revoke_on_timeout,
// revokes it when that passes (the leases of readers still copying lose it,
// and their reads count as stale: they locate again) and waits as long again
// for the lending volume's own transfers.
Future<void> end_loan(const std::shared_ptr<PubImpl>& pub) {
  if (!pub->options.revoke_on_timeout || pub->loan == 0) return wait_returned(pub);
  auto ended = std::make_shared<Promise<void>>();
  wait_returned(pub).on_complete([pub, ended](const Result<void>& r) {
    if (r.ok() || r.status().code() != Errc::timeout) return (void)ended->set(r);
    auto lender = caf::actor_cast<protocol::storage_volume_actor>(pub->lender);
    if (!lender) return (void)ended->set(r);  // the store closed: the loan ends with it
    log::get("store")->warn("{} '{}' version {}: revoking its loan ({} ms passed)", pub->op,
                            pub->prefix, pub->version, pub->options.reclaim_timeout.count());
    // The bound starts again once the volume has revoked it (its mailbox
    // may be busy): from then on, only its own transfers hold the buffers.
    // A volume that stops first ends the loan itself.
    auto revoked = std::make_shared<Promise<void>>(Status(Errc::shutdown, "lending volume gone"));
    revoked->future().on_complete([pub, ended](const Result<void>&) {
      wait_returned(pub, true).on_complete(
          [ended](const Result<void>& after) { ended->set(after); });
    });
    caf::anon_send(lender, protocol::revoke_atom::value, pub->loan,
                   internal::Closure{[revoked] { revoked->set_value(); }});
  });
  return ended->future();
}

// Withdraws the version: later readers wait for the next one.
Future<void> withdraw(const std::shared_ptr<PubImpl>& pub) {
  const std::string key = version_key(pub->prefix, pub->version);
  client::RemoveCall remove;
  remove.under = true;
  remove.keys = {key};
  return state_dicts::call_client(pub->client, protocol::store_remove_atom::value,
                                  std::move(remove), pub->op + " '" + key + "': withdrawing it")
      .then([](std::size_t) {});
}

}  // namespace

Future<void> Publication::reclaim() {
  if (!impl_) return make_error_future<void>(Status(Errc::invalid_argument, "empty Publication"));
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->reclaiming.valid()) {
    const bool failed = impl_->reclaiming.ready() && !impl_->reclaiming.get().ok();
    if (!failed) return impl_->reclaiming;  // running, or done
  }
  if (impl_->mode != PublishMode::direct) {
    impl_->reclaiming = make_ready_future();
    return impl_->reclaiming;
  }
  auto pub = impl_;
  if (pub->returned.ready()) {  // retired and read already
    impl_->reclaiming = make_ready_future();
    return impl_->reclaiming;
  }
  auto first = pub->options.retain ? retain_copy(pub) : withdraw(pub);
  impl_->reclaiming = first.then([pub]() { return end_loan(pub); });
  return impl_->reclaiming;
}

namespace {

// Why this process cannot lend `sd` under `options`, or OK.
Status lending_refused(const StateDict& sd, const PublishOptions& options) {
  if (options.put.transfer_dtype) {
    for (const auto& e : sd.entries()) {
      if (e.is_tensor() && e.view.dtype() == DType::float32) {
        return Status(Errc::invalid_argument,
                      "transfer_dtype casts float32 tensors into a copy, so they cannot be lent "
                      "('" +
                          e.name + "')");
      }
    }
  }
  return Status();
}

// Where a buffer lies in a file of /dev/shm that this process maps shared
// and that still has its name: same-host readers can then map the file
// (shm) instead of reading this process's memory (cma).
struct ShmPlace {
  std::string segment;  // the name under /dev/shm
  std::uint64_t offset = 0;
};

// This process's shared mappings of named /dev/shm files (/proc/self/maps).
class SharedMappings {
 public:
  static SharedMappings of_this_process() {
    SharedMappings out;
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
      // "begin-end perms offset dev inode   path"
      std::istringstream in(line);
      std::string range, perms, offset, dev, inode;
      if (!(in >> range >> perms >> offset >> dev >> inode)) continue;
      std::string path;
      std::getline(in >> std::ws, path);
      const std::string dir = "/dev/shm/";
      if (perms.size() < 4 || perms[3] != 's' || path.rfind(dir, 0) != 0) continue;
      const std::string name = path.substr(dir.size());
      // Unlinked files (" (deleted)") cannot be opened by name; nor can
      // files in subdirectories through shm_open.
      if (name.empty() || name.find('/') != std::string::npos ||
          name.find(' ') != std::string::npos) {
        continue;
      }
      const auto dash = range.find('-');
      if (dash == std::string::npos) continue;
      Range r;
      r.begin = std::strtoull(range.substr(0, dash).c_str(), nullptr, 16);
      r.end = std::strtoull(range.substr(dash + 1).c_str(), nullptr, 16);
      r.file_offset = std::strtoull(offset.c_str(), nullptr, 16);
      r.name = name;
      out.ranges_.push_back(std::move(r));
    }
    return out;
  }
  std::optional<ShmPlace> find(const void* p, std::size_t n) const {
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    for (const auto& r : ranges_) {
      if (at >= r.begin && at <= r.end && n <= r.end - at) {
        return ShmPlace{r.name, r.file_offset + (at - r.begin)};
      }
    }
    return std::nullopt;
  }

 private:
  struct Range {
    std::uintptr_t begin = 0, end = 0;
    std::uint64_t file_offset = 0;
    std::string name;
  };
  std::vector<Range> ranges_;
};

// The items that can be lent: the caller's own whole, contiguous, non-empty
// tensors, stored as they are, in host memory (`gpu` false) or on a GPU
// (not a packed bucket, which is gathered from many).
std::vector<std::size_t> lendable_items(const client::StateDictPut& call, bool gpu) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < call.items.size(); ++i) {
    const auto& item = call.items[i];
    if (item.kind == wire::ObjectKind::tensor && !item.owned_bytes && !item.gather && !item.slice &&
        item.view.is_contiguous() && (item.view.device().type != DeviceType::cpu) == gpu &&
        item.view.nbytes() > 0) {
      out.push_back(i);
    }
  }
  return out;
}

// Moves items `lent` (ascending) of the put to `loan`'s items, with their
// shared-memory places when `places` has them; answers the bytes lent.
std::uint64_t move_lent(client::StateDictPut& call, const std::vector<std::size_t>& lent,
                        const std::vector<ShmPlace>& places, client::Loan& loan) {
  std::vector<client::PutItem> keep;
  std::uint64_t bytes = 0;
  std::size_t next = 0;
  for (std::size_t i = 0; i < call.items.size(); ++i) {
    if (next < lent.size() && lent[next] == i) {
      bytes += call.items[i].view.nbytes();
      if (next < places.size()) {
        loan.segments.push_back(places[next].segment);
        loan.offsets.push_back(places[next].offset);
      }
      loan.items.push_back(std::move(call.items[i]));
      ++next;
    } else {
      keep.push_back(std::move(call.items[i]));
    }
  }
  call.items = std::move(keep);
  return bytes;
}

// The checks of publish's options: OK, or invalid_argument naming the one
// that is wrong.
Status check_publish(const std::string& op, const std::string& prefix,
                     const PublishOptions& options) {
  auto bad = [&](const std::string& what) {
    return Status(Errc::invalid_argument, op + " '" + prefix + "': " + what);
  };
  if (options.keep < 1) return bad("keep must be at least 1, got " + std::to_string(options.keep));
  if (options.reclaim_timeout.count() <= 0) {
    return bad("reclaim_timeout must be positive, got " +
               std::to_string(options.reclaim_timeout.count()) + " ms");
  }
  if (options.mode != PublishMode::automatic && options.mode != PublishMode::copy &&
      options.mode != PublishMode::direct) {
    return bad("unknown mode " + std::to_string(static_cast<int>(options.mode)));
  }
  return Status();
}

// Which items of a prepared put this process can lend, and how.
struct LendPlan {
  std::vector<std::size_t> items;  // ascending; empty: none
  bool gpu = false;                // device tensors, for cuda-ipc
  std::vector<ShmPlace> places;    // where each lies in named shm, as far as they do
  bool in_shm = false;             // every item lies in named shm
  Status refused;                  // why none is lent (OK: `items` are)
};

// The plan for `call` under `mode`, where `forced` is the transport the
// store forces ("" for none). Host tensors are lent; GPU ones only when
// direct is asked for and no host tensor is (cuda-ipc reaches only readers
// on this host, so the store does not pick it by itself). Buffers that all
// lie in named shared memory are lent through a volume that offers shm
// too: readers on this host map them.
LendPlan plan_lending(const client::StateDictPut& call, PublishMode mode,
                      const std::string& forced) {
  LendPlan plan;
  plan.items = lendable_items(call, false);
  plan.gpu = plan.items.empty() && mode == PublishMode::direct;
  if (plan.gpu) plan.items = lendable_items(call, true);
  if (plan.items.empty()) return plan;
  if (!plan.gpu) {
    const auto maps = SharedMappings::of_this_process();
    for (auto i : plan.items) {
      auto place = maps.find(call.items[i].view.data(), call.items[i].view.nbytes());
      if (!place) break;
      plan.places.push_back(*place);
    }
  }
  plan.in_shm = !plan.gpu && plan.places.size() == plan.items.size();
  if (plan.gpu && !forced.empty() && forced != "cuda-ipc") {
    plan.refused = Status(Errc::unsupported, "this store forces transport '" + forced +
                                                 "', which cannot serve GPU memory");
  } else if (!plan.gpu && forced == "cuda-ipc") {
    plan.refused = Status(Errc::unsupported,
                          "this store forces transport 'cuda-ipc', which cannot serve host "
                          "memory");
  } else if (!plan.gpu && forced == "shm" && !plan.in_shm) {
    plan.refused = Status(Errc::unsupported,
                          "this store forces transport 'shm', and '" +
                              call.items[plan.items[plan.places.size()]].key.substr(1) +
                              "' is not in a named file of /dev/shm this process maps shared");
  }
  return plan;
}

// Makes `pub` a direct version: the plan's items of `call` are lent to
// `lender` (volume `volume_id`) under a token that completes
// pub.returned() when the last lent region goes. `entries` are what
// retain copies (GPU ones the store staged on the host included), kept
// with their `staging`.
void lend(PubImpl& pub, client::StateDictPut& call, const LendPlan& plan,
          const protocol::storage_volume_actor& lender, const std::string& volume_id,
          const StateDict& entries, std::shared_ptr<const void> staging) {
  auto& loan = call.loan.emplace();
  pub.lent_bytes =
      move_lent(call, plan.items, plan.in_shm ? plan.places : std::vector<ShmPlace>{}, loan);
  pub.mode = PublishMode::direct;
  loan.lend_to = lender;
  loan.volume = volume_id;
  // No stream: the lent tensors are whole from the start and the rest is
  // small, so readers gain nothing from following the put, and a stream's
  // reads come from one volume.
  call.stream_manifest.clear();
  auto back = std::make_shared<Promise<void>>();
  pub.returned = back->future();
  store::loans_outstanding().fetch_add(1, std::memory_order_relaxed);
  loan.token = std::shared_ptr<const void>(new char(0), [back](const char* p) {
    delete p;
    store::loans_outstanding().fetch_sub(1, std::memory_order_relaxed);
    back->set_value();
  });
  if (pub.options.revoke_on_timeout) {
    static std::atomic<std::uint64_t> loans{0};
    pub.loan = loan.revocable = ++loans;
    pub.lender = lender.address();
  }
  for (const auto& e : entries.entries()) {
    (void)(e.is_tensor() ? pub.views.insert(e.name, e.view) : pub.views.insert(e.name, *e.value));
  }
  pub.staging = std::move(staging);
}

}  // namespace

Future<Publication> Store::StateDicts::publish(std::string prefix, const StateDict& sd,
                                               const PublishOptions& options) {
  const store::Meter meter(Impl::metered(impl_.get()), store::Op::publish);
  return meter([&]() -> Future<Publication> {
    const std::string op = "publish";
    if (auto s = check_key(op, prefix); !s.ok()) return make_error_future<Publication>(s);
    if (auto s = check_publish(op, prefix, options); !s.ok()) {
      return make_error_future<Publication>(s);
    }
    const caf::actor_addr client = Impl::client_address(impl_.get());
    if (!client) return client::closed_future<Publication>(op + " '" + prefix + "'");
    auto pub = std::make_shared<PubImpl>();
    pub->op = op;
    pub->prefix = prefix;
    pub->options = options;
    pub->client = client;
    pub->fast = impl_->fast;
    pub->timeout = impl_->options.limits.request_timeout;
    pub->returned = make_ready_future();
    // A version by copy takes the one route of every state-dict put (the
    // caller's channel, its layout kept by prefix).
    auto by_copy = [&] {
      return publish_copy(prefix, sd, options.keep, options.put, op)
          .then([pub](std::uint64_t version) {
            pub->version = version;
            return internal::PublicationAccess::make(pub);
          });
    };
    const bool direct = options.mode == PublishMode::direct;
    const Status refused =
        options.mode == PublishMode::copy ? Status() : lending_refused(sd, options);
    if (options.mode == PublishMode::copy || (!refused.ok() && !direct)) return by_copy();
    if (!refused.ok()) {  // direct, and nothing can be lent: before any byte is prepared
      return make_error_future<Publication>(refused.with_context(op + " '" + prefix + "'"));
    }
    auto st = store::staging(op, false);
    auto use = store::put_source(sd, *st, options.put);
    if (!use.ok()) return make_error_future<Publication>(use.status());
    auto prepared_or = state_dicts::prepare_put(**use, op, options.put);
    if (!prepared_or.ok()) {
      return make_error_future<Publication>(prepared_or.status().with_context(prefix));
    }
    auto prepared = std::move(prepared_or).value();
    const auto plan = plan_lending(prepared->call, options.mode, impl_->options.transport.name);
    if (!plan.refused.ok() && direct) {
      return make_error_future<Publication>(plan.refused.with_context(op + " '" + prefix + "'"));
    }
    if (!plan.refused.ok() || plan.items.empty()) return by_copy();
    using Kind = Impl::LendKind;
    auto lending = impl_->lending_volume(plan.gpu      ? Kind::device
                                         : plan.in_shm ? Kind::shared_memory
                                                       : Kind::process);
    if (!lending.ok() && direct) {
      return make_error_future<Publication>(
          lending.status().with_context(op + " '" + prefix + "'"));
    }
    if (!lending.ok()) {
      log::get("store")->info("{} '{}': publishing by copy: {}", op, prefix,
                              lending.status().to_string());
      return by_copy();
    }
    lend(*pub, prepared->call, plan, lending->handle, lending->volume_id, **use, st);
    // Fenced as a copy is; the host copies live till it is done.
    return state_dicts::publish_prepared(client, prefix, std::move(prepared), options.keep, op,
                                         impl_->fast, impl_->options.limits.request_timeout)
        .then([pub, st](std::uint64_t version) {
          pub->version = version;
          return internal::PublicationAccess::make(pub);
        });
  }());
}

}  // namespace meshstore
