#include "meshstore/store.hpp"

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_set>

#include "meshstore/actors/client.hpp"
#include "meshstore/dtype_cast.hpp"
#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/store/calls.hpp"
#include "meshstore/store/checks.hpp"
#include "meshstore/store/device_staging.hpp"
#include "meshstore/store/scratch_pool.hpp"
#include "meshstore/store/store_impl.hpp"
#include "meshstore/transports/registry.hpp"

namespace meshstore {

namespace {

using facade::bytes_item;
using facade::check_key;
using facade::check_keys;
using facade::check_view;
using facade::closed_future;
using facade::get_target;
using facade::make_promise;
using facade::put_source;
using facade::ScratchPool;
using facade::single_get;
using facade::staging;
using internal::cuda::on_device;
using state_dicts::ManifestCache;

}  // namespace

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;
Store::~Store() = default;

std::uint16_t Store::port() const noexcept { return impl_ ? impl_->port : 0; }
std::string Store::address() const { return impl_ ? impl_->address : std::string(); }

// -- tensors -------------------------------------------------------------

Future<void> Store::put(std::string key, const TensorView& tensor) {
  std::vector<std::pair<std::string, TensorView>> items;
  items.emplace_back(std::move(key), tensor);
  auto call_items = std::move(items);
  if (auto s = check_key("put", call_items.front().first); !s.ok())
    return make_error_future<void>(s);
  if (auto s = check_view("put", call_items.front().first, tensor); !s.ok())
    return make_error_future<void>(s);
  auto st = staging("put");
  auto host = st->source(tensor, call_items.front().first);
  if (!host.ok()) return make_error_future<void>(host.status());
  actors::PutCall call;
  call.op = "put";
  call.items.push_back(
      actors::PutItem{call_items.front().first, *host, wire::ObjectKind::tensor, nullptr});
  const std::string what = "put '" + call_items.front().first + "'";
  auto fut = Impl::call(impl_.get(), actors::store_put_atom::value, std::move(call), what);
  return fut.then([st](const std::vector<std::uint64_t>&) {});
}

Future<void> Store::put(std::string key, const TensorView& shard, const Shape& global_shape,
                        const Placement& placement, std::int64_t rank) {
  auto mine = placement.shard_for(global_shape, rank);
  if (!mine.ok()) return make_error_future<void>(mine.status().with_context("put '" + key + "'"));
  return put_shard(std::move(key), shard, mine->slice, mine->replicas);
}

Future<void> Store::put(std::string key, const TensorView& shard, const TensorSlice& slice) {
  return put_shard(std::move(key), shard, slice, 1);
}

Future<void> Store::put_shard(std::string key, const TensorView& shard, const TensorSlice& slice,
                              std::uint32_t replicas) {
  const std::string op = "put";
  if (auto s = check_key(op, key); !s.ok()) return make_error_future<void>(s);
  if (auto s = check_view(op, key, shard); !s.ok()) return make_error_future<void>(s);
  if (shard.shape() != slice.local_shape()) {
    return make_error_future<void>(Status(
        Errc::shape_mismatch,
        "put '" + key + "': the shard has shape " + shape_to_string(shard.shape()) +
            ", its slice " + slice.to_string() + " needs " + shape_to_string(slice.local_shape())));
  }
  // A replicated box is checksummed on the host.
  auto st = staging(op, replicas == 1);
  auto host = st->source(shard, key);
  if (!host.ok()) return make_error_future<void>(host.status());
  actors::PutCall call;
  call.op = op;
  actors::PutItem item{key, *host, wire::ObjectKind::tensor, nullptr};
  item.slice = slice;
  item.replicas = replicas;
  // Replicas are compared by the controller: ranks holding the same box
  // must put the same bytes.
  if (replicas > 1) item.checksum = content_checksum(*host);
  call.items.push_back(std::move(item));
  const std::string what = "put '" + key + "' slice " + slice.to_string();
  return Impl::call(impl_.get(), actors::store_put_atom::value, std::move(call), what)
      .then([st](const std::vector<std::uint64_t>&) {});
}

Future<void> Store::put_batch(std::vector<std::pair<std::string, TensorView>> items) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : items) keys.push_back(k);
  if (auto s = check_keys("put_batch", keys, true); !s.ok()) return make_error_future<void>(s);
  actors::PutCall call;
  call.op = "put_batch";
  for (auto& [k, v] : items) {
    if (auto s = check_view("put_batch", k, v); !s.ok()) return make_error_future<void>(s);
  }
  auto st = staging("put_batch");
  for (auto& [k, v] : items) {
    auto host = st->source(v, k);
    if (!host.ok()) return make_error_future<void>(host.status());
    call.items.push_back(actors::PutItem{std::move(k), *host, wire::ObjectKind::tensor, nullptr});
  }
  if (call.items.empty()) return make_ready_future();
  const std::string what = "put_batch of " + std::to_string(call.items.size()) + " keys";
  auto fut = Impl::call(impl_.get(), actors::store_put_atom::value, std::move(call), what);
  return fut.then([st](const std::vector<std::uint64_t>&) {});
}

Future<Tensor> Store::get(std::string key) {
  if (auto s = check_key("get", key); !s.ok()) return make_error_future<Tensor>(s);
  const std::string what = "get '" + key + "'";
  return Impl::call(impl_.get(), actors::store_get_atom::value,
                    single_get("get", actors::GetMode::tensor, std::move(key)), what)
      .then([](const actors::GetOutput& out) { return out.tensors.front(); });
}

Future<Tensor> Store::get(std::string key, const TensorSlice& slice) {
  if (auto s = check_key("get", key); !s.ok()) return make_error_future<Tensor>(s);
  const std::string what = "get '" + key + "' slice " + slice.to_string();
  auto call = single_get("get", actors::GetMode::tensor, std::move(key));
  call.slices.push_back(slice);
  return Impl::call(impl_.get(), actors::store_get_atom::value, std::move(call), what)
      .then([](const actors::GetOutput& out) { return out.tensors.front(); });
}

Future<void> Store::get_into(std::string key, const TensorView& dst, const TensorSlice& slice) {
  const std::string op = "get_into";
  if (auto s = check_key(op, key); !s.ok()) return make_error_future<void>(s);
  if (auto s = check_view(op, key, dst); !s.ok()) return make_error_future<void>(s);
  const std::string what = "get_into '" + key + "' slice " + slice.to_string();
  auto st = staging(op);
  auto host = st->target(dst, key);
  if (!host.ok()) return make_error_future<void>(host.status());
  auto call = single_get(op, actors::GetMode::into, std::move(key));
  call.dsts.push_back(*host);
  call.slices.push_back(slice);
  return Impl::call(impl_.get(), actors::store_get_atom::value, std::move(call), what)
      .then([st](const actors::GetOutput&) { return st->finish(); });
}

Future<Tensor> Store::get_view(std::string key) {
  if (auto s = check_key("get_view", key); !s.ok()) return make_error_future<Tensor>(s);
  const std::string what = "get_view '" + key + "'";
  return Impl::call(impl_.get(), actors::store_get_atom::value,
                    single_get("get_view", actors::GetMode::view, std::move(key)), what)
      .then([](const actors::GetOutput& out) { return out.tensors.front(); });
}

Future<std::vector<Tensor>> Store::get_batch(std::vector<std::string> keys) {
  if (auto s = check_keys("get_batch", keys, false); !s.ok())
    return make_error_future<std::vector<Tensor>>(s);
  if (keys.empty()) return make_ready_future(std::vector<Tensor>{});
  actors::GetCall call;
  call.op = "get_batch";
  call.mode = actors::GetMode::tensor;
  call.keys = std::move(keys);
  return Impl::call(impl_.get(), actors::store_get_atom::value, std::move(call), "get_batch")
      .then([](const actors::GetOutput& out) { return out.tensors; });
}

Future<void> Store::get_into(std::string key, const TensorView& dst) {
  std::vector<std::pair<std::string, TensorView>> items;
  items.emplace_back(std::move(key), dst);
  return get_into_batch(std::move(items));
}

Future<void> Store::get_into_batch(std::vector<std::pair<std::string, TensorView>> items) {
  const std::string op = items.size() == 1 ? "get_into" : "get_into_batch";
  actors::GetCall call;
  call.op = op;
  call.mode = actors::GetMode::into;
  for (auto& [k, v] : items) {
    call.keys.push_back(k);
    call.dsts.push_back(v);
  }
  if (auto s = check_keys(op, call.keys, false); !s.ok()) return make_error_future<void>(s);
  for (std::size_t i = 0; i < call.keys.size(); ++i) {
    if (auto s = check_view(op, call.keys[i], call.dsts[i]); !s.ok())
      return make_error_future<void>(s);
  }
  if (call.keys.empty()) return make_ready_future();
  auto st = staging(op);
  for (std::size_t i = 0; i < call.keys.size(); ++i) {
    auto host = st->target(call.dsts[i], call.keys[i]);
    if (!host.ok()) return make_error_future<void>(host.status());
    call.dsts[i] = *host;
  }
  const std::string what = items.size() == 1 ? op + " '" + call.keys.front() + "'" : op;
  return Impl::call(impl_.get(), actors::store_get_atom::value, std::move(call), what)
      .then([st](const actors::GetOutput&) { return st->finish(); });
}

// -- objects -------------------------------------------------------------

Future<void> Store::put_object(std::string key, std::string bytes) {
  if (auto s = check_key("put_object", key); !s.ok()) return make_error_future<void>(s);
  actors::PutCall call;
  call.op = "put_object";
  call.items.push_back(bytes_item(key, std::move(bytes), wire::ObjectKind::object));
  const std::string what = "put_object '" + key + "'";
  auto fut = Impl::call(impl_.get(), actors::store_put_atom::value, std::move(call), what);
  return fut.then([](const std::vector<std::uint64_t>&) {});
}

Future<std::string> Store::get_object(std::string key) {
  if (auto s = check_key("get_object", key); !s.ok()) return make_error_future<std::string>(s);
  actors::GetCall call;
  call.op = "get_object";
  call.mode = actors::GetMode::object;
  call.keys.push_back(key);
  return Impl::call(impl_.get(), actors::store_get_atom::value, std::move(call),
                    "get_object '" + key + "'")
      .then([](const actors::GetOutput& out) { return out.object; });
}

// -- key space -----------------------------------------------------------

