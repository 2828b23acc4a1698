// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The table of layout transitions: `transition<From, To>`, one entry
/// per pair of layouts that one lowering connects, and `adjoint_t`, which finds
/// the backward of every entry *in the same table*: the backward of
/// `From -> To` is the transition `dual(To) -> dual(From)` (docs/concepts/transitions.md).
/// No entry has a hand-written backward.
///
/// Minimal complete definition of an entry: `exists = true`, `name`,
/// `communicates`, `plan(global_shape, from_mapping, to_mapping, strategy,
/// ranks, element_bytes) -> PlanStep` (the step it makes: resolved lowering,
/// bytes; plan_step.hpp) and `apply(x, to_mapping, strategy, ran) ->
/// Tensor<T, To, Dev>`, which runs the step its plan() made and returns it in
/// `ran`. `explain` lists the steps plan() makes; evaluation runs them.
/// Optional: `apply_in_place(x, to_mapping, strategy, ran)`, the same step
/// writing its result into x's own storage, which the result then holds: run
/// where x is a value nobody else holds and its caller gives up (an
/// expression's fresh result, a gradient the reverse pass drops next).
/// Laws: `adjoint_t<adjoint_t<F, T>>` is `transition<F, T>` again, and the
/// dot-product test `sum_r <T(x)_r, y_r> == sum_r <x_r, T*(y)_r>` holds
/// (test/dist/test_dot_product.cpp).

#include <concepts>
#include <string>
#include <type_traits>

#include "shardex/tensor/tensor.hpp"
#include "shardex/layout/layouts.hpp"
#include "shardex/layout/mapping.hpp"
#include "shardex/lower/strategy.hpp"

namespace shardex {

/// No lowering connects From and To (the entries are specializations in
/// transition/table.hpp).
template <LayoutTag From, LayoutTag To>
struct transition {
  /// False: no entry. Every entry of the table says true.
  static constexpr bool exists = false;
};

/// Whether the table has an entry From -> To.
template <class From, class To>
inline constexpr bool has_transition_v = transition<From, To>::exists;

/// The backward of `From -> To`: the entry `dual(To) -> dual(From)`.
template <LayoutTag From, LayoutTag To>
using adjoint_t = transition<dual_t<To>, dual_t<From>>;

/// A layout in which every rank holds the whole logical value (Replicated,
/// Invariant): what a gather or an all-reduce produces and a slice starts
/// from. ("Unsharded" is the wider I, R, P: every rank holds a tensor of the
/// global shape; a Partial one holds a part of the sum.)
template <class L>
concept WholeLayout = std::same_as<L, Replicated> || std::same_as<L, Invariant>;

}  // namespace shardex
