#pragma once

// Exact<T>: a float or double carried bit-exact between processes, and the
// compile-time check that refuses a bare one anywhere inside a message
// type (internal::refuse_bare_floats, refuse_floats_in_interface), which
// the mesh calls, spawn and the store's interfaces apply. Included by
// mesh_values.hpp; like it, this header exposes CAF on purpose.

#include <caf/all.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace meshstore {

/// A float or double that crosses processes bit-exact, as its bits. CAF
/// 0.17's serializer, which carries every message between processes,
/// alters bare floating-point values (-0.0 arrives as +0.0, a NaN as -1.0,
/// a denormal as another number) and never returns on +infinity, stalling
/// the sender for good. So the mesh calls, spawn and the interfaces of the
/// meshes spawned refuse at compile time a bare float or double anywhere
/// in a message type (found through the types' inspect); wrap the value
/// instead, in a message or as a member of your own message type:
///
///   using scale_actor = caf::typed_actor<
///       caf::replies_to<scale_atom, Exact<double>>::with<Exact<double>>>;
///   [](scale_atom, Exact<double> x) -> Exact<double> { return 2 * x.value; }
///   auto y = mesh.call_one<Exact<double>>(scale_atom::value, Exact<double>(0.5));
///
/// Every runtime registers Exact<float>, Exact<double> and vectors of them
/// ("meshstore::Exact<float>", ...).
template <class T>
struct Exact {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "meshstore::Exact holds a float or a double");
  Exact() = default;
  /// Wraps `v`.
  Exact(T v) : value(v) {}  // NOLINT: implicit on purpose, as T converts back
  /// The wrapped value.
  operator T() const { return value; }
  /// The value, carried bit for bit.
  T value{};
};

template <class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, Exact<T>& x) {
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  static_assert(sizeof(Bits) == sizeof(T));
  Bits bits = 0;
  std::memcpy(&bits, &x.value, sizeof bits);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    std::memcpy(&x.value, &bits, sizeof bits);
    return caf::none;
  });
  return f(
      caf::meta::type_name(sizeof(T) == 4 ? "meshstore::Exact<float>" : "meshstore::Exact<double>"),
      bits, load);
}

namespace internal {

template <class T>
struct BareFloat : std::is_floating_point<T> {};
template <class T, class A>
struct BareFloat<std::vector<T, A>> : std::is_floating_point<T> {};

template <class T>
inline constexpr bool always_false = false;

template <class T, template <class...> class Of>
struct Specializes : std::false_type {};
template <template <class...> class Of, class... Ts>
struct Specializes<Of<Ts...>, Of> : std::true_type {};

/// CAF's own handle and value types, which carry no user float: a walk
/// stops at them (their inspect is CAF's, written for its serializers).
template <class T>
constexpr bool caf_native() {
  return std::is_same_v<T, caf::actor> || std::is_same_v<T, caf::actor_addr> ||
         std::is_same_v<T, caf::strong_actor_ptr> || std::is_same_v<T, caf::weak_actor_ptr> ||
         std::is_same_v<T, caf::error> || std::is_same_v<T, caf::message> ||
         std::is_same_v<T, caf::node_id> || std::is_same_v<T, caf::group> ||
         std::is_same_v<T, caf::atom_value> || std::is_same_v<T, caf::unit_t> ||
         std::is_same_v<T, caf::none_t> || std::is_same_v<T, caf::uri> ||
         Specializes<T, caf::typed_actor>::value || std::is_base_of_v<caf::meta::annotation, T>;
}

template <class T, class = void>
struct IsRange : std::false_type {};
template <class T>
struct IsRange<T, std::void_t<typename T::value_type, decltype(std::declval<T&>().begin())>>
    : std::true_type {};

struct FloatFinder;

template <class T, class = void>
struct Inspectable : std::false_type {};
template <class T>
struct Inspectable<T,
                   std::void_t<decltype(inspect(std::declval<FloatFinder&>(), std::declval<T&>()))>>
    : std::true_type {};

/// An inspector that is never run, only instantiated: inspecting a message
/// type with it walks the types of its members, through its own inspect,
/// containers, pairs, tuples and optionals, and refuses a float or double
/// anywhere inside at compile time. Exact<T> members pass (they go as
/// bits).
struct FloatFinder {
  using result_type = void;
  static constexpr bool reads_state = true;
  static constexpr bool writes_state = false;

