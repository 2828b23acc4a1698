// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `explain(expr)`: the plan evaluating `expr` will run on this rank,
/// without running it: each collective with its resolved strategy and the
/// bytes this rank hands the backend to send, the local steps, and the
/// simplifications. Nothing is computed twice: a chain's steps come from the
/// walk evaluation makes (walk_chain), and each step from its table entry's
/// plan(), which the entry's apply() runs.
///
/// @code
/// auto y = all_gather(reduce_scatter<Sharded<0>>(p, {1, 2, 3, 0}));  // p: Partial, float, 6 x 5
/// explain(y).str();
/// // all_reduce P(sum) -> R  [all_reduce, 120 B]
/// // simplified: reduce_scatter P(sum) -> S(0)[1,2,3,0] then all_gather S(0)[1,2,3,0] -> R => all_reduce P(sum) -> R
/// @endcode
///
/// Layouts are printed with the lengths the expression carries (run-time
/// lengths included), so a reshard says what it changes. The strategy of an
/// all_reduce is "all_reduce": it has one lowering, the backend's all-reduce.
/// A step that moves nothing (a reshard to the same lengths) is not in the
/// plan; when the simplification leaves no step at all, its line says
/// "nothing (identity)". A single transition that runs as written has no
/// simplification line.

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "shardex/expr/attention.hpp"
#include "shardex/expr/elementwise.hpp"
#include "shardex/expr/matmul.hpp"
#include "shardex/expr/plan.hpp"
#include "shardex/expr/redistribute.hpp"
#include "shardex/expr/reshape.hpp"
#include "shardex/expr/sum.hpp"
#include "shardex/expr/transpose.hpp"

