// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `Redistribute<E, To>`: a lazy layout transition, and the planner
/// that lowers chains of them.
///
/// `all_gather(x)`, `reduce_scatter<To>(x)`, `all_reduce(x)`, `all_to_all<To>(x)`,
/// `slice<To>(x)`, `replicate(x)` and `redistribute<To>(x)` all build this node;
/// nothing communicates until it is evaluated. Then:
///
/// 1. **Simplification.** A chain of transitions `x -> L1 -> ... -> To` is
///    replaced by the route from x's layout to `To` alone. This is exact:
///    every transition leaves the logical value unchanged (it only moves
///    pieces), and the pairing of a layout with its dual is the inner product
///    of logical values, so adjoints compose the same way. Thus slice after
///    gather of the same sharding is the identity, reduce_scatter then
///    all_gather is one all_reduce, all_reduce then slice is one
///    reduce_scatter, and identity transitions vanish. `explain` says so.
/// 2. **Routing** (compile time, over the table of transition/table.hpp): the
///    direct entry `From -> To` if there is one, else a two-step route through
///    an unsharded layout (R, P or I), else a compile error naming both layouts.
/// 3. **Lowering** of each step by its entry, recording its backward: the
///    adjoint entry of the same table. The backward of a simplified chain is
///    therefore simplified too.

#include <string>
#include <type_traits>
#include <vector>

#include "shardex/core/compile_errors.hpp"
#include "shardex/expr/expression.hpp"
#include "shardex/expr/plan.hpp"
#include "shardex/transition/table.hpp"

namespace shardex {

/// @brief The node of a layout transition of E's value to layout To
/// (all_gather(), reduce_scatter(), ... build it; see the file's note).
template <TensorExpr E, LayoutTag To>
class Redistribute {
public:
  ///@{
  /// The TensorExpr interface (x's element type, device, shape and
  /// communicator; layout To with the target mapping), the layout it comes
  /// from, the operand and the strategy asked for.
  using value_type = typename E::value_type;
  static_assert(Scalar<value_type>, SHARDEX_ERR_TOKEN_IDS_FLOAT_ONLY);
  using device_type = typename E::device_type;
  using layout_type = To;
  using source_layout = typename E::layout_type;

  /// The transition of `arg` to To with mapping `to` and strategy `s`; `name`
  /// is the operation the user wrote.
  Redistribute(E arg, layout_mapping<To> to, Strategy s, const char* name)
      : arg_(std::move(arg)), to_(std::move(to)), strategy_(s), name_(name) {}

