// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The eager spelling: the reference module's operations as functions
/// that run at once, each exactly one entry of the transition table (no
/// planner, no simplification), returning a `Tensor`. The DSL's lazy spelling
/// (expr/redistribute.hpp) plans chains of the same entries; both are tested.
///
/// | call                                        | layouts                  |
/// |---------------------------------------------|--------------------------|
/// | `eager::all_gather(x)`, `<Invariant>`       | S(d) -> R, S(d) -> I     |
/// | `eager::reduce_scatter<S(d)>(x[, lengths])` | P -> S(d)                |
/// | `eager::all_reduce(x)`, `<Invariant>`       | P -> R, P -> I           |
/// | `eager::dynamic_slice<S(d)>(x[, lengths])`  | R -> S(d), I -> S(d)     |
/// | `eager::all_to_all<S(s)>(x[, lengths])`     | S(c) -> S(s)             |
/// | `eager::replicate(x)`                       | I -> R (Megatron's f)    |
/// | `eager::zero_pad(x)`                        | S(d) -> P                |
/// | `eager::sum(x)`, `eager::scale(x, c)`       | local                    |
///
/// The `*_by_group_call` operations of the reference are `Strategy::per_root`.

#include <cstdint>
#include <vector>

#include "shardex/expr/redistribute.hpp"
#include "shardex/expr/elementwise.hpp"
#include "shardex/expr/sum.hpp"

namespace shardex::eager {

/// `S(d)` -> R (or I), now: every rank gets the whole tensor.
template <LayoutTag To = Replicated, Scalar T, LayoutTag L, class Dev>
Tensor<T, To, Dev> all_gather(const Tensor<T, L, Dev>& x, Strategy s = Strategy::automatic) {
  return eval(shardex::all_gather<To>(x, s));
}

/// P -> `S(d)`, now: rank r gets its slice of the sum; `to` gives dynamic lengths.
template <ShardedLayout To, Scalar T, class Dev>
Tensor<T, To, Dev> reduce_scatter(const Tensor<T, Partial, Dev>& x, layout_mapping<To> to = lengths_from_type<To>(),
                                  Strategy s = Strategy::automatic) {
  return eval(shardex::reduce_scatter<To>(x, std::move(to), s));
}
/// The same with static lengths and a strategy.
template <ShardedLayout To, Scalar T, class Dev>
Tensor<T, To, Dev> reduce_scatter(const Tensor<T, Partial, Dev>& x, Strategy s) {
  return eval(shardex::reduce_scatter<To>(x, lengths_from_type<To>(), s));
}

/// P -> R (or I), now: every rank gets the sum.
template <LayoutTag To = Replicated, Scalar T, LayoutTag L, class Dev>
Tensor<T, To, Dev> all_reduce(const Tensor<T, L, Dev>& x) {
  return eval(shardex::all_reduce<To>(x));
}

/// R or I -> `S(d)`, now: each rank keeps its slice; no communication.
template <ShardedLayout To, Scalar T, LayoutTag L, class Dev>
Tensor<T, To, Dev> dynamic_slice(const Tensor<T, L, Dev>& x, layout_mapping<To> to = lengths_from_type<To>()) {
  return eval(shardex::slice<To>(x, std::move(to)));
}

/// `S(c)` -> `S(s)`, now: the pieces change owners; `to` gives dynamic lengths.
template <ShardedLayout To, Scalar T, LayoutTag L, class Dev>
Tensor<T, To, Dev> all_to_all(const Tensor<T, L, Dev>& x, layout_mapping<To> to = lengths_from_type<To>(),
                              Strategy s = Strategy::automatic) {
  return eval(shardex::all_to_all<To>(x, std::move(to), s));
}
/// The same with static lengths and a strategy.
template <ShardedLayout To, Scalar T, LayoutTag L, class Dev>
Tensor<T, To, Dev> all_to_all(const Tensor<T, L, Dev>& x, Strategy s) {
  return eval(shardex::all_to_all<To>(x, lengths_from_type<To>(), s));
}

/// I -> R, now (Megatron's f): nothing moves; the backward all-reduces.
template <Scalar T, class Dev>
Tensor<T, Replicated, Dev> replicate(const Tensor<T, Invariant, Dev>& x) {
  return eval(shardex::replicate(x));
}

/// `S(d)` -> P, now: the slice in place, zeros elsewhere.
template <Scalar T, LayoutTag L, class Dev>
Tensor<T, Partial, Dev> zero_pad(const Tensor<T, L, Dev>& x) {
  return eval(shardex::zero_pad(x));
}

/// The sum of all elements, now (`sum_layout_t` gives its layout).
template <TensorExpr E>
eval_t<Sum<E, -1>> sum(const E& x) {
  return eval(shardex::sum(x));
}

/// x * alpha, now.
template <TensorExpr E>
eval_t<E> scale(const E& x, double alpha) {
  return eval(shardex::scale(x, alpha));
}

}  // namespace shardex::eager
