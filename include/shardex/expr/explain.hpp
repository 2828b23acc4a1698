#pragma once
/// @file
/// @brief `explain(expr)`: the plan evaluating `expr` will run on this rank,
/// without running it: each collective with its resolved strategy and the
/// bytes this rank puts into it, the local steps, and the simplifications.
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
    out.push_back(std::string(e.name()) + " " + layout_name(e.arg().mapping()) + " -> " +
                  layout_name(e.mapping()));
  }
}

/// The plan step of the table entry From -> To applied to a tensor of global
/// shape `g`; the strategy is resolved exactly as the entry will resolve it.
template <class T, LayoutTag From, LayoutTag To, class Comm>
PlanStep describe_step(const Shape& g, const layout_mapping<From>& fm, const layout_mapping<To>& tm, Strategy s,
                       const Comm& comm) {
  using Entry = transition<From, To>;
  PlanStep step{Entry::name, layout_name(fm), layout_name(tm), "", 0, false};
  const auto elem = static_cast<std::int64_t>(sizeof(T));
  const int n = comm.size(), me = comm.rank();
  const bool has_v = Comm::has_v_collectives;
  const auto row = [&](int d) { return d < g.rank() ? g.outer(d) * g.inner(d) * elem : 0; };
  const auto us = [](int i) { return static_cast<std::size_t>(i); };
  if constexpr (std::string_view(Entry::name) == "all_gather") {
    const auto ls = fm.lengths();
    const Strategy r = resolve_strategy(s, CollectiveOp::all_gather, ls, row(From::dim), has_v, pieces_along(g, From::dim));
    step.strategy = strategy_name(r);
    step.bytes = (r == Strategy::padded ? max_of(ls) : ls[us(me)]) * row(From::dim);
  } else if constexpr (std::string_view(Entry::name) == "reduce_scatter") {
    const auto ls = tm.lengths();
    const Strategy r = resolve_strategy(s, CollectiveOp::reduce_scatter, ls, row(To::dim), has_v, pieces_along(g, To::dim));
    step.strategy = strategy_name(r);
    step.bytes = r == Strategy::padded ? n * max_of(ls) * row(To::dim) : g.numel() * elem;
  } else if constexpr (std::string_view(Entry::name) == "all_to_all") {
    const auto lc = fm.lengths(), ls = tm.lengths();
    const Strategy r = resolve_strategy(s, CollectiveOp::all_to_all, ls, row(To::dim), has_v,
                                        pieces_along(g, std::max(From::dim, To::dim)));
    step.strategy = strategy_name(r);
    std::int64_t rest = 1;
    for (int d = 0; d < g.rank(); ++d)
      if (d != From::dim && d != To::dim) rest *= g[d];
    const std::int64_t mine = rest * lc[us(me)] * (To::dim < g.rank() ? g[To::dim] : 0) * elem;
    step.bytes = r == Strategy::padded ? n * rest * max_of(lc) * max_of(ls) * elem : mine;
  } else if constexpr (std::string_view(Entry::name) == "reshard") {
    if (std::ranges::equal(fm.lengths(), tm.lengths())) {
      step.op = "identity";
      return step;
    }
    const Strategy r = resolve_strategy(s, CollectiveOp::reshard, tm.lengths(), row(To::dim), has_v, pieces_along(g, To::dim));
    step.strategy = strategy_name(r);
    step.bytes = fm.lengths()[us(me)] * row(From::dim);
  } else if constexpr (std::string_view(Entry::name) == "all_reduce") {
    step.strategy = "all_reduce";
    step.bytes = g.numel() * elem;
  }
  step.communicates = Entry::communicates;
  return step;
}

template <class E>
void explain_into(Plan& p, const E& e);

/// The operands of a fused element-wise tree that are not element-wise are
/// explained first; the op names of the tree are collected, innermost first.
template <class E>
void explain_fused(Plan& p, const E& e, std::string& names, std::vector<std::string>& operands) {
  if constexpr (requires { e.op(); e.args(); }) {
    std::apply([&](const auto&... a) { (explain_fused(p, a, names, operands), ...); }, e.args());
    names += (names.empty() ? "" : ", ") + std::string(std::remove_cvref_t<decltype(e.op())>::name);
  } else {
    explain_into(p, e);
    if constexpr (is_broadcast<E>::value) operands.push_back(layout_name(e.arg.mapping()) + " bias");
    else operands.push_back(layout_name(e.mapping()));
  }
}