Future<std::vector<std::string>> Store::keys(std::string prefix) {
  if (prefix.find('\0') != std::string::npos) {
    return make_error_future<std::vector<std::string>>(
        Status(Errc::invalid_argument, "keys: prefix contains a NUL byte"));
  }
  actors::KeysCall call;
  const std::string what = "keys '" + prefix + "'";
  call.prefix = std::move(prefix);
  auto fut = Impl::call(impl_.get(), actors::store_keys_atom::value, std::move(call), what);
  return fut;
}

Future<std::vector<KeyInfo>> Store::list(std::string prefix) {
  if (prefix.find('\0') != std::string::npos) {
    return make_error_future<std::vector<KeyInfo>>(
        Status(Errc::invalid_argument, "list: prefix contains a NUL byte"));
  }
  actors::ListCall call;
  const std::string what = "list '" + prefix + "'";
  call.prefix = std::move(prefix);
  auto fut = Impl::call(impl_.get(), actors::store_list_atom::value, std::move(call), what);
  return fut.then([](const std::vector<wire::KeyRecord>& records) {
    std::vector<KeyInfo> out;
    out.reserve(records.size());
    for (const auto& r : records) {
      out.push_back(KeyInfo{r.key, r.kind == wire::ObjectKind::object, r.dtype, r.shape, r.nbytes(),
                            r.version, r.shards.size()});
    }
    return out;
  });
}

Future<bool> Store::exists(std::string key) {
  if (auto s = check_key("exists", key); !s.ok()) return make_error_future<bool>(s);
  actors::ExistsCall call;
  const std::string what = "exists '" + key + "'";
  call.keys.push_back(std::move(key));
  auto fut = Impl::call(impl_.get(), actors::store_exists_atom::value, std::move(call), what);
  return fut.then([](const std::vector<std::uint64_t>& v) { return !v.empty() && v.front() != 0; });
}

Future<void> Store::remove(std::string key) {
  if (auto s = check_key("remove", key); !s.ok()) return make_error_future<void>(s);
  actors::RemoveCall call;
  const std::string what = "remove '" + key + "'";
  call.keys.push_back(std::move(key));
  call.single = true;
  auto fut = Impl::call(impl_.get(), actors::store_remove_atom::value, std::move(call), what);
  return fut.then([](std::size_t) {});
}

Future<std::size_t> Store::remove_batch(std::vector<std::string> keys) {
  if (auto s = check_keys("remove_batch", keys, false); !s.ok())
    return make_error_future<std::size_t>(s);
  if (keys.empty()) return make_ready_future<std::size_t>(0);
  actors::RemoveCall call;
  const std::string what = "remove_batch of " + std::to_string(keys.size()) + " keys";
  call.keys = std::move(keys);
  auto fut = Impl::call(impl_.get(), actors::store_remove_atom::value, std::move(call), what);
  return fut;
}

// -- state dicts ------------------------------------------------------------
//
// These calls chain several client calls. Their continuations hold only a
// weak address of the client actor (never the Store or its Impl, which the
// caller may destroy meanwhile): a call after the store closed fails with
// Errc::shutdown.

namespace {

constexpr char kManifestMagic[] = "meshstore.state_dict.v3";
constexpr int kMaxStateDictAttempts = 8;
// A reader waiting for the next version looks at the pointer again this often.
constexpr std::chrono::milliseconds kStreamWaitSlice{1000};
// Packed tensors start at multiples of this inside the blob.
constexpr std::uint64_t kPackAlign = 64;

// How a state dict entry is stored.
enum class EntryKind : std::uint8_t { tensor = 0, value = 1, packed = 2 };

struct ManifestEntry {
  std::string name;
  EntryKind kind = EntryKind::tensor;
  DType dtype = DType::uint8;
  Shape shape;
  std::uint64_t offset = 0;  // packed: where it starts in the blob

  std::uint64_t nbytes() const {
    return static_cast<std::uint64_t>(shape_numel(shape)) * dtype_size(dtype);
  }
};

// The names in order, how each is stored, and the packed tensors' bytes:
// offsets run over all of them, cut into buckets (one object each) that
// start at `bucket_starts`. No packed tensor straddles two buckets.
struct Manifest {
  std::vector<ManifestEntry> entries;
  std::uint64_t packed_bytes = 0;
  std::vector<std::uint64_t> bucket_starts;  // starts at 0; empty when nothing is packed

  // The buckets that hold bytes (none when packed_bytes is 0).
  std::size_t buckets() const { return packed_bytes == 0 ? 0 : bucket_starts.size(); }
  std::uint64_t bucket_begin(std::size_t b) const { return bucket_starts[b]; }
  std::uint64_t bucket_end(std::size_t b) const {
    return b + 1 < bucket_starts.size() ? bucket_starts[b + 1] : packed_bytes;
  }
  std::uint64_t bucket_bytes(std::size_t b) const { return bucket_end(b) - bucket_begin(b); }
  // The bucket holding offset `at`.
  std::size_t bucket_of(std::uint64_t at) const {
    auto it = std::upper_bound(bucket_starts.begin(), bucket_starts.end(), at);
    return it == bucket_starts.begin() ? 0
                                       : static_cast<std::size_t>(it - bucket_starts.begin()) - 1;
  }
};

// Appends a tensor entry, packed when it has at most `pack_max` bytes (at
// a kPackAlign-aligned offset; in a new bucket when it would take the
// current one past `bucket_max` bytes, 0 = no limit), else stored alone.
void lay_out(Manifest& m, std::string name, DType dtype, Shape shape, std::uint64_t pack_max,
             std::uint64_t bucket_max) {
  ManifestEntry me;
  me.name = std::move(name);
  me.dtype = dtype;
  me.shape = std::move(shape);
  if (me.nbytes() <= pack_max) {
    me.kind = EntryKind::packed;
    me.offset = (m.packed_bytes + kPackAlign - 1) / kPackAlign * kPackAlign;
    if (m.bucket_starts.empty()) m.bucket_starts.push_back(0);
    if (bucket_max > 0 && me.nbytes() > 0 && me.offset > m.bucket_starts.back() &&
        me.offset + me.nbytes() - m.bucket_starts.back() > bucket_max) {
      m.bucket_starts.push_back(me.offset);
    }
    m.packed_bytes = me.offset + me.nbytes();
  }
  m.entries.push_back(std::move(me));
}

// Appends a value entry: stored alone as the uint8 tensor of its encoding.
void lay_out_value(Manifest& m, std::string name, const Value& v) {
  ManifestEntry me;
  me.name = std::move(name);
  me.kind = EntryKind::value;
  me.dtype = DType::uint8;
  me.shape = {static_cast<std::int64_t>(v.encode().size())};
  m.entries.push_back(std::move(me));
}

std::string entry_key(const std::string& key, const std::string& name) { return key + "/" + name; }
// The key of a state dict's packed bucket `b` ('#' keeps it apart from
// entry keys): "KEY#packed", then "KEY#packed.1", "KEY#packed.2", ...
std::string blob_key(const std::string& key, std::size_t b = 0) {
  return b == 0 ? key + "#packed" : key + "#packed." + std::to_string(b);
}

template <class T>
void put_pod(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

std::string encode_manifest(const Manifest& m) {
  std::string out(kManifestMagic, sizeof(kManifestMagic));
  put_pod<std::uint64_t>(out, m.packed_bytes);
  const std::size_t buckets = m.buckets();
  put_pod<std::uint32_t>(out, static_cast<std::uint32_t>(buckets));
  for (std::size_t b = 0; b < buckets; ++b) put_pod<std::uint64_t>(out, m.bucket_starts[b]);
  put_pod<std::uint32_t>(out, static_cast<std::uint32_t>(m.entries.size()));
  for (const auto& e : m.entries) {
    put_pod<std::uint8_t>(out, static_cast<std::uint8_t>(e.kind));
    put_pod<std::uint32_t>(out, static_cast<std::uint32_t>(e.name.size()));
    out += e.name;
    put_pod<std::uint8_t>(out, static_cast<std::uint8_t>(e.dtype));
    put_pod<std::uint32_t>(out, static_cast<std::uint32_t>(e.shape.size()));
    for (auto d : e.shape) put_pod<std::int64_t>(out, d);
    put_pod<std::uint64_t>(out, e.offset);
  }
  return out;
}

Result<Manifest> decode_manifest(const std::string& bytes, const std::string& key) {
  auto bad = [&](const std::string& why) {
    return Status(Errc::wrong_kind, "'" + key + "' does not hold a state dict (" + why + ")");
  };
  std::size_t pos = sizeof(kManifestMagic);
  if (bytes.size() < pos || bytes.compare(0, pos, std::string(kManifestMagic, pos)) != 0) {
    return bad("no manifest");
  }
  auto get = [&](auto& v) {
    if (bytes.size() - pos < sizeof(v)) return false;
    std::memcpy(&v, bytes.data() + pos, sizeof(v));
    pos += sizeof(v);
    return true;
  };
  Manifest m;
  std::uint32_t n = 0;
  std::uint32_t buckets = 0;
  if (!get(m.packed_bytes) || !get(buckets)) return bad("truncated");
  if ((m.packed_bytes == 0) != (buckets == 0) || buckets > bytes.size() / 8) {
    return bad("malformed buckets");
  }
  for (std::uint32_t b = 0; b < buckets; ++b) {
    std::uint64_t start = 0;
    if (!get(start)) return bad("truncated");
    if (b == 0 ? start != 0 : (start <= m.bucket_starts.back() || start >= m.packed_bytes)) {
      return bad("malformed buckets");
    }
    m.bucket_starts.push_back(start);
  }
  if (!get(n)) return bad("truncated");
  for (std::uint32_t i = 0; i < n; ++i) {
    ManifestEntry e;
    std::uint8_t kind = 0, dtype = 0;
    std::uint32_t len = 0, ndim = 0;
    if (!get(kind) || kind > 2 || !get(len) || bytes.size() - pos < len)
      return bad("malformed entry");
    e.kind = static_cast<EntryKind>(kind);
    e.name = bytes.substr(pos, len);
    pos += len;
    if (!get(dtype) || !is_valid_dtype(dtype) || !get(ndim) || ndim > 64)
      return bad("malformed entry");
    e.dtype = static_cast<DType>(dtype);
    for (std::uint32_t d = 0; d < ndim; ++d) {
      std::int64_t dim = 0;
      if (!get(dim) || dim < 0) return bad("malformed shape");
      e.shape.push_back(dim);
    }
    if (!get(e.offset)) return bad("truncated");
    if (e.kind == EntryKind::packed &&
        (e.offset > m.packed_bytes || e.nbytes() > m.packed_bytes - e.offset)) {
      return bad("packed entry outside the blob");
    }
    if (e.kind == EntryKind::packed && e.nbytes() > 0 &&
        e.offset + e.nbytes() > m.bucket_end(m.bucket_of(e.offset))) {
      return bad("packed entry across two buckets");
    }
    m.entries.push_back(std::move(e));
  }
  if (pos != bytes.size()) return bad("trailing bytes");
  return m;
}

// Sends `c` to the client actor at `client` with a fresh promise.
template <class Atom, class Call>
auto call_client(const caf::actor_addr& client, Atom atom, Call c, const std::string& what) {
  using T = typename decltype(c.promise)::element_type::value_type;
  c.promise = make_promise<T>(what);
  auto fut = c.promise->future();
  auto hdl = caf::actor_cast<caf::actor>(client);
  if (!hdl) return closed_future<T>(what);
  caf::anon_send(hdl, atom, std::move(c));
  return fut;
}

// Reads object `key`; `fresh`: located at the controller, not from the
// client's location cache (version pointers, GetCall::fresh).
Future<std::string> object_of(const caf::actor_addr& client, const std::string& key,
                              const std::string& op, bool fresh) {
  actors::GetCall call;
  call.op = op;
  call.mode = actors::GetMode::object;
  call.keys.push_back(key);
  call.fresh = fresh;
  return call_client(client, actors::store_get_atom::value, std::move(call), op + " '" + key + "'")
      .then([](const actors::GetOutput& out) { return out.object; });
}

// A state dict's manifest as stored (its bytes) and decoded.
struct Snapshot {
  std::string bytes;
  Manifest manifest;
};

Result<Snapshot> decode_snapshot(const Tensor& t, const std::string& key, const std::string& op) {
  Snapshot snap;
  snap.bytes.assign(static_cast<const char*>(t.data()), t.nbytes());
  auto m = decode_manifest(snap.bytes, key);
  if (!m.ok()) return m.status().with_context(op);
  snap.manifest = std::move(m).value();
  return snap;
}

// Reads the manifest of the state dict under `key`.
Future<Snapshot> manifest_of(const caf::actor_addr& client, const std::string& key,
                             const std::string& op) {
  auto p = std::make_shared<Promise<Snapshot>>(Status(Errc::shutdown, op + ": dropped"));
  call_client(client, actors::store_get_atom::value, single_get(op, actors::GetMode::tensor, key),
              op + " '" + key + "'")
      .on_complete([=](const Result<actors::GetOutput>& r) {
        if (r.ok()) return (void)p->set(decode_snapshot(r->tensors.front(), key, op));
        if (r.status().code() == Errc::not_found) {
          return (void)p->set_error(Status(Errc::not_found, op + ": no state dict '" + key + "'"));
        }
        if (r.status().code() == Errc::wrong_kind) {
          return (void)p->set_error(
              Status(Errc::wrong_kind, op + ": '" + key + "' holds an object, not a state dict"));
        }
        p->set_error(r.status());
      });
  return p->future();
}

// What a read does when the structure it planned for changed under it.
Status gave_up(const std::string& op, const std::string& key) {
  return Status(Errc::conflict, op + " '" + key + "': a writer changed its layout during each of " +
                                    std::to_string(kMaxStateDictAttempts) + " attempts");
}

// "a, b, c and 4 more".
std::string name_list(const std::vector<std::string>& names) {
  std::string out;
  const std::size_t shown = std::min<std::size_t>(names.size(), 8);
  for (std::size_t i = 0; i < shown; ++i) out += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > shown) out += " and " + std::to_string(names.size() - shown) + " more";
  return out;
}

}  // namespace

