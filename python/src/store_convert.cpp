// Conversions between Python's arguments and the Store's types.

#include "store_convert.hpp"

#include <pybind11/stl.h>

#include <map>

#include "py_future.hpp"
#include "tensor_bridge.hpp"

namespace meshstore::python {

using namespace std::chrono_literals;

// -- options ------------------------------------------------------------------

std::chrono::milliseconds seconds_arg(const py::handle& v, const char* name) {
  const double s = v.cast<double>();
  if (!(s > 0) || s > 1e9) {
    throw py::value_error(std::string(name) + " must be a positive number of seconds, got " +
                          py::repr(v).cast<std::string>());
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000 + 0.5));
}

namespace {

// A transport or security option of StoreOptions into `o`; false when
// `name` is none.
bool transport_option(StoreOptions& o, const std::string& name, py::handle v) {
  if (name == "transport")
    o.transport.name = v.cast<std::string>();
  else if (name == "tcp_streams")
    o.transport.tcp_streams = v.cast<int>();
  else if (name == "tcp_chunk_bytes")
    o.transport.tcp_chunk_bytes = v.cast<std::size_t>();
  else if (name == "encrypt_tcp")
    o.security.encrypt_tcp = v.cast<bool>();
  else if (name == "shm_max_mappings")
    o.transport.shm_max_mappings = v.cast<int>();
  else if (name == "shared_memory_volumes")
    o.transport.shared_memory_volumes = v.cast<bool>();
  else if (name == "fast_path_spin_us")
    o.transport.fast_path_spin = std::chrono::microseconds(v.cast<std::int64_t>());
  else if (name == "rpc_chunk_bytes")
    o.transport.rpc_chunk_bytes = v.cast<std::size_t>();
  else if (name == "rpc_chunks_in_flight")
    o.transport.rpc_chunks_in_flight = v.cast<int>();
  else if (name == "tls_certificate")
    o.security.tls.certificate = v.cast<std::string>();
  else if (name == "tls_key")
    o.security.tls.key = v.cast<std::string>();
  else if (name == "tls_ca_file")
    o.security.tls.ca_file = v.cast<std::string>();
  else
    return false;
  return true;
}

}  // namespace

StoreOptions store_options(const py::dict& kw) {
  StoreOptions o;
  for (auto item : kw) {
    const auto name = item.first.cast<std::string>();
    const py::handle v = item.second;
    try {
      if (name == "num_volumes")
        o.placement.num_volumes = v.cast<int>();
      else if (name == "replicas")
        o.placement.replicas = v.cast<int>();
      else if (name == "repair_share")
        o.placement.repair_share = v.cast<double>();
      else if (name == "volume_capacity_bytes")
        o.limits.volume_capacity_bytes = v.cast<std::uint64_t>();
      else if (name == "strategy")
        o.placement.strategy = v.cast<std::string>();
      else if (name == "rank")
        o.placement.rank = v.cast<int>();
      else if (name == "local_rank")
        o.placement.local_rank = v.cast<int>();
      else if (name == "host")
        o.placement.host = v.cast<std::string>();
      else if (name == "listen")
        o.listen = v.cast<std::string>();
      else if (name == "standby_of")
        o.standby_of = v.cast<std::string>();
      else if (name == "state_dir")
        o.state_dir = v.cast<std::string>();
      else if (name == "rebuild_timeout")
        o.limits.rebuild_timeout = seconds_arg(v, "rebuild_timeout");
      else if (name == "connect_timeout")
        o.limits.connect_timeout = seconds_arg(v, "connect_timeout");
      else if (name == "reconnect_timeout")  // 0: never reconnect
        o.limits.reconnect_timeout = v.cast<double>() == 0 ? std::chrono::milliseconds(0)
                                                           : seconds_arg(v, "reconnect_timeout");
      else if (name == "host_volumes")
        o.placement.host_volumes = v.cast<bool>();
      else if (name == "controller_process")
        o.placement.controller_process = v.cast<int>();
      else if (name == "volume_pool_bytes")
        o.limits.volume_pool_bytes = v.cast<std::uint64_t>();
      else if (name == "request_timeout")
        o.limits.request_timeout = seconds_arg(v, "request_timeout");
      else if (name == "scheduler_threads")
        o.limits.scheduler_threads = v.cast<int>();
      else if (name == "log_level")
        o.log_level = v.cast<std::string>();
      else if (name == "metrics")
        o.metrics = v.cast<std::string>();
      else if (name == "eviction")
        o.limits.eviction = v.cast<std::string>();
      else if (!transport_option(o, name, v))
        throw py::type_error("unknown store option '" + name + "'");
    } catch (const py::cast_error&) {
      throw py::type_error("store option '" + name +
                           "' has the wrong type: " + py::repr(v).cast<std::string>());
    }
  }
  return o;
}

