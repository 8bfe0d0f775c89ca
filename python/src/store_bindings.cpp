// _native.Store: the C++ Store for Python. The Python package (meshstore/)
// turns user objects into what these take: tensors as (source, as_bool),
// where source is a DLPack capsule or a _native.Tensor, and state dicts as
// flat lists of (name, kind, payload, as_bool) entries.

#include <pybind11/stl.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshstore/store.hpp"
#include "meshstore/store_mesh.hpp"
#include "py_future.hpp"
#include "store_convert.hpp"
#include "supervision.hpp"
#include "tensor_bridge.hpp"

namespace meshstore::python {

namespace {

using namespace std::chrono_literals;

// -- the store ------------------------------------------------------------------

class PyStore {
 public:
  explicit PyStore(Store s) : store_(std::make_shared<Store>(std::move(s))) {}
  // A store this process joined as a worker (worker_store): not this
  // object's to close.
  explicit PyStore(std::shared_ptr<Store> joined) : store_(std::move(joined)), owned_(false) {}
  ~PyStore() {
    if (!store_ || !owned_ || store_->closed()) return;
    if (interpreter_finalizing()) return;  // atexit closed every store already
    without_gil([&] { store_->close(); });
  }
  PyStore(const PyStore&) = delete;
  PyStore& operator=(const PyStore&) = delete;

  Store& s() { return *store_; }
  std::weak_ptr<Store> weak() { return store_; }
  void close() {
    if (!owned_) return;  // the worker's process closes it when it stops serving
    without_gil([&] { store_->close(); });
  }