namespace {

// A state dict's put, built while the caller's call runs (the views are the
// caller's; small tensors are packed now) and sent later: item keys are
// relative ("" for the manifest, "/NAME" for entries, "#packed" for the
// blob) until put_prepared() gives them their key.
struct PreparedPut {
  actors::PutCall call;
};

// One rank's part of a sharded state dict (put_sharded_state_dict).
struct ShardedPart {
  const std::map<std::string, RankShard>* layout = nullptr;
  std::int64_t rank = 0;
};

// Checks a sharded state dict's layout against the rank's entries.
Status check_layout(const StateDict& sd, const ShardedPart& part, const std::string& op) {
  if (part.rank < 0) {
    return Status(Errc::invalid_argument,
                  op + ": rank must be >= 0, got " + std::to_string(part.rank));
  }
  for (const auto& [name, shard] : *part.layout) {
    const auto* e = sd.find(name);
    if (!e || !e->is_tensor()) {
      return Status(Errc::invalid_argument, op + ": the layout names '" + name + "', " +
                                                (e ? "a value" : "no entry") +
                                                " of the state dict; it must name tensors");
    }
    if (shard.replicas < 1) {
      return Status(Errc::invalid_argument,
                    op + ": entry '" + name + "' has 0 replicas; a box has at least one");
    }
    if (e->view.shape() != shard.slice.local_shape()) {
      return Status(Errc::shape_mismatch, op + ": entry '" + name + "' has shape " +
                                              shape_to_string(e->view.shape()) + ", its slice " +
                                              shard.slice.to_string() + " needs " +
                                              shape_to_string(shard.slice.local_shape()));
    }
  }
  return Status();
}

Result<std::shared_ptr<PreparedPut>> prepare_put(const StateDict& sd, const std::string& op,
                                                 const StateDictPutOptions& options,
                                                 const ShardedPart& part = {}) {
  auto p = std::make_shared<PreparedPut>();
  p->call.op = op;
  // The manifest and values are stored as uint8 tensors, so one read
  // (one snapshot of the index) fetches them with the tensors.
  const auto tensor = wire::ObjectKind::tensor;
  if (options.transfer_dtype && (*options.transfer_dtype == DType::float32 ||
                                 !can_cast(DType::float32, *options.transfer_dtype))) {
    return Status(Errc::invalid_argument, op +
                                              ": transfer_dtype must be bfloat16 or float16, got " +
                                              std::string(dtype_name(*options.transfer_dtype)));
  }
  if (part.layout) MESHSTORE_RETURN_IF_ERROR(check_layout(sd, part, op));
  // The box an entry is of its global tensor (nullptr: whole).
  auto shard_of = [&](const std::string& name) -> const RankShard* {
    if (!part.layout) return nullptr;
    auto it = part.layout->find(name);
    return it == part.layout->end() ? nullptr : &it->second;
  };
  // Whole entries, values, the manifest and the packed buckets are rank
  // 0's to store; every rank stores its boxes.
  const bool whole_too = part.rank == 0;
  // The dtype a tensor is stored in.
  auto stored_dtype = [&](const TensorView& v) {
    return options.transfer_dtype && v.dtype() == DType::float32 ? *options.transfer_dtype
                                                                 : v.dtype();
  };
  Manifest m;
  for (const auto& e : sd.entries()) {
    if (const auto* shard = shard_of(e.name)) {
      // Never packed (but an empty tensor holds nothing to store).
      lay_out(m, e.name, stored_dtype(e.view), shard->slice.global_shape(), 0,
              options.pack_bucket_bytes);
    } else if (e.is_tensor()) {
      lay_out(m, e.name, stored_dtype(e.view), e.view.shape(), options.pack_max_tensor_bytes,
              options.pack_bucket_bytes);
    } else {
      lay_out_value(m, e.name, *e.value);
    }
  }
  p->call.stream_manifest = encode_manifest(m);
  if (part.layout) {
    // What every rank must agree on; the keys that commit together.
    const auto& bytes = p->call.stream_manifest;
    p->call.group_layout = content_checksum(TensorView(
        const_cast<char*>(bytes.data()), DType::uint8, {static_cast<std::int64_t>(bytes.size())}));
    p->call.group_members.push_back("");
    for (std::size_t b = 0; b < m.buckets(); ++b) p->call.group_members.push_back(blob_key("", b));
    for (const auto& me : m.entries) {
      if (me.kind != EntryKind::packed) p->call.group_members.push_back("/" + me.name);
    }
  }
  if (whole_too) p->call.items.push_back(bytes_item("", p->call.stream_manifest, tensor));
  // Small tensors travel packed into buckets: one object, one transfer and
  // one region at the volume per bucket instead of one each.
  // Buckets come from the scratch pool; every byte of them is written
  // (the alignment gaps zeroed), so a reused buffer leaks nothing stale.
  std::vector<std::shared_ptr<std::byte>> blobs(whole_too ? m.buckets() : 0);
  std::vector<std::uint64_t> filled(blobs.size(), 0);  // bytes written so far, per bucket
  for (std::size_t b = 0; b < blobs.size(); ++b) {
    blobs[b] = ScratchPool::instance().take(m.bucket_bytes(b));
    if (!blobs[b]) {
      return Status(
          Errc::out_of_capacity,
          op + ": cannot allocate " + std::to_string(m.bucket_bytes(b)) + " bytes to pack");
    }
  }
  for (std::size_t i = 0; i < m.entries.size() && whole_too; ++i) {
    const auto& me = m.entries[i];
    if (me.kind != EntryKind::packed || me.nbytes() == 0) continue;
    const std::size_t b = m.bucket_of(me.offset);
    const std::uint64_t at = me.offset - m.bucket_begin(b);
    if (at > filled[b]) std::memset(blobs[b].get() + filled[b], 0, at - filled[b]);
    MESHSTORE_RETURN_IF_ERROR(cast_to(sd.entries()[i].view, me.dtype, blobs[b].get() + at));
    filled[b] = at + me.nbytes();
  }
  for (std::size_t b = 0; b < blobs.size(); ++b) {
    const std::uint64_t n = m.bucket_bytes(b);
    if (n > filled[b]) std::memset(blobs[b].get() + filled[b], 0, n - filled[b]);
    TensorView view(blobs[b].get(), DType::uint8, {static_cast<std::int64_t>(n)});
    p->call.items.push_back(
        actors::PutItem{blob_key("", b), view, tensor, std::shared_ptr<const void>(blobs[b])});
  }
  for (std::size_t i = 0; i < m.entries.size(); ++i) {
    const auto& e = sd.entries()[i];
    const auto& me = m.entries[i];
    const RankShard* shard = shard_of(e.name);
    if (me.kind == EntryKind::packed) continue;
    if (!shard && !whole_too) continue;
    // An empty box adds nothing to the cover (the other ranks' boxes
    // cover the tensor); the entry's key is not empty, or it would be packed.
    if (shard && shard->slice.empty()) continue;
    actors::PutItem item{"/" + e.name, e.view, wire::ObjectKind::tensor, nullptr};
    if (me.kind == EntryKind::value) {
      item = bytes_item("/" + e.name, e.value->encode(), tensor);
    } else if (me.dtype != e.view.dtype()) {
      // Cast on the way: the narrower copy is what moves.
      const std::uint64_t nbytes =
          static_cast<std::uint64_t>(shape_numel(e.view.shape())) * dtype_size(me.dtype);
      std::string cast;
      try {
        cast.assign(nbytes, '\0');
      } catch (const std::bad_alloc&) {
        return Status(Errc::out_of_capacity, op + ": cannot allocate " + std::to_string(nbytes) +
                                                 " bytes to cast '" + e.name + "'");
      }
      MESHSTORE_RETURN_IF_ERROR(cast_to(e.view, me.dtype, cast.data()));
      auto owned = std::make_shared<const std::string>(std::move(cast));
      item.view = TensorView(const_cast<char*>(owned->data()), me.dtype, e.view.shape());
      item.owned_bytes = std::move(owned);
    }
    if (shard) {
      item.slice = shard->slice;
      item.replicas = shard->replicas;
      if (shard->replicas > 1) item.checksum = content_checksum(item.view);
    }
    p->call.items.push_back(std::move(item));
  }
  if (part.layout) p->call.stream_manifest.clear();  // no stream of a sharded put
  return p;
}

// Puts a prepared state dict under `key`. The commit also removes, in the
// same step, every key the previous version owned and this one does not
// (replace_atom), so no reader sees stale names next to new ones.
Future<void> put_prepared(const caf::actor_addr& client, const std::string& key,
                          std::shared_ptr<PreparedPut> p) {
  const std::string op = p->call.op;
  for (auto& item : p->call.items) {
    item.key = key + item.key;
    if (auto s = check_key(op, item.key); !s.ok()) return make_error_future<void>(s);
  }
  for (auto& m : p->call.group_members) {
    m = key + m;
    if (auto s = check_key(op, m); !s.ok()) return make_error_future<void>(s);
  }
  std::sort(p->call.group_members.begin(), p->call.group_members.end());
  p->call.replace_under = {key};
  return call_client(client, actors::store_put_atom::value, std::move(p->call),
                     op + " '" + key + "'")
      .then([](const std::vector<std::uint64_t>&) {});
}

std::string version_key(const std::string& prefix, std::uint64_t v) {
  return prefix + "/v" + std::to_string(v);
}

// The last steps of a publish, once version `next` is stored: point the
// prefix at it (readers find it from now on), then retire the version that
// fell out of the newest `keep`; its memory stays with the volumes for the
// next version's tensors.
Future<std::uint64_t> point_and_retire(const caf::actor_addr& client, const std::string& prefix,
                                       std::uint64_t next, int keep, const std::string& op) {
  actors::PutCall point;
  point.op = op;
  point.items.push_back(bytes_item(prefix, std::to_string(next), wire::ObjectKind::object));
  return call_client(client, actors::store_put_atom::value, std::move(point),
                     op + " '" + prefix + "'")
      .then([=](const std::vector<std::uint64_t>&) -> Future<std::uint64_t> {
        if (next <= static_cast<std::uint64_t>(keep)) return make_ready_future(next);
        const std::string old = version_key(prefix, next - static_cast<std::uint64_t>(keep));
        actors::RemoveCall retire;
        retire.reuse = true;
        retire.under = true;
        retire.keys.push_back(old);
        return call_client(client, actors::store_remove_atom::value, std::move(retire),
                           op + " '" + prefix + "': retiring '" + old + "'")
            .then([next](std::size_t) { return next; });
      });
}

// The version `prefix` points at (0 when it was never published).
// One object read: a missing pointer is 0.
Future<std::uint64_t> pointer_of(const caf::actor_addr& client, const std::string& prefix,
                                 const std::string& op) {
  auto p = std::make_shared<Promise<std::uint64_t>>(Status(Errc::shutdown, op + ": dropped"));
  // Fresh: successive reads of the pointer never go back a version.
  object_of(client, prefix, op, true).on_complete([=](const Result<std::string>& text) {
    if (!text.ok()) {
      if (text.status().code() == Errc::not_found) return (void)p->set_value(0);
      return (void)p->set_error(text.status());
    }
    char* end = nullptr;
    const unsigned long long n = std::strtoull(text->c_str(), &end, 10);
    if (text->empty() || *end != '\0' || n == 0) {
      return (void)p->set_error(
          Status(Errc::wrong_kind, op + ": '" + prefix + "' is not a version pointer"));
    }
    p->set_value(static_cast<std::uint64_t>(n));
  });
  return p->future();
}

// The boxes a read of a state dict wants of some entries, by name.
using Boxes = std::map<std::string, TensorSlice>;

const TensorSlice* box_of(const Boxes* boxes, const std::string& name) {
  if (!boxes) return nullptr;
  auto it = boxes->find(name);
  return it == boxes->end() ? nullptr : &it->second;
}

// One planned read of a state dict into a destination: what it checked and
// the scratch memory it reads into besides the caller's tensors.
struct IntoPlan {
  Snapshot snap;
  Tensor manifest_copy;  // the manifest read with the entries (one snapshot)
  Tensor blob;           // the packed tensors, unpacked into the destination after
  struct Unpack {
    std::uint64_t offset;            // where the entry starts in the blob
    TensorView dst;                  // the destination
    const ManifestEntry* entry;      // with a box: the whole entry's dtype and shape
    std::optional<TensorSlice> box;  // the part of it wanted (none: all)
  };
  std::vector<Unpack> unpack;
  std::vector<std::pair<std::string, Tensor>> values;  // name -> encoded value
};

}  // namespace

