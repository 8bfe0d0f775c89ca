#include "meshstore/transports/one_sided.hpp"

#include <algorithm>
#include <memory>

#include "meshstore/transports/completion.hpp"
#include "meshstore/transports/copy_engine.hpp"
#include "meshstore/transports/region.hpp"
#include "meshstore/transports/region_description.hpp"

namespace meshstore::transports::one_sided {

std::string describe(std::uint64_t address, std::uint64_t key) {
  return DescriptionWriter().u64(address).u64(key).take();
}

Result<std::vector<Piece>> plan(const wire::RegionRef& ref, std::string_view transport,
                                std::uint64_t offset, std::byte* local, std::size_t n,
                                std::size_t chunk, const char* what) {
  MESHSTORE_RETURN_IF_ERROR(check_range(ref.region_id, ref.nbytes, offset, n, what));
  std::vector<Piece> out;
  if (n == 0) return out;
  DescriptionReader d(ref, transport, what);
  if (!d.present()) {
    // The volume describes every region it hands out (stage, open_read).
    return Status(Errc::not_found,
                  std::string(what) + " of region " + std::to_string(ref.region_id) +
                      ": the volume never described it (gone, or never handed out)");
  }
  auto address = d.u64();
  if (!address.ok()) return address.status();
  auto key = d.u64();
  if (!key.ok()) return key.status();
  MESHSTORE_RETURN_IF_ERROR(d.finish());
  if (*address == 0) return d.malformed("gives address 0");
  if (chunk == 0) chunk = n;
  out.reserve((n + chunk - 1) / chunk);
  for (std::size_t at = 0; at < n; at += chunk) {
    out.push_back(Piece{local + at, *address + offset + at, *key, std::min(chunk, n - at)});
  }
  return out;
}

namespace {

// One transfer run over several batches.
struct Run {
  Run(std::vector<Piece> p, MoveBatch m, std::size_t batches)
      : pieces(std::move(p)),
        move(std::move(m)),
        done(batches, Status(Errc::internal, "one-sided transfer dropped")) {}
  std::vector<Piece> pieces;
  MoveBatch move;
  PartedTransfer done;
};

}  // namespace

Future<void> run(std::vector<Piece> pieces, std::size_t batch, std::size_t inline_below,
                 MoveBatch move) {
  if (pieces.empty()) return make_ready_future();
  if (batch == 0) batch = 1;
  std::size_t total = 0;
  for (const auto& p : pieces) total += p.length;
  if (total < inline_below) {
    for (std::size_t i = 0; i < pieces.size(); i += batch) {
      auto s = move(pieces.data() + i, std::min(batch, pieces.size() - i));
      if (!s.ok()) return make_error_future<void>(std::move(s));
    }
    return make_ready_future();
  }
  const std::size_t batches = (pieces.size() + batch - 1) / batch;
  auto r = std::make_shared<Run>(std::move(pieces), std::move(move), batches);
  auto fut = r->done.future();
  auto& engine = CopyEngine::instance();
  for (std::size_t i = 0; i < r->pieces.size(); i += batch) {
    const std::size_t count = std::min(batch, r->pieces.size() - i);
    (void)engine.run([r, i, count] {
      // After a failure the remaining batches are skipped: the caller's
      // memory is not touched once the error is known.
      r->done.part_done(r->done.failed() ? Status() : r->move(r->pieces.data() + i, count));
    });
  }
  return fut;
}

RegistrationCache::RegistrationCache(Register reg, Deregister dereg)
    : register_(std::move(reg)), deregister_(std::move(dereg)) {}

RegistrationCache::~RegistrationCache() {
  for (const auto& [data, e] : entries_) deregister_(e.key);
}

Result<std::uint64_t> RegistrationCache::key_for(std::byte* data, std::size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(data);
  if (it != entries_.end()) {
    if (it->second.length == n) return it->second.key;
    // The same start with another length: memory reused for another size.
    deregister_(it->second.key);
    entries_.erase(it);
  }
  auto key = register_(data, n);
  if (!key.ok()) return key.status();
  entries_.emplace(data, Entry{n, *key});
  ++made_;
  return *key;
}

void RegistrationCache::forget(std::byte* data) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(data);
  if (it == entries_.end()) return;
  deregister_(it->second.key);
  entries_.erase(it);
}

std::size_t RegistrationCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

std::uint64_t RegistrationCache::registrations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return made_;
}

}  // namespace meshstore::transports::one_sided
