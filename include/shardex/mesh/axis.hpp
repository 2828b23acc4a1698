// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `axis<"tp">`: the name of a mesh axis, as a type. A transition
/// along an axis names it as a template argument (`all_gather<tp>(x)`), so
/// a transition along an axis the mesh lacks is a compile error, and
/// `explain` prints the name.
///
/// @code
/// using dp = shardex::axis<"dp">;
/// using tp = shardex::axis<"tp">;
/// shardex::Mesh<dp, tp> mesh(world, {2, 3});   // 6 ranks: 2 data-parallel groups of 3
/// @endcode

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <string_view>

#include "shardex/core/compile_errors.hpp"

namespace shardex {

/// A string usable as a template argument (a structural type).
template <std::size_t N>
struct fixed_name {
  /// The characters, with the terminating NUL.
  char text[N]{};
  /// From a string literal: `axis<"tp">`.
  constexpr fixed_name(const char (&s)[N]) { std::copy_n(s, N, text); }  // NOLINT(google-explicit-constructor)
  /// The name, without the NUL.
  [[nodiscard]] constexpr std::string_view view() const { return {text, N - 1}; }
};

/// The axis named `Name` of a mesh, of `Size` ranks if that is known at
/// compile time (0: given when the mesh is made). As `std::extents` mixes
/// static and dynamic extents: static lengths on an axis of static size must
/// have one entry per rank (a compile error otherwise).
template <fixed_name Name, int Size = 0>
struct axis {
  static_assert(Size >= 0, SHARDEX_ERR_MESH_AXIS_SIZE);
  /// The axis' name, as messages and explain() print it.
  static constexpr std::string_view name = Name.view();
  /// Size, 0 if the mesh gives it at run time.
  static constexpr int size = Size;
};

namespace detail {
template <class T>
struct is_axis : std::false_type {};
template <fixed_name N, int S>
struct is_axis<axis<N, S>> : std::true_type {};
}  // namespace detail

/// Models: `axis<"...">`.
template <class A>
concept MeshAxis = detail::is_axis<A>::value;

}  // namespace shardex