namespace shardex {

namespace detail {

/// The user's steps of a chain, innermost first, with their lengths:
/// "reduce_scatter P(sum) -> S(1)[1,2,3,4]".
template <class E>
void chain_written(const E& e, std::vector<std::string>& out) {
  if constexpr (is_redistribute<E>::value) {
    chain_written(e.arg(), out);
    out.push_back(std::string(e.name()) + " " + layout_name(e.arg().mapping()) + " -> " + layout_name(e.mapping()));
  }
}

template <class E>
void explain_into(Plan& p, const E& e);

/// The operands of a fused element-wise tree that are not element-wise are
/// explained first; the op names of the tree are collected, innermost first.
template <class E>
void explain_fused(Plan& p, const E& e, std::string& names, std::vector<std::string>& operands) {
  if constexpr (requires {
                  e.op();
                  e.args();
                }) {
    std::apply([&](const auto&... a) { (explain_fused(p, a, names, operands), ...); }, e.args());
    names += (names.empty() ? "" : ", ") + std::string(std::remove_cvref_t<decltype(e.op())>::name);
  } else {
    explain_into(p, e);
    if constexpr (is_broadcast<E>::value)
      operands.push_back(layout_name(e.arg.mapping()) + " bias");
    else
      operands.push_back(layout_name(e.mapping()));
  }
}

/// A tensor as explain follows it through a chain: its layout, global shape
/// and mapping, without data.
template <class T, LayoutTag L>
struct Described {
  using value_type = T;
  using layout_type = L;
  Shape shape;
  layout_mapping<L> mapping;
};

/// Explain's steps of the walk of a chain (walk_chain, expr/redistribute.hpp,
/// which evaluation walks too): the source is explained and described, and
/// each step is the entry's own plan, with its adjoint's plan for backward.
/// A step that moves nothing is not run, so it is not listed.
struct Explainer {
  Plan& p;
  Ranks ranks;
  std::size_t first = 0;  ///< the chain's first step (after its source's)
  template <class R>
  auto source(const R& r) {
    const auto& src = chain_source(r);
    explain_into(p, src);
    first = p.steps.size();
    using X = std::remove_cvref_t<decltype(src)>;
    return Described<typename X::value_type, typename X::layout_type>{src.shape(), src.mapping()};
  }
  template <LayoutTag B, class T, LayoutTag A>
  Described<T, B> go(const Described<T, A>& x, const layout_mapping<B>& to, Strategy s) {
    PlanStep step = planned<transition<A, B>, T>(x.shape, x.mapping, to, s, ranks);
    if (step.moves) {
      step.from = layout_name(x.mapping);
      step.to = layout_name(to);
      p.steps.push_back(std::move(step));
      // Its backward is the adjoint entry of the same table, run in reverse order.
      const auto gm = dual_mapping<B>(to);
      const auto gx = dual_mapping<A>(x.mapping);
      PlanStep back = planned<adjoint_t<A, B>, T>(x.shape, gm, gx, s, ranks);
      back.from = layout_name(gm);
      back.to = layout_name(gx);
      p.backward.insert(p.backward.begin(), std::move(back));
    }
    return {x.shape, to};
  }
};

template <class E>
void explain_chain(Plan& p, const E& r) {
  Explainer walker{p, ranks_of(chain_source(r).comm())};
  walk_chain(r, walker);
  const std::size_t first = walker.first;
  // Say what the simplification did when the user's chain differs from the route.
  std::vector<std::string> wrote;
  chain_written(r, wrote);
  std::string ran, asked;
  for (std::size_t i = first; i < p.steps.size(); ++i)
    ran += (ran.empty() ? "" : " then ") + p.steps[i].op + " " + p.steps[i].from + " -> " + p.steps[i].to;
  for (const auto& w : wrote) asked += (asked.empty() ? "" : " then ") + w;
  // The user's steps ran as written (or the planner was asked to route and
  // found a step to run): nothing to say. A chain that runs nothing always
  // gets a line.
  const std::size_t ran_steps = p.steps.size() - first;
  const bool as_written =
      wrote.size() == 1 && ran_steps > 0 &&
      (r.name() == std::string_view("redistribute") || (ran_steps == 1 && p.steps.back().op == r.name()));
  if (!as_written && asked != ran)
    p.simplifications.push_back(asked + " => " + (ran.empty() ? std::string("nothing (identity)") : ran));
}

template <class E>
void explain_into(Plan& p, const E& e) {
  if constexpr (is_tensor_v<E>) {
  } else if constexpr (is_redistribute<E>::value) {
    explain_chain(p, e);
  } else if constexpr (is_broadcast<E>::value) {
    explain_into(p, e.arg);
  } else if constexpr (requires {
                         e.op();
                         e.args();
                       }) {
    // One step for the whole fused tree, its ops innermost first and its
    // operands in order: "fused mul, add (R, R) -> R".
    std::string names;
    std::vector<std::string> operands;
    explain_fused(p, e, names, operands);
    std::string from;
    for (const auto& o : operands) from += (from.empty() ? "" : ", ") + o;
    if (operands.size() > 1) from = "(" + from + ")";
    p.steps.push_back(PlanStep::local("fused " + names, from, layout_name(e.mapping())));
  } else if constexpr (requires {
                         e.operands();
                         e.explain_step();
                       }) {
    // A node of nn/: its operands, then its own step (it says if it communicates).
    std::apply([&p](const auto&... a) { (explain_into(p, a), ...); }, e.operands());
    p.steps.push_back(e.explain_step());
  } else if constexpr (requires {
                         e.q();
                         e.k();
                         e.v();
                       }) {
    explain_into(p, e.q());
    explain_into(p, e.k());
    explain_into(p, e.v());
    p.steps.push_back(
        PlanStep::local(E::node_name, layout_name<typename E::layout_type>(), layout_name<typename E::layout_type>()));
  } else if constexpr (requires {
                         e.lhs();
                         e.rhs();
                       }) {
    explain_into(p, e.lhs());
    explain_into(p, e.rhs());
    PlanStep step = PlanStep::local("matmul", layout_name(e.lhs().mapping()) + " x " + layout_name(e.rhs().mapping()),
                                    layout_name(e.mapping()));
    using Dev = typename E::device_type;
    if constexpr (requires(const GemmShape& g) { Dev::template gemm_kernel<typename E::value_type>(g); }) {
      // The kernel of this rank's product (a host GEMM: Eigen's, the BLAS's or shardex's, device/host/gemm_kernels.hpp).
      const int r = e.comm().rank();
      const Shape a = local_shape(e.lhs().shape(), e.lhs().mapping(), r),
                  b = local_shape(e.rhs().shape(), e.rhs().mapping(), r);
      if (a.rank() == 2 && b.rank() == 2)
        step.strategy = Dev::template gemm_kernel<typename E::value_type>(GemmShape::plain(a[0], a[1], b[1]));
    }
    p.steps.push_back(std::move(step));
  } else {
    explain_into(p, e.arg());
    p.steps.push_back(PlanStep::local(E::node_name, layout_name(e.arg().mapping()), layout_name(e.mapping())));
  }
}

}  // namespace detail

/// The plan `eval(e)` will run on this rank. Local: it communicates nothing.
template <TensorExpr E>
Plan explain(const E& e) {
  Plan p;
  detail::explain_into(p, e);
  return p;
}

}  // namespace shardex
