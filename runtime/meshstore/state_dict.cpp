#include "meshstore/state_dict.hpp"

#include <cstring>

namespace meshstore {

// -- Value ----------------------------------------------------------------

Value Value::bytes(std::string b) {
  Value v;
  v.kind_ = Kind::bytes;
  v.text_ = std::move(b);
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::string;
  v.text_ = std::move(s);
  return v;
}
Value Value::int64(std::int64_t x) {
  Value v;
  v.kind_ = Kind::int64;
  v.i_ = x;
  return v;
}
Value Value::float64(double x) {
  Value v;
  v.kind_ = Kind::float64;
  v.f_ = x;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind_ = Kind::boolean;
  v.i_ = x ? 1 : 0;
  return v;
}

bool Value::operator==(const Value& o) const noexcept {
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::bytes:
    case Kind::string:
      return text_ == o.text_;
    case Kind::float64:
      return std::memcmp(&f_, &o.f_, sizeof(f_)) == 0;
    default:
      return i_ == o.i_;
  }
}

std::string Value::encode() const {
  std::string out(1, static_cast<char>(kind_));
  switch (kind_) {
    case Kind::bytes:
    case Kind::string:
      out += text_;
      break;
    case Kind::float64:
      out.append(reinterpret_cast<const char*>(&f_), sizeof(f_));
      break;
    case Kind::int64:
      out.append(reinterpret_cast<const char*>(&i_), sizeof(i_));
      break;
    case Kind::boolean:
      out.push_back(static_cast<char>(i_ ? 1 : 0));
      break;
  }
  return out;
}

Result<Value> Value::decode(const std::string& b) {
  auto bad = [&](const char* why) {
    return Status(Errc::protocol_error, std::string("stored value: ") + why);
  };
  if (b.empty()) return bad("empty");
  const auto kind = static_cast<Kind>(static_cast<unsigned char>(b[0]));
  const std::string body = b.substr(1);
  switch (kind) {
    case Kind::bytes:
      return Value::bytes(body);
    case Kind::string:
      return Value::string(body);
    case Kind::int64: {
      if (body.size() != 8) return bad("an int64 needs 8 bytes");
      std::int64_t x;
      std::memcpy(&x, body.data(), 8);
      return Value::int64(x);
    }
    case Kind::float64: {
      if (body.size() != 8) return bad("a float64 needs 8 bytes");
      double x;
      std::memcpy(&x, body.data(), 8);
      return Value::float64(x);
    }
    case Kind::boolean:
      if (body.size() != 1 || static_cast<unsigned char>(body[0]) > 1) return bad("bad boolean");
      return Value::boolean(body[0] != 0);
  }
  return bad("unknown kind");
}

// -- StateDict ------------------------------------------------------------

Status StateDict::check_new(const std::string& name) const {
  if (name.empty()) return Status(Errc::invalid_argument, "state dict: empty name");
  if (index_.count(name) != 0) {
    return Status(Errc::invalid_argument, "state dict: name '" + name + "' appears twice");
  }
  return Status();
}

Status StateDict::insert(std::string name, const TensorView& view) {
  MESHSTORE_RETURN_IF_ERROR(check_new(name));
  MESHSTORE_RETURN_IF_ERROR(view.validate("state dict entry '" + name + "'"));
  index_.emplace(name, entries_.size());
  Entry e;
  e.name = std::move(name);
  e.view = view;
  entries_.push_back(std::move(e));
  return Status();
}

Status StateDict::insert(std::string name, Tensor tensor) {
  MESHSTORE_RETURN_IF_ERROR(check_new(name));
  if (!tensor.defined()) {
    return Status(Errc::invalid_argument, "state dict entry '" + name + "': undefined tensor");
  }
  index_.emplace(name, entries_.size());
  Entry e;
  e.name = std::move(name);
  e.view = tensor.view();
  e.owned = std::move(tensor);
  entries_.push_back(std::move(e));
  return Status();
}