/// The steps of the route From -> To (none if it vanishes).
template <class T, LayoutTag From, LayoutTag To, class Comm>
void push_route(Plan& p, const Shape& g, const layout_mapping<From>& fm, const layout_mapping<To>& tm, Strategy s,
                const Comm& comm) {
  using R = route<From, To>;
  // Each step's backward is its adjoint entry, run in reverse order: found in
  // the same table (adjoint_t), not written here.
  const auto step = [&]<LayoutTag A, LayoutTag B>(const layout_mapping<A>& am, const layout_mapping<B>& bm) {
    p.steps.push_back(describe_step<T, A, B>(g, am, bm, s, comm));
    p.backward.insert(p.backward.begin(),
                      describe_step<T, dual_t<B>, dual_t<A>>(g, dual_mapping<B>(bm), dual_mapping<A>(am), s, comm));
  };
  if constexpr (R::vanishes) {
  } else if constexpr (R::direct) {
    step(fm, tm);
  } else if constexpr (!std::is_void_v<typename R::via>) {
    using M = typename R::via;
    step(fm, layout_mapping<M>{});
    step(layout_mapping<M>{}, tm);
  }
}

/// The steps evaluate(r) runs after the chain's source, as it runs them: the
/// route from the source to r's layout, or, where there is none, the steps
/// of the chain below r's last step, then the route of that step.
template <class E>
void route_steps(Plan& p, const E& r) {
  using T = typename E::value_type;
  using To = typename E::layout_type;
  using Inner = std::remove_cvref_t<decltype(r.arg())>;
  const auto& src = chain_source(r);
  using From = typename std::remove_cvref_t<decltype(src)>::layout_type;
  if constexpr (!route<From, To>::exists && is_redistribute<Inner>::value) {
    route_steps(p, r.arg());
    push_route<T, typename Inner::layout_type, To>(p, r.arg().shape(), r.arg().mapping(), r.mapping(), r.strategy(),
                                                   src.comm());
  } else {
    push_route<T, From, To>(p, src.shape(), src.mapping(), r.mapping(), r.strategy(), src.comm());
  }
}

template <class E>
void explain_chain(Plan& p, const E& r) {
  const auto& src = chain_source(r);
  explain_into(p, src);
  const std::size_t first = p.steps.size();
  route_steps(p, r);
  // Say what the simplification did when the user's chain differs from the route.
  std::vector<std::string> wrote;
  chain_written(r, wrote);
  std::string ran, asked;
  for (std::size_t i = first; i < p.steps.size(); ++i)
    if (p.steps[i].op != "identity")
      ran += (ran.empty() ? "" : " then ") + p.steps[i].op + " " + p.steps[i].from + " -> " + p.steps[i].to;
  for (const auto& w : wrote) asked += (asked.empty() ? "" : " then ") + w;
  // The user's steps ran as written (or the planner was asked to route and
  // found a step to run): nothing to say. An identity always gets a line.
  const std::string first_name = wrote.front().substr(0, wrote.front().find(' '));
  const std::size_t ran_steps = static_cast<std::size_t>(
      std::count_if(p.steps.begin() + static_cast<std::ptrdiff_t>(first), p.steps.end(), [](const PlanStep& s) { return s.op != "identity"; }));
  const bool as_written = wrote.size() == 1 && ran_steps > 0 &&
                          (first_name == "redistribute" || (ran_steps == 1 && p.steps.back().op == first_name));
  if (!as_written && asked != ran) p.simplifications.push_back(asked + " => " + (ran.empty() ? std::string("nothing (identity)") : ran));
  // Identity steps are not run: drop them from the plan.
  std::erase_if(p.steps, [](const PlanStep& s) { return s.op == "identity"; });
  std::erase_if(p.backward, [](const PlanStep& s) { return s.op == "identity"; });
}

template <class E>
void explain_into(Plan& p, const E& e) {
  if constexpr (is_tensor_v<E>) {
  } else if constexpr (is_redistribute<E>::value) {
    explain_chain(p, e);
  } else if constexpr (is_broadcast<E>::value) {
    explain_into(p, e.arg);
  } else if constexpr (requires { e.op(); e.args(); }) {
    // One step for the whole fused tree, its ops innermost first and its
    // operands in order: "fused mul, add (R, R) -> R".
    std::string names;
    std::vector<std::string> operands;
    explain_fused(p, e, names, operands);
    std::string from;
    for (const auto& o : operands) from += (from.empty() ? "" : ", ") + o;
    if (operands.size() > 1) from = "(" + from + ")";
    p.steps.push_back({"fused " + names, from, layout_name(e.mapping()), "", 0, false});
  } else if constexpr (requires { e.q(); e.k(); e.v(); }) {
    explain_into(p, e.q());
    explain_into(p, e.k());
    explain_into(p, e.v());
    p.steps.push_back({E::node_name, layout_name<typename E::layout_type>(), layout_name<typename E::layout_type>(), "", 0, false});
  } else if constexpr (requires { e.lhs(); e.rhs(); }) {
    explain_into(p, e.lhs());
    explain_into(p, e.rhs());
    p.steps.push_back({"matmul", layout_name(e.lhs().mapping()) + " x " + layout_name(e.rhs().mapping()),
                       layout_name(e.mapping()), "", 0, false});
  } else {
    explain_into(p, e.arg());
    p.steps.push_back({E::node_name, layout_name(e.arg().mapping()), layout_name(e.mapping()), "", 0, false});
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