// The manifests a store's reads planned with last, by key (or by prefix for
// versions, whose keys change every time but whose layout rarely does). A
// read of the same layout plans with the cached manifest and skips reading
// it first: its single call reads the manifest anyway and plans again if it
// differs, so a stale entry costs a round trip, never a wrong read.
namespace state_dicts {

struct ManifestCache {
  std::mutex mu;  // guards map
  std::unordered_map<std::string, Snapshot> map;

  std::optional<Snapshot> find(const std::string& k) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = map.find(k);
    if (it == map.end()) return std::nullopt;
    return it->second;
  }
  void put(const std::string& k, const Snapshot& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (map.size() >= 256 && map.count(k) == 0) map.clear();
    map[k] = s;
  }
};

std::shared_ptr<ManifestCache> make_manifest_cache() { return std::make_shared<ManifestCache>(); }

}  // namespace state_dicts

namespace {

// Where a read may find and leave its plan's manifest.
struct CacheSlot {
  std::shared_ptr<ManifestCache> cache;  // null: none
  std::string key;
};

Future<void> read_into_attempt(const caf::actor_addr& client, const std::string& key,
                               StateDict* dst, const std::string& op, Snapshot snap, int tries,
                               const CacheSlot& slot, bool guess,
                               std::shared_ptr<const Boxes> boxes = nullptr);

// Reads the state dict under `key` into `sd` (get_state_dict_into), the
// entries named in `boxes` as those boxes.
Future<void> read_state_dict_into(const caf::actor_addr& client, const std::string& key,
                                  StateDict& sd, const std::string& op, const CacheSlot& slot = {},
                                  std::shared_ptr<const Boxes> boxes = nullptr) {
  StateDict* dst = &sd;
  if (slot.cache) {
    if (auto snap = slot.cache->find(slot.key)) {
      return read_into_attempt(client, key, dst, op, std::move(*snap), 0, slot, true, boxes);
    }
  }
  return manifest_of(client, key, op).then([=](const Snapshot& snap) {
    return read_into_attempt(client, key, dst, op, snap, 0, slot, false, boxes);
  });
}

// Checks `dst` against `snap`'s manifest (every name, before any byte
// moves: a failure leaves `dst` as it was) and plans the read: the keys to
// fetch with their destinations in `into`, scratch memory in the plan.
Result<std::shared_ptr<IntoPlan>> plan_into(const std::string& key, StateDict* dst,
                                            const std::string& op, Snapshot snap,
                                            actors::GetCall& into, const Boxes* boxes) {
  auto plan = std::make_shared<IntoPlan>();
  plan->snap = std::move(snap);
  const Manifest& m = plan->snap.manifest;
  std::vector<std::string> missing, extra, mismatched;
  bool dtype_off = false, shape_off = false;
  std::set<std::string> stored;
  into.op = op;
  into.mode = actors::GetMode::into;
  for (const auto& me : m.entries) {
    stored.insert(me.name);
    const auto* e = dst->find(me.name);
    if (!e) {
      missing.push_back(me.name);
    } else if (me.kind == EntryKind::value && e->is_tensor()) {
      mismatched.push_back(me.name + " (stored a value, destination a tensor)");
    } else if (me.kind != EntryKind::value && !e->is_tensor()) {
      mismatched.push_back(me.name + " (stored a tensor, destination a value)");
    } else if (me.kind != EntryKind::value && me.dtype != e->view.dtype()) {
      dtype_off = true;
      mismatched.push_back(me.name + " (stored " + std::string(dtype_name(me.dtype)) +
                           ", destination " + std::string(dtype_name(e->view.dtype())) + ")");
    } else if (const TensorSlice* box = box_of(boxes, me.name);
               box && me.kind != EntryKind::value) {
      if (box->global_shape() != me.shape) {
        shape_off = true;
        mismatched.push_back(me.name + " (stored " + shape_to_string(me.shape) + ", box " +
                             box->to_string() + ")");
      } else if (box->local_shape() != e->view.shape()) {
        shape_off = true;
        mismatched.push_back(me.name + " (box " + box->to_string() + " has shape " +
                             shape_to_string(box->local_shape()) + ", destination " +
                             shape_to_string(e->view.shape()) + ")");
      }
    } else if (me.kind != EntryKind::value && me.shape != e->view.shape()) {
      shape_off = true;
      mismatched.push_back(me.name + " (stored " + shape_to_string(me.shape) + ", destination " +
                           shape_to_string(e->view.shape()) + ")");
    }
  }
  for (const auto& e : dst->entries()) {
    if (stored.count(e.name) == 0) extra.push_back(e.name);
  }
  if (boxes) {
    for (const auto& [name, box] : *boxes) {
      const auto* e = dst->find(name);
      if (!e || !e->is_tensor()) {
        mismatched.push_back(name + " (a box for " + (e ? "a value" : "no destination") + ")");
      } else if (stored.count(name) == 0) {
        extra.push_back(name);
      }
    }
  }
  if (!missing.empty() || !extra.empty() || !mismatched.empty()) {
    std::string msg = op + " '" + key + "': the destination does not match the stored state dict:";
    if (!missing.empty()) msg += " missing " + name_list(missing) + ";";
    if (!extra.empty()) msg += " extra " + name_list(extra) + ";";
    if (!mismatched.empty()) msg += " mismatched " + name_list(mismatched) + ";";
    msg.pop_back();
    // A destination that does not fit is bad input, whatever else differs.
    const Errc code = dtype_off   ? Errc::dtype_mismatch
                      : shape_off ? Errc::shape_mismatch
                                  : Errc::invalid_argument;
    return Status(code, msg);
  }
  auto scratch = [&](std::int64_t n) { return Tensor::empty(DType::uint8, {n}); };
  auto manifest_copy = scratch(static_cast<std::int64_t>(plan->snap.bytes.size()));
  if (!manifest_copy.ok()) return manifest_copy.status();
  plan->manifest_copy = std::move(manifest_copy).value();
  into.keys.push_back(key);
  into.dsts.push_back(plan->manifest_copy.view());
  if (m.packed_bytes > 0) {
    // One scratch blob; each bucket is read into its range of it.
    // Reused from call to call (ScratchPool): no page faults per read.
    auto storage = ScratchPool::instance().take(m.packed_bytes);
    if (!storage) {
      return Status(Errc::out_of_capacity, op + ": cannot allocate " +
                                               std::to_string(m.packed_bytes) + " bytes to unpack");
    }
    plan->blob = Tensor::wrap(std::move(storage), DType::uint8,
                              {static_cast<std::int64_t>(m.packed_bytes)}, false);
    for (std::size_t b = 0; b < m.buckets(); ++b) {
      into.keys.push_back(blob_key(key, b));
      into.dsts.push_back(TensorView(static_cast<std::byte*>(plan->blob.data()) + m.bucket_begin(b),
                                     DType::uint8, {static_cast<std::int64_t>(m.bucket_bytes(b))}));
    }
  }
  for (const auto& me : m.entries) {
    const auto* e = dst->find(me.name);
    const TensorSlice* box = box_of(boxes, me.name);
    if (me.kind == EntryKind::packed) {
      if (e->view.numel() == 0) continue;
      plan->unpack.push_back(IntoPlan::Unpack{me.offset, e->view, &me, std::nullopt});
      if (box) plan->unpack.back().box = *box;
    } else if (me.kind == EntryKind::value) {
      auto v = scratch(me.shape.empty() ? 0 : me.shape.front());
      if (!v.ok()) return v.status();
      plan->values.emplace_back(me.name, std::move(v).value());
      into.keys.push_back(entry_key(key, me.name));
      into.dsts.push_back(plan->values.back().second.view());
    } else {
      if (box) {
        into.slices.resize(into.keys.size());
        into.slices.push_back(*box);
      }
      into.keys.push_back(entry_key(key, me.name));
      into.dsts.push_back(e->view);
    }
  }
  return plan;
}

// After the read: the packed tensors and the values into `dst`.
Status finish_into(const IntoPlan& plan, StateDict* dst) {
  const auto* base = static_cast<const std::byte*>(plan.blob.data());
  for (const auto& u : plan.unpack) {
    if (!u.box) {
      if (on_device(u.dst)) {
        MESHSTORE_RETURN_IF_ERROR(internal::cuda::to_device(u.dst, base + u.offset));
      } else {
        unpack_from(base + u.offset, u.dst);
      }
      continue;
    }
    // The box of the whole (contiguous) entry, as a strided view.
    const Strides whole = contiguous_strides(u.entry->shape);
    std::int64_t first = 0;
    for (std::size_t d = 0; d < whole.size(); ++d) first += u.box->offsets()[d] * whole[d];
    const TensorView src(const_cast<std::byte*>(base + u.offset) +
                             first * static_cast<std::int64_t>(dtype_size(u.entry->dtype)),
                         u.entry->dtype, u.box->local_shape(), whole);
    // A GPU destination: cut on the host, then one copy to the device.
    MESHSTORE_RETURN_IF_ERROR(internal::cuda::copy_view(src, u.dst));
  }
  for (const auto& [name, bytes] : plan.values) {
    auto v = Value::decode(std::string(static_cast<const char*>(bytes.data()), bytes.nbytes()));
    if (!v.ok()) return v.status().with_context("value '" + name + "'");
    MESHSTORE_RETURN_IF_ERROR(dst->set_value(name, *v));
  }
  return Status();
}

// Plans the read against `snap`'s manifest, then reads the manifest again
// together with every entry in one call (one snapshot of the index). If that
// manifest differs from `snap`'s, a writer changed the layout in between:
// plan again with the new one.
Future<void> read_into_attempt(const caf::actor_addr& client, const std::string& key,
                               StateDict* dst, const std::string& op, Snapshot snap, int tries,
                               const CacheSlot& slot, bool guess,
                               std::shared_ptr<const Boxes> boxes) {
  if (tries >= kMaxStateDictAttempts) return make_error_future<void>(gave_up(op, key));
  actors::GetCall into;
  auto planned = plan_into(key, dst, op, std::move(snap), into, boxes.get());
  if (!planned.ok()) {
    // A cached layout may be stale: check against the stored one first.
    if (guess) {
      return manifest_of(client, key, op).then([=](const Snapshot& fresh) {
        return read_into_attempt(client, key, dst, op, fresh, tries, slot, false, boxes);
      });
    }
    return make_error_future<void>(planned.status());
  }
  auto plan = std::move(planned).value();
  auto done = std::make_shared<Promise<void>>(Status(Errc::shutdown, op + ": dropped"));
  call_client(client, actors::store_get_atom::value, std::move(into), op + " '" + key + "'")
      .on_complete([=](const Result<actors::GetOutput>& r) {
        auto again = [=](const Snapshot& fresh) {
          read_into_attempt(client, key, dst, op, fresh, tries + 1, slot, false, boxes)
              .on_complete([done](const Result<void>& x) { done->set(x); });
        };
        if (!r.ok()) {
          // A layout change between our two reads shows as a mismatch or a
          // missing key: if the manifest moved on, plan again; else report.
          const auto code = r.status().code();
          if (code != Errc::shape_mismatch && code != Errc::dtype_mismatch &&
              code != Errc::not_found && code != Errc::wrong_kind) {
            return (void)done->set_error(r.status());
          }
          manifest_of(client, key, op).on_complete([=](const Result<Snapshot>& fresh) {
            if (fresh.ok() && fresh->bytes != plan->snap.bytes) return again(*fresh);
            // A guess read keys that may never have existed: the stored
            // manifest's own error names the problem better.
            done->set_error(guess && !fresh.ok() ? fresh.status() : r.status());
          });
          return;
        }
        auto now = decode_snapshot(plan->manifest_copy, key, op);
        if (!now.ok()) return (void)done->set_error(now.status());
        if (now->bytes != plan->snap.bytes) return again(*now);
        if (slot.cache) slot.cache->put(slot.key, plan->snap);
        done->set(finish_into(*plan, dst));
      });
  return done->future();
}

// The cache slot of the versions under `prefix` (no key holds a NUL).
CacheSlot versions_slot(const std::shared_ptr<ManifestCache>& cache, const std::string& prefix) {
  return CacheSlot{cache, std::string(1, '\0') + prefix};
}

// Reads the version `prefix` points at into `dst`; when that version was
// retired before it could be read, follows the pointer again.
Future<std::uint64_t> read_latest_into(const caf::actor_addr& client, const std::string& prefix,
                                       StateDict* dst, const std::string& op, int tries,
                                       const std::shared_ptr<ManifestCache>& cache) {
  return pointer_of(client, prefix, op).then([=](std::uint64_t v) -> Future<std::uint64_t> {
    if (v == 0) {
      return make_error_future<std::uint64_t>(
          Status(Errc::not_found, op + ": nothing published under '" + prefix + "'"));
    }
    auto p = std::make_shared<Promise<std::uint64_t>>();
    read_state_dict_into(client, version_key(prefix, v), *dst, op, versions_slot(cache, prefix))
        .on_complete([=](const Result<void>& r) {
          if (!r.ok() && r.status().code() == Errc::not_found &&
              tries + 1 < kMaxStateDictAttempts) {
            read_latest_into(client, prefix, dst, op, tries + 1, cache)
                .on_complete([p](const Result<std::uint64_t>& n) { p->set(n); });
            return;
          }
          if (!r.ok()) return (void)p->set_error(r.status());
          p->set_value(v);
        });
    return p->future();
  });
}

// Waits up to `wait` for `key` to be written or committed and reads it into
// `dst`: streamed while its writer fills it, or as usual once committed.
Future<void> stream_into(const caf::actor_addr& client, const std::string& key, StateDict* dst,
                         const std::string& op, std::chrono::milliseconds wait,
                         const CacheSlot& slot) {
  auto planned = std::make_shared<std::shared_ptr<IntoPlan>>();
  actors::StreamCall c;
  c.op = op;
  c.key = key;
  c.wait = wait;
  // Runs in the client actor once the writer's manifest is known.
  c.plan = [=](const std::string& manifest,
               const std::vector<wire::KeyRecord>& records) -> Result<std::vector<TensorView>> {
    Snapshot snap;
    snap.bytes = manifest;
    auto m = decode_manifest(manifest, key);
    if (!m.ok()) return m.status().with_context(op);
    snap.manifest = std::move(m).value();
    actors::GetCall into;
    auto plan = plan_into(key, dst, op, std::move(snap), into, nullptr);
    if (!plan.ok()) return plan.status();
    *planned = std::move(plan).value();
    std::unordered_map<std::string, TensorView> where;
    for (std::size_t i = 0; i < into.keys.size(); ++i) where.emplace(into.keys[i], into.dsts[i]);
    std::vector<TensorView> out;
    std::size_t matched = 0;
    for (const auto& r : records) {
      auto it = where.find(r.key);
      if (it != where.end()) ++matched;
      out.push_back(it == where.end() ? TensorView() : it->second);
    }
    if (matched != where.size()) {
      return Status(Errc::protocol_error,
                    op + " '" + key + "': the writer's records lack entries of its manifest");
    }
    return out;
  };
  return call_client(client, actors::store_stream_atom::value, std::move(c), op + " '" + key + "'")
      .then([=](std::uint32_t kind) -> Future<void> {
        if (kind == static_cast<std::uint32_t>(actors::StreamKind::committed)) {
          return read_state_dict_into(client, key, *dst, op, slot);
        }
        auto s = finish_into(**planned, dst);
        if (!s.ok()) return make_error_future<void>(s);
        return make_ready_future();
      });
}

// Waits for a version newer than `after` under `prefix` and reads it (the
// newest, when several are) into `dst`; answers its number. The wait
// follows version `latest + 1` in slices, so a version published and
// retired between two looks is not waited for in vain.
Future<std::uint64_t> read_next_into(const caf::actor_addr& client, const std::string& prefix,
                                     StateDict* dst, std::uint64_t after, const std::string& op,
                                     std::chrono::steady_clock::time_point deadline,
                                     const std::shared_ptr<ManifestCache>& cache) {
  return pointer_of(client, prefix, op).then([=](std::uint64_t latest) -> Future<std::uint64_t> {
    auto p = std::make_shared<Promise<std::uint64_t>>(
        Status(Errc::shutdown, op + " '" + prefix + "': the store was closed"));
    auto again = [=] {
      read_next_into(client, prefix, dst, after, op, deadline, cache)
          .on_complete([p](const Result<std::uint64_t>& n) { p->set(n); });
    };
    if (latest > after) {
      // Read the version this look named, not the pointer again: a second
      // look may be served from a location cached before the pointer moved,
      // and name an older version.
      read_state_dict_into(client, version_key(prefix, latest), *dst, op,
                           versions_slot(cache, prefix))
          .on_complete([=](const Result<void>& r) {
            if (r.ok()) return (void)p->set_value(latest);
            // Retired before it could be read: a newer one exists.
            if (r.status().code() == Errc::not_found &&
                std::chrono::steady_clock::now() < deadline) {
              return again();
            }
            p->set_error(r.status());
          });
      return p->future();
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return make_error_future<std::uint64_t>(
          Status(Errc::timeout, op + " '" + prefix + "': no version after " +
                                    std::to_string(after) + " was published in time"));
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    const auto slice = std::min<std::chrono::milliseconds>(left, kStreamWaitSlice);
    // Never a version the caller has seen, even if this look lagged behind.
    const std::uint64_t next = std::max(latest, after) + 1;
    stream_into(client, version_key(prefix, next), dst, op, slice, versions_slot(cache, prefix))
        .on_complete([=](const Result<void>& r) {
          if (r.ok()) return (void)p->set_value(next);
          // Nothing yet, or the version went before it could be read: look again.
          const auto code = r.status().code();
          if (code == Errc::timeout || code == Errc::not_found) return again();
          p->set_error(r.status());
        });
    return p->future();
  });
}

}  // namespace

Future<void> Store::put_state_dict(std::string key, const StateDict& sd,
                                   const StateDictPutOptions& options) {
  const std::string op = "put_state_dict";
  if (auto s = check_key(op, key); !s.ok()) return make_error_future<void>(s);
  auto st = staging(op, false);  // put_source decides per entry
  auto use = put_source(sd, *st, options);
  if (!use.ok()) return make_error_future<void>(use.status());
  auto prepared = prepare_put(**use, op, options);
  if (!prepared.ok()) return make_error_future<void>(prepared.status().with_context(key));
  return put_prepared(Impl::client_address(impl_.get()), key, std::move(prepared).value())
      .then([st] {});
}

Future<void> Store::put_sharded_state_dict(std::string key, const StateDict& local,
                                           const std::map<std::string, RankShard>& layout,
                                           std::int64_t rank, const StateDictPutOptions& options) {
  const std::string op = "put_sharded_state_dict";
  if (auto s = check_key(op, key); !s.ok()) return make_error_future<void>(s);
  auto st = staging(op, false);  // put_source decides per entry
  auto use = put_source(local, *st, options, &layout);
  if (!use.ok()) return make_error_future<void>(use.status());
  auto prepared = prepare_put(**use, op, options, ShardedPart{&layout, rank});
  if (!prepared.ok()) return make_error_future<void>(prepared.status().with_context(key));
  return put_prepared(Impl::client_address(impl_.get()), key, std::move(prepared).value())
      .then([st] {});
}

Future<std::uint64_t> Store::publish_state_dict(std::string prefix, const StateDict& sd, int keep,
                                                const StateDictPutOptions& options) {
  const std::string op = "publish_state_dict";
  if (auto s = check_key(op, prefix); !s.ok()) return make_error_future<std::uint64_t>(s);
  if (keep < 1) {
    return make_error_future<std::uint64_t>(
        Status(Errc::invalid_argument,
               op + " '" + prefix + "': keep must be at least 1, got " + std::to_string(keep)));
  }
  const caf::actor_addr client = Impl::client_address(impl_.get());
  auto st = staging(op, false);  // put_source decides per entry
  auto use = put_source(sd, *st, options);
  if (!use.ok()) return make_error_future<std::uint64_t>(use.status());
  auto prepared_or = prepare_put(**use, op, options);
  if (!prepared_or.ok()) {
    return make_error_future<std::uint64_t>(prepared_or.status().with_context(prefix));
  }
  auto prepared = std::move(prepared_or).value();
  return pointer_of(client, prefix, op)
      .then([=](std::uint64_t latest) {
        const std::uint64_t next = latest + 1;
        return put_prepared(client, version_key(prefix, next), prepared).then([=]() {
          return point_and_retire(client, prefix, next, keep, op);
        });
      })
      .then([st](std::uint64_t version) { return version; });  // host copies live till then
}

// -- zero-copy publishing ---------------------------------------------------

struct StagedStateDict::Impl {
  caf::actor_addr client;  // weak: the staged state dict may outlive the store
  std::string op;
  std::string key;
  // stage_publish: where the version goes; prefix is empty otherwise.
  std::string prefix;
  std::uint64_t version = 0;
  int keep = 1;
  Manifest layout;  // the tensors only, in the caller's order
  StateDict sd;
  bool zero_copy = false;
  // The tensors' objects (the packed buckets first, then one per tensor
  // stored alone), full keys, views into the memory below.
  std::vector<actors::PutItem> items;
  actors::StagedRegions staged;  // zero_copy: the volume's regions, mapped
  std::vector<Tensor> owned;     // otherwise: private buffers, one per item
  enum class State { open, committed, aborted };
  std::mutex mu;  // guards state
  State state = State::open;