Status StateDict::insert(std::string name, Value value) {
  MESHSTORE_RETURN_IF_ERROR(check_new(name));
  index_.emplace(name, entries_.size());
  Entry e;
  e.name = std::move(name);
  e.value = std::move(value);
  entries_.push_back(std::move(e));
  return Status();
}

const StateDict::Entry* StateDict::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

Status StateDict::set_value(const std::string& name, Value value) {
  auto it = index_.find(name);
  if (it == index_.end()) return Status(Errc::not_found, "state dict: no entry '" + name + "'");
  auto& e = entries_[it->second];
  if (e.is_tensor()) {
    return Status(Errc::wrong_kind, "state dict: '" + name + "' holds a tensor, not a value");
  }
  e.value = std::move(value);
  return Status();
}

std::uint64_t StateDict::tensor_bytes() const noexcept {
  std::uint64_t n = 0;
  for (const auto& e : entries_) {
    if (e.is_tensor()) n += e.view.nbytes();
  }
  return n;
}

// -- Nested ---------------------------------------------------------------

Nested Nested::map() { return Nested(); }
Nested Nested::list() {
  Nested n;
  n.kind_ = Kind::list;
  return n;
}
Nested Nested::tensor(const TensorView& view) {
  Nested n;
  n.kind_ = Kind::tensor;
  n.view_ = view;
  return n;
}
Nested Nested::tensor(Tensor tensor) {
  Nested n;
  n.kind_ = Kind::tensor;
  n.view_ = tensor.view();
  n.owned_ = std::move(tensor);
  return n;
}
Nested Nested::value(Value v) {
  Nested n;
  n.kind_ = Kind::value;
  n.value_ = std::move(v);
  return n;
}
Nested& Nested::set(std::string key, Nested child) {
  map_.insert_or_assign(std::move(key), std::move(child));
  return *this;
}
Nested& Nested::push(Nested child) {
  list_.push_back(std::move(child));
  return *this;
}

// -- names ----------------------------------------------------------------

std::string join_name(const std::vector<std::string>& parts, const std::vector<bool>& is_index) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) out += '.';
    if (i < is_index.size() && is_index[i]) {
      out += "[" + parts[i] + "]";
      continue;
    }
    for (std::size_t k = 0; k < parts[i].size(); ++k) {
      const char c = parts[i][k];
      if (c == '.' || c == '\\' || (k == 0 && c == '[')) out += '\\';
      out += c;
    }
  }
  return out;
}

Status split_name(const std::string& name, std::vector<std::string>& parts,
                  std::vector<bool>& is_index) {
  parts.clear();
  is_index.clear();
  auto bad = [&](const std::string& why) {
    return Status(Errc::invalid_argument, "state dict name '" + name + "': " + why);
  };
  std::string cur;
  bool index = false, escaped_start = false;
  auto finish = [&]() -> Status {
    if (index) {
      if (cur.size() < 3 || cur.back() != ']') return bad("malformed list index '" + cur + "'");
      const std::string digits = cur.substr(1, cur.size() - 2);
      for (char c : digits) {
        if (c < '0' || c > '9') return bad("malformed list index '" + cur + "'");
      }
      if (digits.size() > 1 && digits[0] == '0') return bad("list index with leading zero");
      if (digits.size() > 18) return bad("list index too large");
      parts.push_back(digits);
    } else {
      if (cur.empty() && !escaped_start) return bad("empty component");
      parts.push_back(cur);
    }
    is_index.push_back(index);
    cur.clear();
    index = false;
    escaped_start = false;
    return Status();
  };
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (c == '\\') {
      if (i + 1 >= name.size()) return bad("ends with a lone '\\'");
      if (cur.empty()) escaped_start = true;
      cur += name[++i];
    } else if (c == '.') {
      MESHSTORE_RETURN_IF_ERROR(finish());
    } else {
      if (cur.empty() && !escaped_start && c == '[') index = true;
      cur += c;
    }
  }
  return finish();
}