 private:
  std::shared_ptr<Store> store_;
  bool owned_ = true;
};

// A tensor or an object, as get() answers for a key of either kind.
struct AnyValue {
  bool is_tensor = false;
  Tensor tensor;
  StoredObject object;
};

py::object any_out(const AnyValue& v) {
  return v.is_tensor ? tensor_out(v.tensor) : object_out(v.object);
}

// get() of a key that may hold a tensor or an object: the tensor read, and
// on wrong_kind the object read (two round trips for objects). `weak` is
// `store`'s: the fallback never keeps the Store alive on a store thread.
Future<AnyValue> get_any(Store& store, std::weak_ptr<Store> weak, const std::string& key) {
  auto promise = std::make_shared<Promise<AnyValue>>();
  auto out = promise->future();
  store.get(key).on_complete([promise, weak, key](const Result<Tensor>& r) {
    if (r.ok()) {
      promise->set_value(AnyValue{true, r.value(), {}});
      return;
    }
    auto store = weak.lock();
    if (r.status().code() != Errc::wrong_kind || !store) {
      promise->set_error(r.status());
      return;
    }
    store->get_stored_object(key).on_complete([promise](const Result<StoredObject>& o) {
      if (o.ok()) {
        promise->set_value(AnyValue{false, {}, o.value()});
      } else {
        promise->set_error(o.status());
      }
    });
  });
  return out;
}

// get_batch of keys that may hold tensors or objects: one batched tensor
// read; only when some key holds an object, each key on its own (get_any).
Future<std::vector<AnyValue>> get_batch_any(Store& store, std::weak_ptr<Store> weak,
                                            std::vector<std::string> keys) {
  auto promise = std::make_shared<Promise<std::vector<AnyValue>>>();
  auto out = promise->future();
  store.get_batch(keys).on_complete([promise, weak, keys](const Result<std::vector<Tensor>>& r) {
    if (r.ok()) {
      std::vector<AnyValue> values;
      values.reserve(r->size());
      for (const auto& t : *r) values.push_back(AnyValue{true, t, {}});
      promise->set_value(std::move(values));
      return;
    }
    auto store = weak.lock();
    if (r.status().code() != Errc::wrong_kind || !store) {
      promise->set_error(r.status());
      return;
    }
    std::vector<Future<AnyValue>> each;
    each.reserve(keys.size());
    for (const auto& k : keys) each.push_back(get_any(*store, weak, k));
    gather(std::move(each)).on_complete([promise](const Result<std::vector<AnyValue>>& all) {
      promise->set(all);
    });
  });
  return out;
}

py::list key_infos_out(const std::vector<KeyInfo>& infos) {
  py::list out;
  for (const auto& k : infos) {
    py::dict d;
    d["key"] = k.key;
    d["kind"] = k.is_object ? "object" : "tensor";
    if (k.is_object) {
      d["format"] = std::string(object_format_name(k.object_format));
    } else {
      d["dtype"] = std::string(dtype_name(k.dtype));
      d["shape"] = py::tuple(py::cast(k.shape));
    }
    d["nbytes"] = k.nbytes;
    d["version"] = k.version;
    d["shards"] = k.shards;
    d["copies"] = k.copies;
    out.append(d);
  }
  return out;
}

// Runs a store call with the GIL released (a call only posts a message, but
// it may wait on a lock a completing store thread holds while it waits for
// the GIL).
template <class F>
auto released(F&& f) {
  return without_gil(std::forward<F>(f));
}

struct PyStaged {
  StagedStateDict staged;
};

struct PyPublication {
  Publication pub;
};

PublishMode publish_mode(const std::string& mode) {
  if (mode == "auto") return PublishMode::automatic;
  if (mode == "direct") return PublishMode::direct;
  if (mode == "copy") return PublishMode::copy;
  throw py::value_error("mode must be 'auto', 'direct' or 'copy', got '" + mode + "'");
}

// A read of a published version into the caller's tensors (`entries`):
// `call(sd)` starts it; the future answers (version, the values read).
template <class Call>
PyFuture read_versioned_into(const py::list& entries, const std::string& what, Call&& call) {
  auto in = state_dict_in(entries, true, what);
  auto sd = in.sd;
  auto fut = released([&] { return call(*sd); });
  auto done = fut.then([sd](std::uint64_t v) { return std::make_pair(v, sd); });
  return wrap(
      std::move(done),
      [](const std::pair<std::uint64_t, std::shared_ptr<StateDict>>& r) {
        return py::object(py::make_tuple(r.first, values_out(*r.second)));
      },
      std::move(in.keep), in.sd);
}

// StagedStateDict and Publication: what stage_* and publish return.
void bind_staged_and_publications(py::module_& m) {
  py::class_<PyStaged>(m, "StagedStateDict")
      .def_property_readonly("key", [](const PyStaged& s) { return s.staged.key(); })
      .def_property_readonly("zero_copy", [](const PyStaged& s) { return s.staged.zero_copy(); })
      .def("entries",
           [](PyStaged& s) {
             auto keeper = std::make_shared<StagedStateDict>(s.staged);
             py::list out;
             for (const auto& e : s.staged.state_dict().entries()) {
               if (!e.is_tensor()) continue;
               out.append(py::make_tuple(e.name, py::cast(PyTensor{e.view, keeper, false})));
             }
             return out;
           })
      .def("commit",
           [](PyStaged& s) {
             auto fut = released([&] { return s.staged.commit(); });
             return wrap(std::move(fut), [](const std::uint64_t& v) { return py::int_(v); });
           })
      .def("abort", [](PyStaged& s) { released([&] { s.staged.abort(); }); });

  py::class_<PyPublication>(m, "Publication")
      .def_property_readonly("version", [](const PyPublication& p) { return p.pub.version(); })
      .def_property_readonly(
          "mode",
          [](const PyPublication& p) { return std::string(publish_mode_name(p.pub.mode())); })
      .def_property_readonly("lent_bytes",
                             [](const PyPublication& p) { return p.pub.lent_bytes(); })
      .def("reclaim", [](PyPublication& p) {
        auto fut = released([&] { return p.pub.reclaim(); });
        return wrap_void(std::move(fut));
      });
}

// Making, connecting and closing a Store; where it listens.
void bind_store_lifecycle(py::class_<PyStore>& cls) {
  cls.def_static("embedded",
                 [](const py::dict& kw) {
                   auto o = store_options(kw);
                   auto r = released([&] { return Store::embedded(std::move(o)); });
                   if (!r.ok()) raise_status(r.status());
                   return std::make_unique<PyStore>(std::move(r).value());
                 })
      .def_static("connect",
                  [](const std::string& address, const py::dict& kw) {
                    auto o = store_options(kw);
                    auto r = released([&] { return Store::connect(address, std::move(o)); });
                    if (!r.ok()) raise_status(r.status());
                    return std::make_unique<PyStore>(std::move(r).value());
                  })
      .def_static("from_env",
                  [](const py::dict& kw) {
                    auto o = store_options(kw);
                    auto r = released([&] { return Store::from_env(std::move(o)); });
                    if (!r.ok()) raise_status(r.status());
                    return std::make_unique<PyStore>(std::move(r).value());
                  })
      .def_static(
          "spawn_on",
          [](ProcMesh& procs, const py::dict& kw, const std::optional<PySupervision>& supervision) {
            auto o = store_options(kw);
            std::optional<Supervision> sup;
            if (supervision) sup = supervision_of(*supervision);
            auto r = released([&] {
              return sup ? spawn_store(procs, std::move(o), *sup)
                         : spawn_store(procs, std::move(o));
            });
            if (!r.ok()) raise_status(r.status());
            return std::make_unique<PyStore>(std::move(r).value());
          })
      .def_static("of_this_worker",
                  [] {
                    auto r = worker_store();
                    if (!r.ok()) raise_status(r.status());
                    return std::make_unique<PyStore>(std::move(r).value());
                  })
      .def("close", &PyStore::close)
      .def_property_readonly("closed", [](PyStore& self) { return self.s().closed(); })
      .def_property_readonly("address", [](PyStore& self) { return self.s().admin().address(); })
      .def_property_readonly("port", [](PyStore& self) { return self.s().admin().port(); });
}

// Puts: tensors, shards, batches, objects.
void bind_store_puts(py::class_<PyStore>& cls) {
  cls.def("put",
          [](PyStore& self, std::string key, py::object src, bool as_bool, int replicas) {
            auto in = import_tensor(src, as_bool, false, "put '" + key + "'");
            PutOptions o;  // replicas -1: the store's
            if (replicas == 0 || replicas < -1) {
              raise_status(Status(Errc::invalid_argument,
                                  "put '" + key + "': replicas must be in [1, 16], got " +
                                      std::to_string(replicas)));
            }
            if (replicas > 0) o.replicas = static_cast<std::uint32_t>(replicas);
            auto fut = released([&] { return self.s().put(key, in.view, o); });
            return wrap_void(std::move(fut), {in.owner});
          })
      .def("put_shard",
           [](PyStore& self, std::string key, py::object src, bool as_bool, Shape g, Shape o,
              Shape l) {
             const std::string what = "put '" + key + "'";
             auto in = import_tensor(src, as_bool, false, what);
             auto slice = slice_or_raise(g, o, l, what);
             auto fut =
                 released([&] { return self.s().put(key, in.view, PutOptions::box(slice)); });
             return wrap_void(std::move(fut), {in.owner});
           })
      .def("put_batch",
           [](PyStore& self, const py::list& items) {
             auto in = import_batch(items, false, "put_batch");
             auto fut = released([&] { return self.s().put_batch(std::move(in.views)); });
             return wrap_void(std::move(fut), std::move(in.keep));
           })
      .def("put_object", [](PyStore& self, std::string key, py::bytes data, int format) {
        std::string bytes = data;
        auto fut = released([&] {
          return self.s().put_object(key, std::move(bytes), static_cast<ObjectFormat>(format));
        });
        return wrap_void(std::move(fut));
      });
}

// Reads: get, views, slices, objects, batches, and into the caller's tensors.
void bind_store_gets(py::class_<PyStore>& cls) {
  cls.def("get",
          [](PyStore& self, std::string key) {
            auto fut = released([&] { return get_any(self.s(), self.weak(), key); });
            return wrap(std::move(fut), any_out);
          })
      .def("get_tensor",
           [](PyStore& self, std::string key) {
             auto fut = released([&] { return self.s().get(key); });
             return wrap(std::move(fut), tensor_out);
           })
      .def("get_view",
           [](PyStore& self, std::string key) {
             auto fut = released([&] { return self.s().get(key, ReadOptions::mapped()); });
             return wrap(std::move(fut), tensor_out);
           })
      .def("get_slice",
           [](PyStore& self, std::string key, Shape g, Shape o, Shape l) {
             auto slice = slice_or_raise(g, o, l, "get '" + key + "'");
             auto fut = released([&] { return self.s().get(key, ReadOptions::box(slice)); });
             return wrap(std::move(fut), tensor_out);
           })
      .def("get_object",
           [](PyStore& self, std::string key) {
             auto fut = released([&] { return self.s().get_stored_object(key); });
             return wrap(std::move(fut), object_out);
           })
      .def("get_batch",
           [](PyStore& self, std::vector<std::string> keys) {
             auto fut =
                 released([&] { return get_batch_any(self.s(), self.weak(), std::move(keys)); });
             return wrap(std::move(fut), [](const std::vector<AnyValue>& vs) {
               py::list out;
               for (const auto& v : vs) out.append(any_out(v));
               return py::object(out);
             });
           })
      .def("get_into",
           [](PyStore& self, std::string key, py::object dst, bool as_bool, bool cast) {
             auto in = import_tensor(dst, as_bool, true, "get_into '" + key + "'");
             meshstore::ReadOptions options;
             options.cast = cast;
             auto fut = released([&] { return self.s().get_into(key, in.view, options); });
             return wrap_void(std::move(fut), {in.owner});
           })
      .def("get_into_slice",
           [](PyStore& self, std::string key, py::object dst, bool as_bool, Shape g, Shape o,
              Shape l) {
             const std::string what = "get_into '" + key + "'";
             auto in = import_tensor(dst, as_bool, true, what);
             auto slice = slice_or_raise(g, o, l, what);
             auto fut =
                 released([&] { return self.s().get_into(key, in.view, ReadOptions::box(slice)); });
             return wrap_void(std::move(fut), {in.owner});
           })
      .def("get_into_batch",
           [](PyStore& self, const py::list& items) {
             auto in = import_batch(items, true, "get_into");
             auto fut = released([&] { return self.s().get_into_batch(std::move(in.views)); });
             return wrap_void(std::move(fut), std::move(in.keep));
           })
      // -- the key space ---------------------------------------------------------
      ;
}

// The key space: keys, list, exists, remove.
void bind_store_keys(py::class_<PyStore>& cls) {
  cls.def("keys",
          [](PyStore& self, std::string prefix) {
            auto fut = released([&] { return self.s().keys(prefix); });
            return wrap(std::move(fut),
                        [](const std::vector<std::string>& k) { return py::object(py::cast(k)); });
          })
      .def("list",
           [](PyStore& self, std::string prefix) {
             auto fut = released([&] { return self.s().list(prefix); });
             return wrap(std::move(fut), [](const std::vector<KeyInfo>& k) {
               return py::object(key_infos_out(k));
             });
           })
      .def("exists",
           [](PyStore& self, std::string key) {
             auto fut = released([&] { return self.s().exists(key); });
             return wrap(std::move(fut), [](const bool& b) { return py::object(py::bool_(b)); });
           })
      .def("remove",
           [](PyStore& self, std::string key) {
             auto fut = released([&] { return self.s().remove(key); });
             return wrap_void(std::move(fut));
           })
      .def("remove_batch", [](PyStore& self, std::vector<std::string> keys) {
        auto fut = released([&] { return self.s().remove_batch(std::move(keys)); });
        return wrap(std::move(fut), [](const std::size_t& n) { return py::object(py::int_(n)); });
      });
}

// What a store reports of itself: its fast path, its volumes.
void bind_store_stats(py::class_<PyStore>& cls) {
  cls.def("metrics_address", [](PyStore& self) { return self.s().admin().metrics_address(); });
  cls.def("fast_path_stats",
          [](PyStore& self) {
            const auto f = self.s().admin().fast_path_stats();
            py::dict d;
            d["hits"] = f.hits;
            d["misses"] = f.misses;
            d["stale"] = f.stale;
            d["rings"] = f.rings;
            d["puts"] = f.puts;
            d["lease_free_reads"] = f.lease_free_reads;
            d["lease_free_stale"] = f.lease_free_stale;
            d["direct_reads"] = f.direct_reads;
            d["direct_state_dicts"] = f.direct_state_dicts;
            d["state_dict_puts"] = f.state_dict_puts;
            d["resent_commits"] = f.resent_commits;
            return d;
          })
      .def("stats", [](PyStore& self) {
        auto fut = released([&] { return self.s().admin().stats(); });
        return wrap(std::move(fut), [](const std::vector<VolumeStats>& vs) {
          py::list out;
          for (const auto& v : vs) {
            py::dict d;
            d["volume_id"] = v.volume_id;
            d["bytes_held"] = v.bytes_held;
            d["capacity_bytes"] = v.capacity_bytes;
            d["objects"] = v.objects;
            d["staged"] = v.staged;
            d["leases"] = v.leases;
            d["evictions"] = v.evictions;
            d["evicted_bytes"] = v.evicted_bytes;
            d["unreachable"] = v.unreachable;
            out.append(d);
          }
          return py::object(out);
        });
      });
}

// State dicts: put, get, get_into.
void bind_store_state_dicts(py::class_<PyStore>& cls) {
  cls.def("put_state_dict",
          [](PyStore& self, std::string key, const py::list& entries, const py::dict& opts) {
            auto in = state_dict_in(entries, false, "put_state_dict '" + key + "'");
            auto o = put_options(opts);
            auto fut = released([&] { return self.s().state_dicts().put(key, *in.sd, o); });
            return wrap_void(std::move(fut), std::move(in.keep), in.sd);
          })
      .def("get_state_dict",
           [](PyStore& self, std::string key) {
             auto fut = released([&] { return self.s().state_dicts().get(key); });
             return wrap(std::move(fut),
                         [](const StateDict& sd) { return py::object(state_dict_out(sd)); });
           })
      .def("get_state_dict_into",
           [](PyStore& self, std::string key, const py::list& entries, bool cast) {
             auto in = state_dict_in(entries, true, "get_state_dict_into '" + key + "'");
             auto sd = in.sd;
             auto fut = released([&] {
               return self.s().state_dicts().get_into(key, *sd, StateDictReadOptions{cast, {}});
             });
             auto done = fut.then([sd]() { return sd; });
             return wrap(
                 std::move(done),
                 [](const std::shared_ptr<StateDict>& s) { return py::object(values_out(*s)); },
                 std::move(in.keep), in.sd);
           });
}

// Versions: publish, latest, next.
void bind_store_versions(py::class_<PyStore>& cls) {
  cls.def("publish_state_dict",
          [](PyStore& self, std::string prefix, const py::list& entries, int keep,
             const py::dict& opts) {
            auto in = state_dict_in(entries, false, "publish_state_dict '" + prefix + "'");
            auto o = put_options(opts);
            auto fut = released([&] {
              return self.s().state_dicts().publish(prefix, *in.sd,
                                                    PublishOptions::by_copy(keep, o));
            });
            return wrap(
                std::move(fut),
                [](const Publication& p) { return py::object(py::int_(p.version())); },
                std::move(in.keep), in.sd);
          })
      .def("publish",
           // Answers (the publish's future, the loan's): the second keeps
           // the tensors (and whatever the import made of them) alive until
           // the store no longer reads them, even if the caller drops every
           // handle first.
           [](PyStore& self, std::string prefix, const py::list& entries, int keep,
              const std::string& mode, bool retain, py::object reclaim_timeout,
              bool revoke_on_timeout, const py::dict& opts) {
             auto in = state_dict_in(entries, false, "publish '" + prefix + "'");
             PublishOptions o;
             o.mode = publish_mode(mode);
             o.keep = keep;
             o.retain = retain;
             o.reclaim_timeout = seconds_arg(reclaim_timeout, "reclaim_timeout");
             o.revoke_on_timeout = revoke_on_timeout;
             o.put = put_options(opts);
             auto back = std::make_shared<Promise<void>>();
             auto fut = released([&] { return self.s().state_dicts().publish(prefix, *in.sd, o); });
             fut.on_complete([back](const Result<Publication>& r) {
               if (!r.ok()) back->set_value();  // nothing lent
             });
             // Linked before the publication is seen: a copy's loan is over
             // by the time Python has the Publication.
             auto linked = fut.then([back](const Publication& p) {
               p.returned().on_complete([back](const Result<void>&) { back->set_value(); });
               return p;
             });
             auto returned = wrap_void(back->future(), std::move(in.keep), in.sd);
             auto published = wrap(std::move(linked),
                                   [](const Publication& p) { return py::cast(PyPublication{p}); });
             return py::make_tuple(py::cast(std::move(published)), py::cast(std::move(returned)));
           })
      .def("latest_version",
           [](PyStore& self, std::string prefix) {
             auto fut = released([&] { return self.s().state_dicts().latest(prefix); });
             return wrap(std::move(fut),
                         [](const std::uint64_t& v) { return py::object(py::int_(v)); });
           })
      .def("get_latest_state_dict_into",
           [](PyStore& self, std::string prefix, const py::list& entries, bool cast) {
             return read_versioned_into(entries, "get_latest_state_dict_into '" + prefix + "'",
                                        [&](StateDict& sd) {
                                          return self.s().state_dicts().get_latest_into(
                                              prefix, sd, StateDictReadOptions{cast, {}});
                                        });
           })
      .def("get_next_state_dict_into",
           [](PyStore& self, std::string prefix, const py::list& entries, std::uint64_t after,
              py::object timeout, bool cast) {
             const auto wait = seconds_arg(timeout, "timeout");
             return read_versioned_into(
                 entries, "get_next_state_dict_into '" + prefix + "'", [&](StateDict& sd) {
                   return self.s().state_dicts().get_next_into(prefix, sd, after, wait,
                                                               StateDictReadOptions{cast, {}});
                 });
           });
}

// Zero-copy staging: stage_publish, stage_state_dict.
void bind_store_staging(py::class_<PyStore>& cls) {
  cls.def("stage_publish",
          [](PyStore& self, std::string prefix, const py::list& specs, int keep,
             const py::dict& opts) {
            auto s = specs_in(specs, "stage_publish '" + prefix + "'");
            auto o = put_options(opts);
            auto fut = released([&] {
              return self.s().state_dicts().stage_publish(prefix, std::move(s), keep, o);
            });
            return wrap(std::move(fut),
                        [](const StagedStateDict& st) { return py::cast(PyStaged{st}); });
          })
      .def("stage_state_dict", [](PyStore& self, std::string key, const py::list& specs,
                                  const py::dict& opts) {
        auto s = specs_in(specs, "stage_state_dict '" + key + "'");
        auto o = put_options(opts);
        auto fut = released([&] { return self.s().state_dicts().stage(key, std::move(s), o); });
        return wrap(std::move(fut),
                    [](const StagedStateDict& st) { return py::cast(PyStaged{st}); });
      });
}

}  // namespace

void bind_store(py::module_& m) {
  bind_staged_and_publications(m);
  py::class_<PyStore> cls(m, "Store");
  bind_store_lifecycle(cls);
  bind_store_puts(cls);
  bind_store_gets(cls);
  bind_store_keys(cls);
  bind_store_stats(cls);
  bind_store_state_dicts(cls);
  bind_store_versions(cls);
  bind_store_staging(cls);
  m.def("available_transports", &Store::Admin::available_transports);
  m.def("transport_status", [] {
    py::dict out;
    for (const auto& [name, s] : Store::Admin::transport_status()) {
      out[py::str(name)] = s.ok() ? py::object(py::none()) : py::object(py::str(s.message()));
    }
    return out;
  });
}

}  // namespace meshstore::python