  template <class... Ts>
  void operator()(Ts&&... xs) {
    (visit(xs), ...);
  }

  template <class T>
  void visit(T& x) {
    using U = std::remove_cv_t<T>;
    if constexpr (std::is_floating_point_v<U>) {
      static_assert(always_false<U>,
                    "meshstore: a float or double inside a message type (a member your "
                    "inspect() names, or an element of one) is not carried bit-exact between "
                    "processes by CAF 0.17: make that member meshstore::Exact<float> or "
                    "meshstore::Exact<double>");
    } else if constexpr (std::is_arithmetic_v<U> || std::is_enum_v<U> || caf_native<U>() ||
                         Specializes<U, Exact>::value || std::is_same_v<U, std::string>) {
      // Carried intact.
    } else if constexpr (Specializes<U, std::chrono::duration>::value) {
      static_assert(!std::is_floating_point_v<typename U::rep>,
                    "meshstore: a duration counted in a float or double is not carried "
                    "bit-exact between processes by CAF 0.17: use an integer count");
    } else if constexpr (Specializes<U, std::pair>::value || Specializes<U, std::tuple>::value) {
      std::apply([this](auto&... e) { (visit(e), ...); }, const_cast<U&>(x));
    } else if constexpr (Specializes<U, caf::variant>::value) {
      visit_alternatives(static_cast<U*>(nullptr));
    } else if constexpr (Specializes<U, std::optional>::value ||
                         Specializes<U, caf::optional>::value) {
      visit_type(static_cast<typename U::value_type*>(nullptr));
    } else if constexpr (Inspectable<U>::value) {
      inspect(*this, const_cast<U&>(x));
    } else if constexpr (IsRange<U>::value) {
      visit_type(static_cast<typename U::value_type*>(nullptr));
    }
  }

  // The walk of V's members; `none` is never dereferenced at run time (the
  // finder is never run).
  template <class V>
  void visit_type(V* none) {
    visit(*none);
  }

  template <class... Ts>
  void visit_alternatives(caf::variant<Ts...>*) {
    (visit_type(static_cast<Ts*>(nullptr)), ...);
  }
};

/// Never called: taking its address instantiates the walk of T's members.
template <class T>
void find_floats(T* none) {
  FloatFinder finder;
  finder.visit(*none);
}

template <class T>
constexpr void refuse_float_inside() {
  if constexpr (!std::is_void_v<T>) static_cast<void>(&find_floats<T>);
}

/// Refuses, at compile time, a message or reply type that CAF 0.17 cannot
/// carry between processes intact (Exact's comment says why): a bare float
/// or double, a vector of them, or a type that holds one anywhere inside.
template <class... Ts>
constexpr void refuse_bare_floats() {
  static_assert(!(BareFloat<std::decay_t<Ts>>::value || ...),
                "meshstore: a bare float or double (or a vector of them) in an actor message "
                "is not carried bit-exact between processes by CAF 0.17 (-0.0, NaN and "
                "denormals change, +infinity stalls the sender): wrap it in "
                "meshstore::Exact<float> or meshstore::Exact<double>");
  if constexpr (!(BareFloat<std::decay_t<Ts>>::value || ...)) {
    (refuse_float_inside<std::decay_t<Ts>>(), ...);
  }
}

template <class... Is, class... Os>
constexpr void refuse_floats_in_signature(
    caf::typed_mpi<caf::detail::type_list<Is...>, caf::output_tuple<Os...>>*) {
  refuse_bare_floats<Is..., Os...>();
}

template <class... Sigs>
constexpr void refuse_floats_in_signatures(caf::detail::type_list<Sigs...>*) {
  (refuse_floats_in_signature(static_cast<Sigs*>(nullptr)), ...);
}

/// refuse_bare_floats for every message and reply type of the typed actor
/// interface `Handle` (nothing for an untyped caf::actor).
template <class Handle>
constexpr void refuse_floats_in_interface() {
  if constexpr (!std::is_same_v<Handle, caf::actor>) {
    refuse_floats_in_signatures(static_cast<typename Handle::signatures*>(nullptr));
  }
}

}  // namespace internal

}  // namespace meshstore