namespace {

Status flatten_into(const Nested& node, std::vector<std::string>& path, std::vector<bool>& idx,
                    StateDict& out) {
  switch (node.kind()) {
    case Nested::Kind::map:
      for (const auto& [key, child] : node.children()) {
        if (key.empty()) {
          return Status(Errc::invalid_argument,
                        "flatten: an empty map key under '" + join_name(path, idx) + "'");
        }
        path.push_back(key);
        idx.push_back(false);
        MESHSTORE_RETURN_IF_ERROR(flatten_into(child, path, idx, out));
        path.pop_back();
        idx.pop_back();
      }
      return Status();
    case Nested::Kind::list:
      for (std::size_t i = 0; i < node.items().size(); ++i) {
        path.push_back(std::to_string(i));
        idx.push_back(true);
        MESHSTORE_RETURN_IF_ERROR(flatten_into(node.items()[i], path, idx, out));
        path.pop_back();
        idx.pop_back();
      }
      return Status();
    case Nested::Kind::tensor:
      if (node.owned().defined()) return out.insert(join_name(path, idx), node.owned());
      return out.insert(join_name(path, idx), node.view());
    case Nested::Kind::value:
      return out.insert(join_name(path, idx), *node.val());
  }
  return Status();
}

// A node under construction: children by component, leaves set once.
struct Builder {
  bool is_leaf = false;
  bool is_list = false;
  bool is_map = false;
  const StateDict::Entry* leaf = nullptr;
  std::map<std::string, Builder> map;
  std::map<std::uint64_t, Builder> list;
};

Result<Nested> build(const Builder& b, const std::string& where) {
  if (b.is_leaf) {
    const auto& e = *b.leaf;
    if (!e.is_tensor()) return Nested::value(*e.value);
    if (e.owned.defined()) return Nested::tensor(e.owned);
    return Nested::tensor(e.view);
  }
  if (b.is_list) {
    Nested n = Nested::list();
    std::uint64_t expect = 0;
    for (const auto& [i, child] : b.list) {
      if (i != expect) {
        return Status(Errc::invalid_argument,
                      "unflatten: list '" + where + "' lacks index " + std::to_string(expect));
      }
      ++expect;
      auto c = build(child, where + ".[" + std::to_string(i) + "]");
      if (!c.ok()) return c.status();
      n.push(std::move(c).value());
    }
    return n;
  }
  Nested n = Nested::map();
  for (const auto& [key, child] : b.map) {
    auto c = build(child, where.empty() ? key : where + "." + key);
    if (!c.ok()) return c.status();
    n.set(key, std::move(c).value());
  }
  return n;
}

}  // namespace

Result<StateDict> flatten(const Nested& root) {
  if (root.kind() != Nested::Kind::map) {
    return Status(Errc::invalid_argument, "flatten: the root must be a map");
  }
  StateDict out;
  std::vector<std::string> path;
  std::vector<bool> idx;
  MESHSTORE_RETURN_IF_ERROR(flatten_into(root, path, idx, out));
  return out;
}

Result<Nested> unflatten(const StateDict& sd) {
  Builder root;
  root.is_map = true;
  std::vector<std::string> parts;
  std::vector<bool> idx;
  for (const auto& e : sd.entries()) {
    MESHSTORE_RETURN_IF_ERROR(split_name(e.name, parts, idx));
    Builder* node = &root;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      if (node->is_leaf) {
        return Status(Errc::invalid_argument,
                      "unflatten: '" + e.name + "' lies under another entry's leaf");
      }
      const bool want_list = idx[i];
      if ((want_list && node->is_map) || (!want_list && node->is_list)) {
        return Status(Errc::invalid_argument,
                      "unflatten: '" + e.name + "' mixes list indices and map keys at one level");
      }
      if (want_list) {
        node->is_list = true;
        node = &node->list[std::stoull(parts[i])];
      } else {
        node->is_map = true;
        node = &node->map[parts[i]];
      }
    }
    if (node->is_leaf || node->is_map || node->is_list) {
      return Status(Errc::invalid_argument,
                    "unflatten: '" + e.name + "' is both an entry and a container");
    }
    node->is_leaf = true;
    node->leaf = &e;
  }
  return build(root, "");
}

}  // namespace meshstore
