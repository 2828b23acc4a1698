#pragma once
/// @file
/// @brief The reference module's operations under their own names, on
/// `Tensor`s of any device, forward and (for differentiable tensors) backward.
/// Each is one entry of the transition table (transition/table.hpp); its
/// backward is the entry of the dual transition.
///
/// | call                                  | layouts                  |
/// |---------------------------------------|--------------------------|
/// | `all_gather(x)`, `all_gather<I>(x)`   | S(d) -> R, S(d) -> I     |
/// | `reduce_scatter<S(d)>(x[, lengths])`  | P -> S(d)                |
/// | `all_reduce(x)`, `all_reduce<I>(x)`   | P -> R, P -> I           |
/// | `dynamic_slice<S(d)>(x[, lengths])`   | R -> S(d), I -> S(d)     |
/// | `all_to_all<S(s)>(x[, lengths])`      | S(c) -> S(s)             |
/// | `replicate(x)`                        | I -> R (Megatron's f)    |
/// | `zero_pad(x)`                         | S(d) -> P                |
///
/// The `*_by_group_call` operations of the reference are `Strategy::per_root`.

#include <cstdint>
#include <vector>

#include "shardex/transition/table.hpp"

namespace shardex {

template <class X>
using layout_of = typename X::layout_type;

/// Sharded -> Replicated (default) or Invariant: every rank gets the whole tensor.
template <LayoutTag To = Replicated, class X>
auto all_gather(const X& x, Strategy s = Strategy::automatic) {
  static_assert(is_sharded_v<layout_of<X>>,
                "shardex::all_gather(x) requires x to be Sharded<D, ...>: a Replicated or Invariant tensor is already "
                "whole, and a Partial one needs all_reduce(x)");
  static_assert(WholeLayout<To>, "shardex::all_gather<To>(x) gathers into Replicated (the default) or Invariant");
  return transit<To>(x, {}, s);
}

/// Partial -> Sharded<D, lengths<...>>: rank r gets its slice of the sum.
template <ShardedLayout To, class X>
  requires To::has_static_lengths
auto reduce_scatter(const X& x, Strategy s = Strategy::automatic) {
  static_assert(std::same_as<layout_of<X>, Partial>,
                "shardex::reduce_scatter<Sharded<D, ...>>(x) requires x to be Partial; to shard a Replicated tensor "
                "use dynamic_slice, to reshard a Sharded one use all_to_all");
  return transit<To>(x, {}, s);
}

/// Partial -> Sharded<D> with run-time lengths.
template <ShardedLayout To, class X>
  requires(!To::has_static_lengths)
auto reduce_scatter(const X& x, std::vector<std::int64_t> lengths, Strategy s = Strategy::automatic) {
  static_assert(std::same_as<layout_of<X>, Partial>,
                "shardex::reduce_scatter<Sharded<D, ...>>(x) requires x to be Partial; to shard a Replicated tensor "
                "use dynamic_slice, to reshard a Sharded one use all_to_all");
  return transit<To>(x, layout_mapping<To>(std::move(lengths)), s);
}

/// Partial -> Replicated (default) or Invariant: every rank gets the sum.
template <LayoutTag To = Replicated, class X>
auto all_reduce(const X& x) {
  static_assert(std::same_as<layout_of<X>, Partial>,
                "shardex::all_reduce(x) requires x to be Partial: only a pending sum has something to reduce");
  static_assert(WholeLayout<To>, "shardex::all_reduce<To>(x) reduces into Replicated (the default) or Invariant");
  return transit<To>(x);
}

/// Replicated or Invariant -> Sharded<D, lengths<...>>: each rank keeps its slice, no communication.
template <ShardedLayout To, class X>
  requires To::has_static_lengths
auto dynamic_slice(const X& x) {
  static_assert(WholeLayout<layout_of<X>>,
                "shardex::dynamic_slice<Sharded<D, ...>>(x) requires x to be Replicated or Invariant; a Partial tensor "
                "needs reduce_scatter, a Sharded one all_to_all");
  return transit<To>(x);
}

/// Replicated or Invariant -> Sharded<D> with run-time lengths.
template <ShardedLayout To, class X>
  requires(!To::has_static_lengths)
auto dynamic_slice(const X& x, std::vector<std::int64_t> lengths) {
  static_assert(WholeLayout<layout_of<X>>,
                "shardex::dynamic_slice<Sharded<D, ...>>(x) requires x to be Replicated or Invariant; a Partial tensor "
                "needs reduce_scatter, a Sharded one all_to_all");
  return transit<To>(x, layout_mapping<To>(std::move(lengths)));
}

/// Sharded<C> -> Sharded<S> (C != S): the uneven all-to-all of DESIGN.md section 2.
template <ShardedLayout To, class X>
  requires To::has_static_lengths
auto all_to_all(const X& x, Strategy s = Strategy::automatic) {
  static_assert(is_sharded_v<layout_of<X>>, "shardex::all_to_all<Sharded<S, ...>>(x) requires x to be Sharded<C, ...>");
  return transit<To>(x, {}, s);
}

template <ShardedLayout To, class X>
  requires(!To::has_static_lengths)
auto all_to_all(const X& x, std::vector<std::int64_t> lengths, Strategy s = Strategy::automatic) {
  static_assert(is_sharded_v<layout_of<X>>, "shardex::all_to_all<Sharded<S, ...>>(x) requires x to be Sharded<C, ...>");
  return transit<To>(x, layout_mapping<To>(std::move(lengths)), s);
}

/// Invariant -> Replicated: nothing moves forward; the backward all-reduces.
template <class X>
auto replicate(const X& x) {
  static_assert(std::same_as<layout_of<X>, Invariant>,
                "shardex::replicate(x) requires x to be Invariant (one shared value, such as a parameter)");
  return transit<Replicated>(x);
}

/// Sharded -> Partial: the slice in place, zeros elsewhere (the adjoint of dynamic_slice).
template <class X>
auto zero_pad(const X& x) {
  static_assert(is_sharded_v<layout_of<X>>, "shardex::zero_pad(x) requires x to be Sharded<D, ...>");
  return transit<Partial>(x);
}

}  // namespace shardex