  ~Impl() { abort(); }

  void abort() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (state != State::open) return;
      state = State::aborted;
    }
    if (!zero_copy) return;
    // A closed store's volume reclaimed the regions (or is gone) already.
    if (auto hdl = caf::actor_cast<caf::actor>(client)) {
      caf::anon_send(hdl, actors::store_release_atom::value, actors::ReleaseStagedCall{staged});
    }
  }

  // A commit refused before anything moved: the memory goes back.
  void give_back() {
    {
      std::lock_guard<std::mutex> lock(mu);
      state = State::open;
    }
    abort();
  }

  Future<std::uint64_t> commit(const std::shared_ptr<Impl>& self) {
    const std::string what = op + " '" + key + "': commit";
    {
      std::lock_guard<std::mutex> lock(mu);
      if (state != State::open) {
        return make_error_future<std::uint64_t>(Status(
            Errc::invalid_argument,
            what + ": the state dict was " +
                (state == State::committed ? "committed already" : "aborted") + "; stage anew"));
      }
      state = State::committed;
    }
    // The manifest in the state dict's current order: the staged tensors
    // where they lie, the values inserted since.
    std::unordered_map<std::string, const ManifestEntry*> staged_entry;
    for (const auto& e : layout.entries) staged_entry.emplace(e.name, &e);
    Manifest m;
    m.packed_bytes = layout.packed_bytes;
    m.bucket_starts = layout.bucket_starts;
    actors::PutCall call;
    call.op = op;
    for (const auto& e : sd.entries()) {
      if (!e.is_tensor()) {
        lay_out_value(m, e.name, *e.value);
        call.items.push_back(
            bytes_item(entry_key(key, e.name), e.value->encode(), wire::ObjectKind::tensor));
        continue;
      }
      auto it = staged_entry.find(e.name);
      if (it == staged_entry.end()) {
        give_back();
        return make_error_future<std::uint64_t>(
            Status(Errc::invalid_argument, what + ": tensor '" + e.name +
                                               "' was not staged (stage every tensor; insert "
                                               "only values after staging)"));
      }
      m.entries.push_back(*it->second);
    }
    for (auto& item : call.items) {
      if (auto s = check_key(op, item.key); !s.ok()) {
        give_back();
        return make_error_future<std::uint64_t>(s);
      }
    }
    const std::string manifest = encode_manifest(m);
    call.items.insert(call.items.begin(), bytes_item(key, manifest, wire::ObjectKind::tensor));
    if (zero_copy) {
      call.staged_items = items;
      call.staged = staged;
    } else {
      call.items.insert(call.items.end(), items.begin(), items.end());
      call.stream_manifest = manifest;  // readers may stream the copy-in
    }
    call.replace_under = {key};
    auto put =
        call_client(client, actors::store_put_atom::value, std::move(call), op + " '" + key + "'");
    // `self` keeps private buffers alive until the put has read them.
    return put.then([self](const std::vector<std::uint64_t>&) {
      if (self->prefix.empty()) return make_ready_future<std::uint64_t>(0);
      return point_and_retire(self->client, self->prefix, self->version, self->keep, self->op);
    });
  }
};

