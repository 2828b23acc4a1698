#pragma once
/// @file
/// @brief `explain(expr)`: the plan evaluating `expr` will run on this rank,
/// without running it: each collective with its resolved strategy and the
/// bytes this rank puts into it, the local steps, and the simplifications.
///
/// @code
/// auto y = all_gather(reduce_scatter<Sharded<0>>(p, lens));
/// explain(y).str();
/// // all_reduce P(sum) -> R  [v_collective, 400 B]
/// // simplified: reduce_scatter P(sum) -> S(0)[dyn] then all_gather S(0)[dyn] -> R => all_reduce P(sum) -> R
/// @endcode

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "shardex/expr/elementwise.hpp"
#include "shardex/expr/matmul.hpp"
#include "shardex/expr/plan.hpp"
#include "shardex/expr/redistribute.hpp"
#include "shardex/expr/sum.hpp"
#include "shardex/expr/transpose.hpp"

namespace shardex {

namespace detail {

/// The plan step of the table entry From -> To applied to a tensor of global
/// shape `g`; the strategy is resolved exactly as the entry will resolve it.
template <class T, LayoutTag From, LayoutTag To, class Comm>
PlanStep describe_step(const Shape& g, const layout_mapping<From>& fm, const layout_mapping<To>& tm, Strategy s,
                       const Comm& comm) {
  using Entry = transition<From, To>;
  PlanStep step{Entry::name, layout_name<From>(), layout_name<To>(), "", 0, false};
  const auto elem = static_cast<std::int64_t>(sizeof(T));
  const int n = comm.size(), me = comm.rank();
  const bool has_v = Comm::has_v_collectives;
  const auto row = [&](int d) { return d < g.rank() ? g.outer(d) * g.inner(d) * elem : 0; };
  const auto us = [](int i) { return static_cast<std::size_t>(i); };
  if constexpr (std::string_view(Entry::name) == "all_gather") {
    const auto ls = fm.lengths();
    const Strategy r = resolve_strategy(s, CollectiveOp::all_gather, ls, row(From::dim), has_v);
    step.strategy = strategy_name(r);
    step.bytes = (r == Strategy::padded ? max_of(ls) : ls[us(me)]) * row(From::dim);
  } else if constexpr (std::string_view(Entry::name) == "reduce_scatter") {
    const auto ls = tm.lengths();
    const Strategy r = resolve_strategy(s, CollectiveOp::reduce_scatter, ls, row(To::dim), has_v);
    step.strategy = strategy_name(r);
    step.bytes = r == Strategy::padded ? n * max_of(ls) * row(To::dim) : g.numel() * elem;
  } else if constexpr (std::string_view(Entry::name) == "all_to_all") {
    const auto lc = fm.lengths(), ls = tm.lengths();
    const Strategy r = resolve_strategy(s, CollectiveOp::all_to_all, ls, row(To::dim), has_v);
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
    const Strategy r = resolve_strategy(s, CollectiveOp::reshard, tm.lengths(), row(To::dim), has_v);
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
void explain_fused(Plan& p, const E& e, std::string& names) {
  if constexpr (requires { e.op(); e.args(); }) {
    std::apply([&](const auto&... a) { (explain_fused(p, a, names), ...); }, e.args());
    names += (names.empty() ? "" : ", ") + std::string(std::remove_cvref_t<decltype(e.op())>::name);
  } else {
    explain_into(p, e);
  }
}

template <class E>
void explain_chain(Plan& p, const E& r) {
  using T = typename E::value_type;
  using To = typename E::layout_type;
  const auto& src = chain_source(r);
  using From = typename std::remove_cvref_t<decltype(src)>::layout_type;
  using R = route<From, To>;
  explain_into(p, src);
  const std::size_t first = p.steps.size();
  const Shape g = src.shape();
  if constexpr (R::vanishes) {
  } else if constexpr (R::direct) {
    p.steps.push_back(describe_step<T, From, To>(g, src.mapping(), r.mapping(), r.strategy(), src.comm()));
  } else if constexpr (!std::is_void_v<typename R::via>) {
    using M = typename R::via;
    p.steps.push_back(describe_step<T, From, M>(g, src.mapping(), layout_mapping<M>{}, r.strategy(), src.comm()));
    p.steps.push_back(describe_step<T, M, To>(g, layout_mapping<M>{}, r.mapping(), r.strategy(), src.comm()));
  }
  // Say what the simplification did when the user's chain differs from the route.
  std::vector<std::string> wrote;
  chain_steps(r, wrote);
  std::string ran, asked;
  for (std::size_t i = first; i < p.steps.size(); ++i)
    if (p.steps[i].op != "identity")
      ran += (ran.empty() ? "" : " then ") + p.steps[i].op + " " + p.steps[i].from + " -> " + p.steps[i].to;
  for (const auto& w : wrote) asked += (asked.empty() ? "" : " then ") + w;
  // The user's single step ran as written (or the planner was asked to route): nothing to say.
  const std::string first_name = wrote.front().substr(0, wrote.front().find(' '));
  const std::size_t ran_steps = static_cast<std::size_t>(
      std::count_if(p.steps.begin() + static_cast<std::ptrdiff_t>(first), p.steps.end(), [](const PlanStep& s) { return s.op != "identity"; }));
  const bool as_written = wrote.size() == 1 && (first_name == "redistribute" ||
                                                (ran_steps == 1 && p.steps.back().op == first_name));
  if (!as_written) p.simplifications.push_back(asked + " => " + (ran.empty() ? std::string("nothing (identity)") : ran));
  // Identity steps are not run: drop them from the plan.
  std::erase_if(p.steps, [](const PlanStep& s) { return s.op == "identity"; });
}

template <class E>
void explain_into(Plan& p, const E& e) {
  if constexpr (is_tensor_v<E>) {
  } else if constexpr (is_redistribute<E>::value) {
    explain_chain(p, e);
  } else if constexpr (is_broadcast<E>::value) {
    explain_into(p, e.arg);
  } else if constexpr (requires { e.op(); e.args(); }) {
    // One step for the whole fused tree: "fused add, gelu".
    std::string names;
    explain_fused(p, e, names);
    p.steps.push_back({"fused " + names, "", layout_name<typename E::layout_type>(), "", 0, false});
  } else if constexpr (requires { e.lhs(); e.rhs(); }) {
    explain_into(p, e.lhs());
    explain_into(p, e.rhs());
    p.steps.push_back({"matmul", layout_name<typename std::remove_cvref_t<decltype(e.lhs())>::layout_type>() + " x " +
                                     layout_name<typename std::remove_cvref_t<decltype(e.rhs())>::layout_type>(),
                       layout_name<typename E::layout_type>(), "", 0, false});
  } else {
    explain_into(p, e.arg());
    p.steps.push_back({E::node_name, layout_name<typename std::remove_cvref_t<decltype(e.arg())>::layout_type>(),
                       layout_name<typename E::layout_type>(), "", 0, false});
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