  [[nodiscard]] Shape shape() const { return arg_.shape(); }
  [[nodiscard]] decltype(auto) comm() const { return arg_.comm(); }
  [[nodiscard]] const layout_mapping<To>& mapping() const noexcept { return to_; }
  [[nodiscard]] const E& arg() const noexcept { return arg_; }
  [[nodiscard]] Strategy strategy() const noexcept { return strategy_; }
  ///@}
  /// The operation the user wrote ("all_gather", "redistribute", ...).
  [[nodiscard]] const char* name() const noexcept { return name_; }

private:
  E arg_;
  layout_mapping<To> to_;
  Strategy strategy_;
  const char* name_;
};

namespace detail {

template <class E>
struct is_redistribute : std::false_type {};
template <class E, class To>
struct is_redistribute<Redistribute<E, To>> : std::true_type {};

/// The first operand below a chain of transitions.
template <class E>
const auto& chain_source(const E& e) {
  if constexpr (is_redistribute<E>::value) {
    if constexpr (is_redistribute<std::remove_cvref_t<decltype(e.arg())>>::value)
      return chain_source(e.arg());
    else
      return e.arg();
  } else {
    return e;
  }
}

/// The sharded mappings *inside* a chain (the ones a simplification removes;
/// the target's own is checked by its table entry) are checked too: a chain
/// with bad lengths is an error, not silently skipped. Returns the first
/// problem, or an empty string; the caller agrees on it across ranks.
template <class E>
std::string check_inner(const E& e, const Shape& global, int size, int rank, bool outermost = true) {
  if constexpr (is_redistribute<E>::value) {
    std::string err = check_inner(e.arg(), global, size, rank, false);
    if constexpr (is_sharded_v<typename E::layout_type>) {
      if (err.empty() && !outermost) {
        try {
          check_mapping<typename E::layout_type>(e.mapping(), global, size, rank,
                                                 (std::string("shardex::") + e.name()).c_str());
        } catch (const invalid_argument& x) {
          err = x.what();
        }
      }
    }
    return err;
  } else {
    return {};
  }
}

/// The number of transitions in a chain.
template <class E>
struct chain_length : std::integral_constant<int, 0> {};
template <class E, class To>
struct chain_length<Redistribute<E, To>> : std::integral_constant<int, 1 + chain_length<E>::value> {};

/// The route From -> To through the table: `direct`, or `via` an unsharded layout.
template <LayoutTag From, LayoutTag To>
struct route {
  // The same unsharded layout, or the same static lengths: nothing to do, known
  // at compile time. (The same dim with run-time lengths is the reshard entry,
  // which compares the lengths, agreed on by every rank, and moves nothing if
  // they are equal.)
  static constexpr bool vanishes = std::same_as<From, To> && (!is_sharded_v<From> || [] {
                                     if constexpr (is_sharded_v<From>)
                                       return From::has_static_lengths;
                                     else
                                       return false;
                                   }());
  static constexpr bool direct = has_transition_v<From, To>;
  template <class M>
  static constexpr bool through = has_transition_v<From, M>&& has_transition_v<M, To>;
  using via = std::conditional_t<
      through<Replicated>, Replicated,
      std::conditional_t<through<Partial>, Partial, std::conditional_t<through<Invariant>, Invariant, void>>>;
  static constexpr bool exists = vanishes || direct || !std::is_void_v<via>;
};

}  // namespace detail

namespace detail {
/// A strategy named at compile time is checked against the backend of x's device.
template <class X, class S>
constexpr void check_strategy(S) {
  if constexpr (is_strategy_constant<S>::value)
    static_assert(S::value != Strategy::v_collective || X::device_type::communicator::has_v_collectives,
                  SHARDEX_ERR_STRATEGY_NEEDS_V_COLLECTIVES);
}
}  // namespace detail

/// Any layout to any other. `to` carries run-time lengths for a target with
/// dynamic lengths; `s` picks the lowering of the collective it runs.
template <LayoutTag To, TensorExpr E, StrategyLike S = Strategy>
auto redistribute(const E& x, layout_mapping<To> to = lengths_from_type<To>(), S s = Strategy::automatic) {
  detail::check_strategy<E>(s);
  return Redistribute<E, To>(x, std::move(to), s, "redistribute");
}

namespace detail {

/// The steps of the route From -> To, from `x` (a tensor, or a description of
/// one), each through `step.template go<B>(x, mapping, strategy)`: none if
/// the route vanishes, the direct entry, or two entries via an unsharded layout.
template <LayoutTag To, class X, class Step>
auto walk_route(X x, const layout_mapping<To>& to, Strategy s, Step& step) {
  using R = route<typename X::layout_type, To>;
  if constexpr (R::vanishes) {
    return x;
  } else if constexpr (R::direct) {
    return step.template go<To>(std::move(x), to, s);
  } else {
    using M = typename R::via;
    return step.template go<To>(step.template go<M>(std::move(x), layout_mapping<M>{}, s), to, s);
  }
}

/// The steps evaluating `r` makes, in order, through `step`: the chain's
/// source (`step.source(r)`), then the route from it to r's layout; where
/// there is none (zero_pad(slice<S>(x)) of a Replicated x: R -> S -> P, and no
/// R -> P), the steps of the chain below r's last step, then that step's
/// route. The one walk of a chain: evaluation (`Runner`) runs it, `explain`
/// (expr/explain.hpp) records it.
template <class E, LayoutTag To, class Step>
auto walk_chain(const Redistribute<E, To>& r, Step& step) {
  using From = typename std::remove_cvref_t<decltype(chain_source(r))>::layout_type;
  static_assert(route<From, To>::exists || is_redistribute<E>::value, SHARDEX_ERR_REDISTRIBUTE_NO_ROUTE);
  if constexpr (!route<From, To>::exists) {
    return walk_route<To>(walk_chain(r.arg(), step), r.mapping(), r.strategy(), step);
  } else {
    return walk_route<To>(step.source(r), r.mapping(), r.strategy(), step);
  }
}

/// Evaluation's steps: the source is evaluated (and the lengths inside a
/// chain, which the simplification removes, are agreed on), each step is the
/// table entry run by apply_transition.
struct Runner {
  template <class R>
  auto source(const R& r) {
    auto x = eval(chain_source(r));
    if constexpr (chain_length<R>::value > 1) {
      Signature sig;
      sig.add("shardex::redistribute chain");
      agree(x.comm(), check_inner(r, x.shape(), x.world_size(), x.rank()), sig, "shardex::redistribute");
    }
    return x;
  }
  template <LayoutTag B, class X>
  auto go(X&& x, const layout_mapping<B>& to, Strategy s) {
    return apply_transition<B>(std::forward<X>(x), to, s);  // (an rvalue: the walk's own intermediate)
  }
};

}  // namespace detail

/// Runs the chain of transitions ending here, simplified, each step by its
/// table entry (and records their adjoints).
template <TensorExpr E, LayoutTag To>
auto evaluate(const Redistribute<E, To>& r) {
  detail::Runner run;
  return detail::walk_chain(r, run);
}

// ---- the user's spellings ------------------------------------------------------
/// The layout of an expression.
template <class X>
using layout_of = typename X::layout_type;

/// Sharded -> Replicated (default) or Invariant: every rank gets the whole tensor.
template <LayoutTag To = Replicated, TensorExpr X, StrategyLike S = Strategy>
auto all_gather(const X& x, S s = Strategy::automatic) {
  detail::check_strategy<X>(s);
  static_assert(is_sharded_v<layout_of<X>>, SHARDEX_ERR_ALL_GATHER_SOURCE);
  static_assert(WholeLayout<To>, SHARDEX_ERR_ALL_GATHER_TARGET);
  return Redistribute<X, To>(x, {}, s, "all_gather");
}

/// Partial -> Sharded<D, ...>: rank r gets its slice of the sum.
/// The target's lengths: none for static ones, `{3, 0, 5, 2}` or a vector for dynamic ones.
template <ShardedLayout To, TensorExpr X, StrategyLike S = Strategy>
auto reduce_scatter(const X& x, layout_mapping<To> to = lengths_from_type<To>(), S s = Strategy::automatic) {
  detail::check_strategy<X>(s);
  static_assert(std::same_as<layout_of<X>, Partial>, SHARDEX_ERR_REDUCE_SCATTER_SOURCE);
  return Redistribute<X, To>(x, std::move(to), s, "reduce_scatter");
}
/// The same with static lengths and a strategy.
template <ShardedLayout To, TensorExpr X, StrategyLike S>
auto reduce_scatter(const X& x, S s) {
  return reduce_scatter<To>(x, lengths_from_type<To>(), s);
}

/// Partial -> Replicated (default) or Invariant: every rank gets the sum.
template <LayoutTag To = Replicated, TensorExpr X>
auto all_reduce(const X& x) {
  static_assert(std::same_as<layout_of<X>, Partial>, SHARDEX_ERR_ALL_REDUCE_SOURCE);
  static_assert(WholeLayout<To>, SHARDEX_ERR_ALL_REDUCE_TARGET);
  return Redistribute<X, To>(x, {}, Strategy::automatic, "all_reduce");
}

/// Replicated or Invariant -> Sharded<D, ...>: each rank keeps its slice; no communication.
/// The target's lengths: none for static ones, `{3, 0, 5, 2}` or a vector for dynamic ones.
template <ShardedLayout To, TensorExpr X>
auto slice(const X& x, layout_mapping<To> to = lengths_from_type<To>()) {
  static_assert(WholeLayout<layout_of<X>>, SHARDEX_ERR_SLICE_SOURCE);
  return Redistribute<X, To>(x, std::move(to), Strategy::automatic, "slice");
}
/// The reference module's name for slice.
template <ShardedLayout To, TensorExpr X>
auto dynamic_slice(const X& x, layout_mapping<To> to = lengths_from_type<To>()) {
  return slice<To>(x, std::move(to));
}

/// `Sharded<C>` -> `Sharded<S>`, C != S: the uneven all-to-all (docs/concepts/transitions.md).
/// The target's lengths: none for static ones, `{3, 0, 5, 2}` or a vector for dynamic ones.
template <ShardedLayout To, TensorExpr X, StrategyLike S = Strategy>
auto all_to_all(const X& x, layout_mapping<To> to = lengths_from_type<To>(), S s = Strategy::automatic) {
  detail::check_strategy<X>(s);
  static_assert(is_sharded_v<layout_of<X>>, SHARDEX_ERR_ALL_TO_ALL_SOURCE);
  return Redistribute<X, To>(x, std::move(to), s, "all_to_all");
}
/// The same with static lengths and a strategy.
template <ShardedLayout To, TensorExpr X, StrategyLike S>
auto all_to_all(const X& x, S s) {
  return all_to_all<To>(x, lengths_from_type<To>(), s);
}

/// Invariant -> Replicated (Megatron's f): nothing moves forward; the backward all-reduces.
template <TensorExpr X>
auto replicate(const X& x) {
  static_assert(std::same_as<layout_of<X>, Invariant>, SHARDEX_ERR_REPLICATE_SOURCE);
  return Redistribute<X, Replicated>(x, {}, Strategy::automatic, "replicate");
}

/// Sharded -> Partial: the slice in place, zeros elsewhere (the adjoint of slice).
template <TensorExpr X>
auto zero_pad(const X& x) {
  static_assert(is_sharded_v<layout_of<X>>, SHARDEX_ERR_ZERO_PAD_SOURCE);
  return Redistribute<X, Partial>(x, {}, Strategy::automatic, "zero_pad");
}

}  // namespace shardex