StagedStateDict::StagedStateDict() = default;
StagedStateDict::~StagedStateDict() = default;
StagedStateDict::StagedStateDict(const StagedStateDict&) = default;
StagedStateDict& StagedStateDict::operator=(const StagedStateDict&) = default;
StagedStateDict::StagedStateDict(StagedStateDict&&) noexcept = default;
StagedStateDict& StagedStateDict::operator=(StagedStateDict&&) noexcept = default;

StateDict& StagedStateDict::state_dict() {
  static thread_local StateDict empty;
  if (!impl_) {
    empty = StateDict();
    return empty;
  }
  return impl_->sd;
}

const std::string& StagedStateDict::key() const {
  static const std::string none;
  return impl_ ? impl_->key : none;
}

bool StagedStateDict::zero_copy() const noexcept { return impl_ && impl_->zero_copy; }

Future<std::uint64_t> StagedStateDict::commit() {
  if (!impl_) {
    return make_error_future<std::uint64_t>(
        Status(Errc::invalid_argument, "commit: an empty StagedStateDict (not from a stage call)"));
  }
  return impl_->commit(impl_);
}

void StagedStateDict::abort() {
  if (impl_) impl_->abort();
}

namespace {

// Checks the specs and lays them out as put_state_dict would.
Result<Manifest> plan_staging(const std::string& op, const std::string& key,
                              const std::vector<TensorSpec>& tensors,
                              const StateDictPutOptions& options) {
  const std::string where = op + " '" + key + "'";
  if (options.transfer_dtype) {
    return Status(Errc::invalid_argument,
                  where +
                      ": transfer_dtype does not apply to staged tensors (they are "
                      "written in their stored dtype)");
  }
  Manifest m;
  std::unordered_set<std::string> names;
  for (const auto& t : tensors) {
    if (t.name.empty()) return Status(Errc::invalid_argument, where + ": a tensor with no name");
    if (!names.insert(t.name).second) {
      return Status(Errc::invalid_argument, where + ": name '" + t.name + "' appears twice");
    }
    if (!is_valid_dtype(static_cast<std::uint8_t>(t.dtype))) {
      return Status(Errc::invalid_argument, where + ": tensor '" + t.name + "' has no valid dtype");
    }
    if (t.shape.size() > 64) {
      return Status(Errc::invalid_argument, where + ": tensor '" + t.name + "' has " +
                                                std::to_string(t.shape.size()) +
                                                " dims, more than 64");
    }
    std::uint64_t bytes = dtype_size(t.dtype);
    for (auto d : t.shape) {
      if (d < 0 || __builtin_mul_overflow(bytes, static_cast<std::uint64_t>(d), &bytes) ||
          bytes > (std::uint64_t{1} << 62)) {
        return Status(Errc::invalid_argument, where + ": tensor '" + t.name + "' has shape " +
                                                  shape_to_string(t.shape) +
                                                  " (a negative dim, or too many bytes)");
      }
    }
    MESHSTORE_RETURN_IF_ERROR(check_key(op, entry_key(key, t.name)));
    lay_out(m, t.name, t.dtype, t.shape, options.pack_max_tensor_bytes, options.pack_bucket_bytes);
  }
  for (std::size_t b = 0; b < m.buckets(); ++b) {
    MESHSTORE_RETURN_IF_ERROR(check_key(op, blob_key(key, b)));
  }
  return m;
}

}  // namespace

