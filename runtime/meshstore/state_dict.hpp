#pragma once

// State dicts: an ordered map from flattened names
// ("model.layers.0.self_attn.q_proj.weight") to tensors or plain values, and
// the flattening of nested maps and lists into such names and back.
//
// Name grammar (flatten/unflatten): a name is path components joined by
// '.'. A map key is written as it is, with '\' before every '.', '\' and a
// leading '[' it contains; a list element is written "[i]". So
// {"a.b": {"c": [x, y]}} flattens to "a\.b.c.[0]" and "a\.b.c.[1]", and
// every tree of non-empty maps and lists round-trips. Empty maps and lists
// hold no entry, so they vanish when flattened.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "meshstore/status.hpp"
#include "meshstore/tensor.hpp"

namespace meshstore {

/// A plain value a state dict holds besides tensors (a step counter, a
/// learning rate, a config string). A value type.
class Value {
 public:
  /// What the value holds; the numbers are stable (they are stored).
  enum class Kind : std::uint8_t { bytes = 0, string = 1, int64 = 2, float64 = 3, boolean = 4 };

  /// A bytes value holding `b`.
  static Value bytes(std::string b);
  /// A string value holding `s`.
  static Value string(std::string s);
  /// An int64 value holding `v`.
  static Value int64(std::int64_t v);
  /// A float64 value holding `v`.
  static Value float64(double v);
  /// A boolean value holding `v`.
  static Value boolean(bool v);

  /// What the value holds.
  Kind kind() const noexcept { return kind_; }
  /// The bytes of a bytes or string value ("" for the others).
  const std::string& text() const noexcept { return text_; }
  /// The number of an int64 value (1 or 0 for a boolean, 0 for the others).
  std::int64_t as_int64() const noexcept { return i_; }
  /// The number of a float64 value (0 for the others).
  double as_float64() const noexcept { return f_; }
  /// True for a true boolean or a non-zero int64; false otherwise.
  bool as_bool() const noexcept { return i_ != 0; }

  /// Bit-exact equality (kind and content; float64 compared by bits).
  bool operator==(const Value& other) const noexcept;
  /// The negation of operator==.
  bool operator!=(const Value& other) const noexcept { return !(*this == other); }

  /// The value as stored: a kind byte, then the content (little-endian).
  std::string encode() const;
  /// The inverse of encode(); Errc::protocol_error on malformed input.
  static Result<Value> decode(const std::string& bytes);

 private:
  Kind kind_ = Kind::int64;
  std::string text_;
  std::int64_t i_ = 0;
  double f_ = 0;
};

/// An ordered map from names to tensors or values. Tensors are either
/// borrowed (a TensorView: the caller keeps the memory alive, as for a put)
/// or owned (a Tensor, as a get returns them). Insertion order is kept.
/// Thread-compatible.
class StateDict {
 public:
  /// One named entry: a tensor (borrowed or owned) or a plain value.
  struct Entry {
    /// The entry's flattened name.
    std::string name;
    /// The tensor's memory (for an owned tensor, a view of `owned`).
    TensorView view;
    /// Set when the state dict owns the tensor.
    Tensor owned;
    /// Set for a plain value instead of a tensor.
    std::optional<Value> value;
    /// True for a tensor entry, false for a plain value.
    bool is_tensor() const noexcept { return !value.has_value(); }
  };

  /// Adds a borrowed tensor. Errc::invalid_argument for an empty name, a
  /// name already present, or an invalid view (named in the message).
  Status insert(std::string name, const TensorView& view);
  /// Adds an owned tensor (must be defined). Same errors.
  Status insert(std::string name, Tensor tensor);
  /// Adds a plain value. Same errors.
  Status insert(std::string name, Value value);

  /// Number of entries, tensors and values.
  std::size_t size() const noexcept { return entries_.size(); }
  /// True when there is no entry.
  bool empty() const noexcept { return entries_.empty(); }
  /// Entries in insertion order.
  const std::vector<Entry>& entries() const noexcept { return entries_; }
  /// The entry named `name`, or nullptr.
  const Entry* find(const std::string& name) const;
  /// Replaces the value of value entry `name` (what get_state_dict_into
  /// does for values). Errc::not_found or Errc::wrong_kind otherwise.
  Status set_value(const std::string& name, Value value);
  /// Bytes of all tensors.
  std::uint64_t tensor_bytes() const noexcept;

 private:
  Status check_new(const std::string& name) const;
  std::vector<Entry> entries_;
  std::unordered_map<std::string, std::size_t> index_;
};

/// A nested structure of maps (ordered by key), lists, tensors and values,
/// as a model's parameters and an optimizer's state come. A value type.
class Nested {
 public:
  /// What a node is.
  enum class Kind { map, list, tensor, value };

  /// An empty map.
  static Nested map();
  /// An empty list.
  static Nested list();
  /// A borrowed tensor: the caller keeps the memory of `view` alive.
  static Nested tensor(const TensorView& view);
  /// An owned tensor.
  static Nested tensor(Tensor tensor);
  /// A plain value.
  static Nested value(Value v);

  /// What this node is.
  Kind kind() const noexcept { return kind_; }
  /// Map: sets child `key` (replacing one of the same key). Returns *this.
  Nested& set(std::string key, Nested child);
  /// List: appends a child. Returns *this.
  Nested& push(Nested child);
  /// Map children by key.
  const std::map<std::string, Nested>& children() const noexcept { return map_; }
  /// List children in order.
  const std::vector<Nested>& items() const noexcept { return list_; }
  /// Tensor: its memory (for an owned tensor, a view of owned()).
  const TensorView& view() const noexcept { return view_; }
  /// Tensor: the tensor when owned; undefined when borrowed.
  const Tensor& owned() const noexcept { return owned_; }
  /// Value: the value; empty for the other kinds.
  const std::optional<Value>& val() const noexcept { return value_; }

 private:
  Kind kind_ = Kind::map;
  std::map<std::string, Nested> map_;
  std::vector<Nested> list_;
  TensorView view_;
  Tensor owned_;
  std::optional<Value> value_;
};

/// Joins path components into a name (escaping as in the grammar above);
/// a component that is a list index is given as "[i]" by the caller.
std::string join_name(const std::vector<std::string>& map_keys_or_indices,
                      const std::vector<bool>& is_index);
/// Splits a name into components; `is_index[i]` tells list indices ("[i]",
/// given back as the decimal number). Errc::invalid_argument for a dangling
/// '\', an empty component or a malformed index, naming the name.
Status split_name(const std::string& name, std::vector<std::string>& components,
                  std::vector<bool>& is_index);

/// Flattens `root` (a map) into a state dict, depth first, map keys in
/// order. Errc::invalid_argument when the root is not a map.
Result<StateDict> flatten(const Nested& root);
/// Rebuilds the nested structure from flattened names. Errc::invalid_argument
/// for a malformed name, a name that is both a leaf and a container, a list
/// with missing indices, or a container that is both a map and a list.
Result<Nested> unflatten(const StateDict& sd);

}  // namespace meshstore
