// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The four layout kinds and `dual`, the layout a gradient takes.
///
/// A layout says how the *logical* value of a tensor is spread over the ranks:
///
/// | notation    | layout                | rank r holds                              | logical value            |
/// |-------------|-----------------------|-------------------------------------------|--------------------------|
/// | `I`         | `Invariant`           | the whole tensor, one shared value        | that value               |
/// | `R`         | `Replicated`          | the whole tensor, a copy used on its own  | any rank's copy          |
/// | `P(sum)`    | `Partial`             | a whole-shape tensor                      | the sum over ranks       |
/// | `S(d)[...]` | `Sharded<d, Lengths>` | slice [off_r, off_r + len_r) along dim d  | concatenation along d    |
///
/// Layouts are empty tag types carrying static facts only; run-time facts (the
/// lengths of a `Sharded<d>` with `dynamic_lengths`) live in `layout_mapping`.
///
/// **Concept `LayoutTag`.** Minimal complete definition: `kind`.
/// Laws: `dual_t<dual_t<L>> == L`. Models: the four layouts below.

#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>

#include "shardex/core/compile_errors.hpp"
#include "shardex/layout/lengths.hpp"

namespace shardex {

/// Which of the four layouts a tag is: the value of its `kind`.
enum class LayoutKind { invariant, replicated, partial, sharded };

/// One value shared by all ranks (a parameter, a model input). Its gradient is
/// shared too: `dual_t<Invariant> = Invariant`.
struct Invariant {
  ///@{
  /// The `LayoutTag` queries, usable in constant expressions: `kind`; whether
  /// each rank holds the whole shape (`is_always_whole`); whether the logical
  /// value is a pending sum over ranks (`needs_reduction`).
  static constexpr LayoutKind kind = LayoutKind::invariant;
  static constexpr bool is_always_whole() noexcept { return true; }
  static constexpr bool needs_reduction() noexcept { return false; }
  ///@}
};

/// An equal copy on every rank, each used on its own. The gradients of n copies
/// used separately are n contributions: `dual_t<Replicated> = Partial`.
struct Replicated {
  ///@{
  /// The `LayoutTag` queries (see Invariant): whole on every rank, no pending sum.
  static constexpr LayoutKind kind = LayoutKind::replicated;
  static constexpr bool is_always_whole() noexcept { return true; }
  static constexpr bool needs_reduction() noexcept { return false; }
  ///@}
};

/// A pending sum: the logical value is the sum over ranks of the local tensors.
/// `dual_t<Partial> = Replicated`.
struct Partial {
  ///@{
  /// The `LayoutTag` queries (see Invariant): whole-shape on every rank, and a
  /// pending sum (`needs_reduction()` is true).
  static constexpr LayoutKind kind = LayoutKind::partial;
  static constexpr bool is_always_whole() noexcept { return true; }
  static constexpr bool needs_reduction() noexcept { return true; }
  ///@}
};

/// Sharded along dim `D`; rank r holds [off_r, off_r + len_r). `Lengths` is
/// `lengths<...>` (static) or `dynamic_lengths` (the default; given at run time).
/// `dual_t<Sharded<D, L>> = Sharded<D, L>`.
template <int D, LengthsSpec Lengths = dynamic_lengths>
struct Sharded {
  static_assert(D >= 0, SHARDEX_ERR_SHARDED_NEGATIVE_DIM);
  ///@{
  /// The `LayoutTag` queries (see Invariant): a slice on each rank, no pending
  /// sum; `dim` is D, `lengths_type` is Lengths and
  /// `has_static_lengths` tells whether Lengths is `lengths<...>`.
  static constexpr LayoutKind kind = LayoutKind::sharded;
  static constexpr int dim = D;
  using lengths_type = Lengths;
  static constexpr bool has_static_lengths = is_static_lengths_v<Lengths>;
  static constexpr bool is_always_whole() noexcept { return false; }
  static constexpr bool needs_reduction() noexcept { return false; }
  ///@}
};

namespace detail {
template <class L>
struct is_sharded : std::false_type {};
template <int D, class Ls>
struct is_sharded<Sharded<D, Ls>> : std::true_type {};
}  // namespace detail

/// True for `Sharded<D, Lengths>`, whatever D and Lengths.
template <class L>
inline constexpr bool is_sharded_v = detail::is_sharded<L>::value;

/// The four layouts: Invariant, Replicated, Partial and any Sharded<D, Lengths>.
template <class L>
concept LayoutTag =
    std::same_as<L, Invariant> || std::same_as<L, Replicated> || std::same_as<L, Partial> || is_sharded_v<L>;

/// A `Sharded<D, Lengths>` layout.
template <class L>
concept ShardedLayout = is_sharded_v<L>;

/// The layout of the gradient of a tensor of layout L: R and P swap, I and
/// S(d) stay (docs/concepts/layouts.md).
template <LayoutTag L>
struct dual {
  /// Invariant and Sharded are their own duals.
  using type = L;
};
/// The gradient of a Replicated value is Partial: one contribution per copy.
template <>
struct dual<Replicated> {
  /// Partial.
  using type = Partial;
};
/// The gradient of a Partial value is Replicated: each part's gradient is the
/// gradient of the sum.
template <>
struct dual<Partial> {
  /// Replicated.
  using type = Replicated;
};
/// `dual<L>::type`: the layout of the gradient of a tensor of layout L.
template <LayoutTag L>
using dual_t = typename dual<L>::type;

/// The notation of the docs and of every message: "I", "R", "P(sum)",
/// "S(1)[1,2,3,4]" or "S(1)[dyn]" (docs/concepts/layouts.md).
template <LayoutTag L>
std::string layout_name() {
  if constexpr (std::same_as<L, Invariant>)
    return "I";
  else if constexpr (std::same_as<L, Replicated>)
    return "R";
  else if constexpr (std::same_as<L, Partial>)
    return "P(sum)";
  else if constexpr (L::has_static_lengths)
    return "S(" + std::to_string(L::dim) + ")" + to_string(L::lengths_type::values);
  else
    return "S(" + std::to_string(L::dim) + ")[dyn]";
}

}  // namespace shardex