// Builds staged state dicts; a friend of StagedStateDict.
struct internal::StagedAccess {
  using Impl = StagedStateDict::Impl;

  // Allocates the staged state dict of `layout` under `key`: the volume's
  // memory when this process can map it, private buffers otherwise.
  static Future<StagedStateDict> stage_at(const caf::actor_addr& client, std::string op,
                                          std::string key, Manifest layout, std::string prefix,
                                          std::uint64_t version, int keep) {
    auto impl = std::make_shared<Impl>();
    impl->client = client;
    impl->op = std::move(op);
    impl->key = std::move(key);
    impl->prefix = std::move(prefix);
    impl->version = version;
    impl->keep = keep;
    impl->layout = std::move(layout);
    actors::StageCall call;
    call.op = impl->op;
    // The objects, in the order of Impl::items: the buckets, then the
    // tensors stored alone.
    for (std::size_t b = 0; b < impl->layout.buckets(); ++b) {
      call.keys.push_back(blob_key(impl->key, b));
      call.nbytes.push_back(impl->layout.bucket_bytes(b));
    }
    for (const auto& e : impl->layout.entries) {
      if (e.kind != EntryKind::tensor) continue;
      call.keys.push_back(entry_key(impl->key, e.name));
      call.nbytes.push_back(e.nbytes());
    }
    auto keys = std::make_shared<const std::vector<std::string>>(call.keys);
    auto sizes = std::make_shared<const std::vector<std::uint64_t>>(call.nbytes);
    const std::string what = impl->op + " '" + impl->key + "'";
    auto out = std::make_shared<Promise<StagedStateDict>>(
        Status(Errc::shutdown, what + ": the store was closed before the staging completed"));
    auto fut = out->future();
    call_client(client, actors::store_stage_atom::value, std::move(call), what)
        .on_complete([impl, keys, sizes, out, what](const Result<actors::StagedRegions>& r) {
          std::vector<std::byte*> memory;
          if (r.ok()) {
            impl->zero_copy = true;
            impl->staged = r.value();
            for (const auto& m : impl->staged.memory) memory.push_back(m.get());
          } else if (r.status().code() == Errc::unsupported) {
            // The volume's memory is out of reach (another host, shm off):
            // private buffers, put at commit().
            for (auto n : *sizes) {
              auto t = Tensor::empty(DType::uint8, {static_cast<std::int64_t>(n)});
              if (!t.ok()) {
                out->set_error(Status(Errc::out_of_capacity,
                                      what + ": cannot allocate " + std::to_string(n) +
                                          " bytes of private buffers: " + t.status().message()));
                return;
              }
              memory.push_back(static_cast<std::byte*>(t->data()));
              impl->owned.push_back(std::move(t).value());
            }
          } else {
            out->set_error(r.status());
            return;
          }
          auto s = fill(*impl, *keys, *sizes, memory);
          if (!s.ok()) {
            impl->abort();
            out->set_error(s);
            return;
          }
          StagedStateDict staged;
          staged.impl_ = impl;
          out->set_value(std::move(staged));
        });
    return fut;
  }

  // Points the items and the state dict's tensors into `memory` (one
  // pointer per staged object, in Impl::items order).
  static Status fill(Impl& impl, const std::vector<std::string>& keys,
                     const std::vector<std::uint64_t>& sizes,
                     const std::vector<std::byte*>& memory) {
    const Manifest& m = impl.layout;
    std::size_t next = 0;
    std::vector<std::byte*> buckets;
    for (std::size_t b = 0; b < m.buckets(); ++b, ++next) {
      buckets.push_back(memory[next]);
      impl.items.push_back(actors::PutItem{
          keys[next],
          TensorView(memory[next], DType::uint8, {static_cast<std::int64_t>(sizes[next])}),
          wire::ObjectKind::tensor, nullptr});
    }
    for (const auto& e : impl.layout.entries) {
      std::byte* at = nullptr;
      if (e.kind == EntryKind::tensor) {
        // Stored alone: the object carries the tensor's own dtype and shape.
        at = memory[next];
        impl.items.push_back(actors::PutItem{keys[next], TensorView(at, e.dtype, e.shape),
                                             wire::ObjectKind::tensor, nullptr});
        ++next;
      } else if (e.nbytes() > 0) {
        const std::size_t b = m.bucket_of(e.offset);
        at = buckets[b] + (e.offset - m.bucket_begin(b));
      } else {
        at = reinterpret_cast<std::byte*>(&impl);  // no elements: any address will do
      }
      MESHSTORE_RETURN_IF_ERROR(impl.sd.insert(e.name, TensorView(at, e.dtype, e.shape)));
    }
    return Status();
  }
};

Future<StagedStateDict> Store::stage_state_dict(std::string key, std::vector<TensorSpec> tensors,
                                                const StateDictPutOptions& options) {
  const std::string op = "stage_state_dict";
  if (auto s = check_key(op, key); !s.ok()) return make_error_future<StagedStateDict>(s);
  auto layout = plan_staging(op, key, tensors, options);
  if (!layout.ok()) return make_error_future<StagedStateDict>(layout.status());
  const caf::actor_addr client = Impl::client_address(impl_.get());
  if (!client) return closed_future<StagedStateDict>(op + " '" + key + "'");
  return internal::StagedAccess::stage_at(client, op, key, std::move(layout).value(), "", 0, 1);
}

Future<StagedStateDict> Store::stage_publish(std::string prefix, std::vector<TensorSpec> tensors,
                                             int keep, const StateDictPutOptions& options) {
  const std::string op = "stage_publish";
  if (auto s = check_key(op, prefix); !s.ok()) return make_error_future<StagedStateDict>(s);
  if (keep < 1) {
    return make_error_future<StagedStateDict>(
        Status(Errc::invalid_argument,
               op + " '" + prefix + "': keep must be at least 1, got " + std::to_string(keep)));
  }
  // The specs are checked now for the errors that do not depend on N.
  if (auto s = plan_staging(op, prefix, tensors, options); !s.ok()) {
    return make_error_future<StagedStateDict>(s.status());
  }
  const caf::actor_addr client = Impl::client_address(impl_.get());
  auto specs = std::make_shared<const std::vector<TensorSpec>>(std::move(tensors));
  return pointer_of(client, prefix, op).then([=](std::uint64_t latest) {
    const std::uint64_t next = latest + 1;
    const std::string key = version_key(prefix, next);
    auto layout = plan_staging(op, key, *specs, options);
    if (!layout.ok()) return make_error_future<StagedStateDict>(layout.status());
    return internal::StagedAccess::stage_at(client, op, key, std::move(layout).value(), prefix,
                                            next, keep);
  });
}

Future<void> Store::stream_state_dict_into(std::string key, StateDict& sd,
                                           std::chrono::milliseconds timeout) {
  const std::string op = "stream_state_dict_into";
  if (auto s = check_key(op, key); !s.ok()) return make_error_future<void>(s);
  if (timeout.count() < 0) {
    return make_error_future<void>(
        Status(Errc::invalid_argument, op + " '" + key + "': negative timeout"));
  }
  const caf::actor_addr client = Impl::client_address(impl_.get());
  if (!client) return closed_future<void>(op + " '" + key + "'");
  auto st = staging(op);  // packed entries: finish_into copies them over
  auto use = get_target(sd, *st);
  if (!use.ok()) return make_error_future<void>(use.status());
  return stream_into(client, key, *use, op, timeout,
                     CacheSlot{Impl::manifest_cache(impl_.get()), key})
      .then([st] { return st->finish(); });
}