StateDictPutOptions put_options(const py::dict& kw) {
  StateDictPutOptions o;
  for (auto item : kw) {
    const auto name = item.first.cast<std::string>();
    const py::handle v = item.second;
    if (name == "pack_max_tensor_bytes") {
      o.pack_max_tensor_bytes = v.cast<std::uint64_t>();
    } else if (name == "pack_bucket_bytes") {
      o.pack_bucket_bytes = v.cast<std::uint64_t>();
    } else if (name == "transfer_dtype") {
      if (v.is_none()) continue;
      auto d = parse_dtype(v.cast<std::string>());
      if (!d.ok()) raise_status(d.status());
      if (*d != DType::bfloat16 && *d != DType::float16) {
        throw py::value_error("transfer_dtype must be bfloat16 or float16, got " +
                              std::string(dtype_name(*d)));
      }
      o.transfer_dtype = *d;
    } else {
      throw py::type_error("unknown state dict option '" + name + "'");
    }
  }
  return o;
}

// -- values out ---------------------------------------------------------------

py::object tensor_out(const Tensor& t) { return py::cast(from_tensor(t)); }

py::object object_out(const StoredObject& o) {
  return py::make_tuple(py::bytes(o.bytes), static_cast<int>(o.format));
}

py::object value_out(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::bytes:
      return py::bytes(v.text());
    case Value::Kind::string:
      return py::str(v.text());
    case Value::Kind::int64:
      return py::int_(v.as_int64());
    case Value::Kind::float64:
      return py::float_(v.as_float64());
    case Value::Kind::boolean:
      return py::bool_(v.as_bool());
  }
  return py::none();
}

py::list state_dict_out(const StateDict& sd) {
  py::list out;
  for (const auto& e : sd.entries()) {
    if (e.value) {
      out.append(py::make_tuple(e.name, value_out(*e.value)));
    } else {
      out.append(py::make_tuple(e.name, tensor_out(e.owned)));
    }
  }
  return out;
}

// The value entries of a state dict read in place (the tensors are the
// caller's own).
py::list values_out(const StateDict& sd) {
  py::list out;
  for (const auto& e : sd.entries()) {
    if (e.value) out.append(py::make_tuple(e.name, value_out(*e.value)));
  }
  return out;
}

// -- values in ----------------------------------------------------------------

// entries: [(name, kind, payload, as_bool)], kind one of "t" (tensor), "b"
// (bytes), "s" (str), "i" (int), "f" (float), "?" (bool).
BuiltStateDict state_dict_in(const py::list& entries, bool for_write, const std::string& what) {
  BuiltStateDict out;
  for (auto h : entries) {
    auto t = h.cast<py::tuple>();
    if (t.size() != 4) throw py::value_error(what + ": malformed state dict entry");
    const auto name = t[0].cast<std::string>();
    const auto kind = t[1].cast<std::string>();
    py::object payload = t[2];
    Status s;
    if (kind == "t") {
      auto imported =
          import_tensor(payload, t[3].cast<bool>(), for_write, what + ": entry '" + name + "'");
      s = out.sd->insert(name, imported.view);
      out.keep.push_back(std::move(imported.owner));
    } else if (kind == "b") {
      s = out.sd->insert(name, Value::bytes(payload.cast<std::string>()));
    } else if (kind == "s") {
      s = out.sd->insert(name, Value::string(payload.cast<std::string>()));
    } else if (kind == "i") {
      s = out.sd->insert(name, Value::int64(payload.cast<std::int64_t>()));
    } else if (kind == "f") {
      s = out.sd->insert(name, Value::float64(payload.cast<double>()));
    } else if (kind == "?") {
      s = out.sd->insert(name, Value::boolean(payload.cast<bool>()));
    } else {
      throw py::value_error(what + ": entry '" + name + "' has unknown kind '" + kind + "'");
    }
    if (!s.ok()) raise_status(s.with_context(what));
  }
  return out;
}

Result<TensorSlice> slice_in(const Shape& global, const Shape& offsets, const Shape& local) {
  return TensorSlice::make(global, offsets, local);
}

TensorSlice slice_or_raise(const Shape& g, const Shape& o, const Shape& l,
                           const std::string& what) {
  auto s = slice_in(g, o, l);
  if (!s.ok()) raise_status(s.status().with_context(what));
  return std::move(s).value();
}

std::vector<TensorSpec> specs_in(const py::list& specs, const std::string& what) {
  std::vector<TensorSpec> out;
  for (auto h : specs) {
    auto t = h.cast<py::tuple>();
    if (t.size() != 3) throw py::value_error(what + ": a spec is (name, dtype, shape)");
    auto d = parse_dtype(t[1].cast<std::string>());
    if (!d.ok()) raise_status(d.status().with_context(what));
    out.push_back(TensorSpec{t[0].cast<std::string>(), *d, t[2].cast<Shape>()});
  }
  return out;
}

ImportedBatch import_batch(const py::list& items, bool for_write, const char* op) {
  ImportedBatch out;
  for (auto h : items) {
    auto t = h.cast<py::tuple>();
    auto key = t[0].cast<std::string>();
    auto in = import_tensor(t[1], t[2].cast<bool>(), for_write, op + (" '" + key + "'"));
    out.views.emplace_back(std::move(key), in.view);
    out.keep.push_back(std::move(in.owner));
  }
  return out;
}

}  // namespace meshstore::python
