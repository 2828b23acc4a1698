// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `per_axis<L_0, ..., L_{n-1}>`: the layout of a tensor on each axis
/// of a mesh, a compile-time sequence kept as a Boost.Hana value
/// (`per_axis<...>::types`), so that the type algebra below reads as
/// ordinary code on values: `at_c`, `transform` (dual), `zip_with` (the
/// per-axis rule of a local operation), `count_if` (checks).
///
/// **Meaning** (docs/guides/meshes.md). Axes apply in order: the layout on axis 0
/// says how the logical value X is spread over the groups of axis 0 (each
/// group the ranks sharing c_0), exactly as a layout spreads a value over
/// ranks; the layout on axis 1 then spreads each group's value over axis 1;
/// and so on. `Sharded<d>` on axis k cuts the value along d into that axis'
/// lengths, `Partial` makes it a sum over the axis, `Replicated`/`Invariant`
/// keep it whole. A gradient takes the dual layout on every axis.
///
/// Two axes may not shard the same tensor dim (a compile error): that would
/// make the pieces of one axis depend on the coordinate of another.

#include <boost/hana/at.hpp>
#include <boost/hana/count_if.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/insert.hpp>
#include <boost/hana/range.hpp>
#include <boost/hana/remove_at.hpp>
#include <boost/hana/transform.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>
#include <boost/hana/unpack.hpp>
#include <boost/hana/zip_with.hpp>
#include <cstddef>
#include <string>

#include "shardex/core/compile_errors.hpp"
#include "shardex/layout/layouts.hpp"
#include "shardex/layout/mapping.hpp"

namespace shardex {

namespace hana = boost::hana;

/// The layouts of a tensor on the axes of its mesh, in the mesh's order.
template <LayoutTag... Ls>
struct per_axis {
  /// The layouts, as a Boost.Hana tuple of types.
  static constexpr auto types = hana::tuple_t<Ls...>;
  /// The number of layouts (the mesh's axis count).
  static constexpr std::size_t count = sizeof...(Ls);
  /// The run-time lengths of each axis' layout (empty for I, R, P and static lengths).
  using mappings = hana::tuple<layout_mapping<Ls>...>;
};

namespace detail {
template <class T>
struct is_per_axis : std::false_type {};
template <class... Ls>
struct is_per_axis<per_axis<Ls...>> : std::true_type {};

// Function objects rather than lambdas: a lambda inside decltype in an alias
// template is a new type at every use (and trips g++ 12).
/// A sequence of hana types back into per_axis.
struct to_per_axis_fn {
  template <class... T>
  constexpr auto operator()(T...) const {
    return hana::type_c<per_axis<typename T::type...>>;
  }
};
inline constexpr to_per_axis_fn to_per_axis{};
/// The dual of one layout, as a hana type.
struct dual_fn {
  template <class T>
  constexpr auto operator()(T) const {
    return hana::type_c<dual_t<typename T::type>>;
  }
};
/// A rule of rules.hpp applied to one axis' layouts, as a hana type.
template <template <class...> class Rule>
struct rule_fn {
  template <class... T>
  constexpr auto operator()(T...) const {
    return hana::type_c<typename Rule<typename T::type...>::type>;
  }
};

template <class L>
constexpr int dim_of() {
  if constexpr (is_sharded_v<L>)
    return L::dim;
  else
    return -1;
}
}  // namespace detail

template <class T>
concept PerAxisLayouts = detail::is_per_axis<T>::value;

/// The layout on axis I.
template <PerAxisLayouts Ls, std::size_t I>
using layout_at_t = typename decltype(+hana::at_c<I>(Ls::types))::type;

/// Ls with the layout on axis I replaced by L.
template <PerAxisLayouts Ls, std::size_t I, LayoutTag L>
using replace_at_t = typename decltype(hana::unpack(
    hana::insert(hana::remove_at(Ls::types, hana::size_c<I>), hana::size_c<I>, hana::type_c<L>),
    detail::to_per_axis))::type;

/// The layouts of the gradient: dual on every axis.
template <PerAxisLayouts Ls>
using dual_layouts_t =
    typename decltype(hana::unpack(hana::transform(Ls::types, detail::dual_fn{}), detail::to_per_axis))::type;

/// The number of axes whose layout shards tensor dim D.
template <PerAxisLayouts Ls, int D>
inline constexpr std::size_t axes_sharding_dim = hana::count_if(Ls::types, [](auto t) {
  return hana::bool_c<detail::dim_of<typename decltype(t)::type>() == D>;
});

/// No tensor dim is sharded by two axes.
template <PerAxisLayouts Ls>
inline constexpr bool each_dim_sharded_once = hana::unpack(Ls::types, [](auto... t) {
  return ((detail::dim_of<typename decltype(t)::type>() < 0 ||
           axes_sharding_dim<Ls, detail::dim_of<typename decltype(t)::type>()> == 1) &&
          ...);
});

/// Some axis' layout is Partial.
template <PerAxisLayouts Ls>
inline constexpr bool partial_on_an_axis = hana::unpack(Ls::types, [](auto... t) {
  return (std::same_as<typename decltype(t)::type, Partial> || ...);
});

/// The per-axis layouts of a local operation's result: `Rule<A_k, B_k, ...>`
/// on each axis k, where `Rule` is one of rules.hpp's (`rules::matmul`, ...).
template <template <class...> class Rule, PerAxisLayouts... Operands>
using per_axis_rule_t = typename decltype(hana::unpack(hana::zip_with(detail::rule_fn<Rule>{}, Operands::types...),
                                                       detail::to_per_axis))::type;

/// "dp: S(0)[1,3], tp: R": the layouts with their lengths, axis by axis.
template <PerAxisLayouts Ls, class Names>
std::string per_axis_name(const typename Ls::mappings& ms, const Names& names) {
  std::string s;
  hana::for_each(hana::make_range(hana::size_c<0>, hana::size_c<Ls::count>), [&](auto k) {
    constexpr std::size_t i = decltype(k)::value;
    s += (i ? ", " : "") + std::string(names[i]) + ": " + layout_name(hana::at_c<i>(ms));
  });
  return s;
}

}  // namespace shardex