Future<std::uint64_t> Store::get_next_state_dict_into(std::string prefix, StateDict& sd,
                                                      std::uint64_t after,
                                                      std::chrono::milliseconds timeout) {
  const std::string op = "get_next_state_dict_into";
  if (auto s = check_key(op, prefix); !s.ok()) return make_error_future<std::uint64_t>(s);
  if (timeout.count() < 0) {
    return make_error_future<std::uint64_t>(
        Status(Errc::invalid_argument, op + " '" + prefix + "': negative timeout"));
  }
  auto st = staging(op);  // packed entries: finish_into copies them over
  auto use = get_target(sd, *st);
  if (!use.ok()) return make_error_future<std::uint64_t>(use.status());
  return read_next_into(Impl::client_address(impl_.get()), prefix, *use, after, op,
                        std::chrono::steady_clock::now() + timeout,
                        Impl::manifest_cache(impl_.get()))
      .then([st](std::uint64_t version) -> Result<std::uint64_t> {
        MESHSTORE_RETURN_IF_ERROR(st->finish());
        return version;
      });
}

Future<std::uint64_t> Store::latest_version(std::string prefix) {
  if (auto s = check_key("latest_version", prefix); !s.ok())
    return make_error_future<std::uint64_t>(s);
  return pointer_of(Impl::client_address(impl_.get()), prefix, "latest_version");
}

Future<std::uint64_t> Store::get_latest_state_dict_into(std::string prefix, StateDict& sd) {
  const std::string op = "get_latest_state_dict_into";
  if (auto s = check_key(op, prefix); !s.ok()) return make_error_future<std::uint64_t>(s);
  auto st = staging(op);  // packed entries: finish_into copies them over
  auto use = get_target(sd, *st);
  if (!use.ok()) return make_error_future<std::uint64_t>(use.status());
  return read_latest_into(Impl::client_address(impl_.get()), prefix, *use, op, 0,
                          Impl::manifest_cache(impl_.get()))
      .then([st](std::uint64_t version) -> Result<std::uint64_t> {
        MESHSTORE_RETURN_IF_ERROR(st->finish());
        return version;
      });
}

namespace {

Future<StateDict> read_state_dict(const caf::actor_addr& client, const std::string& key,
                                  const std::string& op, Snapshot snap, int tries) {
  if (tries >= kMaxStateDictAttempts) return make_error_future<StateDict>(gave_up(op, key));
  const Manifest m = snap.manifest;
  actors::GetCall call;
  call.op = op;
  call.mode = actors::GetMode::tensor;
  call.keys.push_back(key);  // the manifest again, read in the same snapshot as the entries
  const std::size_t buckets = m.buckets();
  for (std::size_t b = 0; b < buckets; ++b) call.keys.push_back(blob_key(key, b));
  for (const auto& me : m.entries) {
    if (me.kind != EntryKind::packed) call.keys.push_back(entry_key(key, me.name));
  }
  // Builds the state dict from one snapshot's read.
  auto build = [=](const actors::GetOutput& out) -> Future<StateDict> {
    auto now = decode_snapshot(out.tensors.front(), key, op);
    if (!now.ok()) return make_error_future<StateDict>(now.status());
    // A writer changed the layout between our reads: plan again.
    if (now->bytes != snap.bytes) return read_state_dict(client, key, op, *now, tries + 1);
    StateDict sd;
    std::size_t t = 1 + buckets;
    // Packed tensors are views into their bucket's allocation.
    std::vector<std::shared_ptr<Tensor>> blobs;
    for (std::size_t b = 0; b < buckets; ++b) {
      if (out.tensors.size() <= 1 + b || out.tensors[1 + b].nbytes() < m.bucket_bytes(b)) {
        return make_error_future<StateDict>(
            Status(Errc::protocol_error,
                   op + " '" + key + "': the packed blob is shorter than its table"));
      }
      blobs.push_back(std::make_shared<Tensor>(out.tensors[1 + b]));
    }
    for (const auto& me : m.entries) {
      Status st;
      if (me.kind == EntryKind::value) {
        const Tensor& bytes = out.tensors.at(t++);
        auto v = Value::decode(std::string(static_cast<const char*>(bytes.data()), bytes.nbytes()));
        st = v.ok() ? sd.insert(me.name, *v) : v.status().with_context("value '" + me.name + "'");
      } else if (me.kind == EntryKind::packed && (blobs.empty() || me.nbytes() == 0)) {
        auto empty = Tensor::empty(me.dtype, me.shape);  // 0 bytes: nothing stored
        st = empty.ok() ? sd.insert(me.name, std::move(empty).value()) : empty.status();
      } else if (me.kind == EntryKind::packed) {
        const std::size_t b = m.bucket_of(me.offset);
        const auto& blob = blobs[b];
        std::shared_ptr<std::byte> alias(
            blob, static_cast<std::byte*>(blob->data()) + (me.offset - m.bucket_begin(b)));
        st = sd.insert(me.name, Tensor::wrap(std::move(alias), me.dtype, me.shape, false));
      } else {
        st = sd.insert(me.name, out.tensors.at(t++));
      }
      if (!st.ok()) return make_error_future<StateDict>(st);
    }
    return make_ready_future(std::move(sd));
  };
  // An entry that vanished between our reads (a writer dropped it, or
  // replaced the key's kind) shows as an error: if the manifest moved on,
  // plan again with it; else the error stands.
  auto result = std::make_shared<Promise<StateDict>>(Status(Errc::shutdown, op + ": dropped"));
  auto finish = [result](const Result<StateDict>& x) { result->set(x); };
  call_client(client, actors::store_get_atom::value, std::move(call), op + " '" + key + "'")
      .on_complete([=](const Result<actors::GetOutput>& r) {
        if (r.ok()) return build(*r).on_complete(finish);
        const auto code = r.status().code();
        if (code != Errc::not_found && code != Errc::wrong_kind) {
          return (void)result->set_error(r.status());
        }
        manifest_of(client, key, op).on_complete([=](const Result<Snapshot>& fresh) {
          if (fresh.ok() && fresh->bytes != snap.bytes) {
            return read_state_dict(client, key, op, *fresh, tries + 1).on_complete(finish);
          }
          result->set_error(r.status());
        });
      });
  return result->future();
}

}  // namespace

Future<StateDict> Store::get_state_dict(std::string key) {
  const std::string op = "get_state_dict";
  if (auto s = check_key(op, key); !s.ok()) return make_error_future<StateDict>(s);
  const caf::actor_addr client = Impl::client_address(impl_.get());
  return manifest_of(client, key, op).then([=](const Snapshot& snap) {
    return read_state_dict(client, key, op, snap, 0);
  });
}

Future<void> Store::get_state_dict_into(std::string key, StateDict& sd) {
  const std::string op = "get_state_dict_into";
  if (auto s = check_key(op, key); !s.ok()) return make_error_future<void>(s);
  auto st = staging(op);  // packed entries: finish_into copies them over
  auto use = get_target(sd, *st);
  if (!use.ok()) return make_error_future<void>(use.status());
  return read_state_dict_into(Impl::client_address(impl_.get()), key, **use, op,
                              CacheSlot{Impl::manifest_cache(impl_.get()), key})
      .then([st] { return st->finish(); });
}

Future<void> Store::get_state_dict_into(std::string key, StateDict& sd,
                                        const std::map<std::string, TensorSlice>& boxes) {
  const std::string op = "get_state_dict_into";
  if (auto s = check_key(op, key); !s.ok()) return make_error_future<void>(s);
  auto st = staging(op);  // packed entries: finish_into copies them over
  auto use = get_target(sd, *st);
  if (!use.ok()) return make_error_future<void>(use.status());
  return read_state_dict_into(Impl::client_address(impl_.get()), key, **use, op,
                              CacheSlot{Impl::manifest_cache(impl_.get()), key},
                              std::make_shared<const Boxes>(boxes))
      .then([st] { return st->finish(); });
}

// -- operations ----------------------------------------------------------

Future<std::vector<VolumeStats>> Store::stats() {
  actors::StatCall call;
  auto fut = Impl::call(impl_.get(), actors::store_stat_atom::value, std::move(call), "stats");
  return fut.then([](const std::vector<wire::VolumeStat>& in) {
    std::vector<VolumeStats> out;
    for (const auto& s : in) {
      out.push_back(
          VolumeStats{s.volume_id, s.bytes_held, s.capacity_bytes, s.objects, s.staged, s.leases});
    }
    return out;
  });
}

Future<ControllerCounters> Store::controller_counters() {
  actors::CountersCall call;
  auto fut =
      Impl::call(impl_.get(), actors::store_counters_atom::value, std::move(call), "counters");
  return fut.then([](const std::vector<std::uint64_t>& v) -> Result<ControllerCounters> {
    using C = actors::ControllerCounter;
    if (v.size() < static_cast<std::size_t>(C::count_)) {
      return Status(Errc::protocol_error,
                    "controller answered " + std::to_string(v.size()) + " counters");
    }
    auto at = [&](C c) { return v[static_cast<std::size_t>(c)]; };
    ControllerCounters out;
    out.notify_put = at(C::notify_put);
    out.notify_put_batch = at(C::notify_put_batch);
    out.locate = at(C::locate);
    out.exists = at(C::exists);
    out.keys = at(C::keys);
    out.remove = at(C::remove);
    out.streams = at(C::streams);
    out.stream_readers = at(C::stream_readers);
    out.stream_subscribes = at(C::stream_subscribe);
    out.pinned_locates = at(C::pinned_locate);
    return out;
  });
}

std::vector<std::string> Store::available_transports() {
  return transports::builtin_registry().names();
}

std::vector<std::pair<std::string, Status>> Store::transport_status() {
  std::vector<std::pair<std::string, Status>> out;
  const auto& registry = transports::builtin_registry();
  for (const auto& name : registry.names()) {
    auto f = registry.find(name);
    out.emplace_back(name, f.ok() && f->available ? f->available() : f.status());
  }
  return out;
}

std::vector<std::pair<std::string, Status>> Store::gpu_transport_status() {
  std::vector<std::pair<std::string, Status>> out;
  const auto& registry = transports::builtin_registry();
  for (const auto& name : registry.names()) {
    auto f = registry.find(name);
    if (!f.ok()) {
      out.emplace_back(name, f.status());
    } else if (!f->gpu_direct) {
      out.emplace_back(name, Status(Errc::unsupported, name + " copies host memory only"));
    } else {
      out.emplace_back(name, f->gpu_direct());
    }
  }
  return out;
}

void Store::close() {
  if (impl_) impl_->close();
}

bool Store::closed() const noexcept {
  if (!impl_) return true;
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  return impl_->closed;
}

}  // namespace meshstore
