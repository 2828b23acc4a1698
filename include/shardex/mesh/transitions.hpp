// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Transitions along one mesh axis: `all_gather<tp>(x)`,
/// `reduce_scatter<dp, Sharded<0>>(x, lengths)`, `all_reduce<dp>(x)`,
/// `all_to_all<tp, Sharded<1>>(x, lengths)`, `slice<tp, Sharded<0>>(x,
/// lengths)`, `replicate<dp>(x)`, `zero_pad<tp>(x)`, `redistribute<tp,
/// To>(x, lengths)` (a reshard too). Each is the transition of the table
/// (transition/table.hpp) run on that axis' sub-communicator, on the local
/// data seen along the axis (`MeshTensor::along<k>()`): the layouts of the
/// other axes do not change, and the adjoint is derived from the table
/// exactly as on one axis.
///
/// A transition is lazy (`AlongAxis`): a chain of transitions along the
/// same axis is one chain of the single-axis planner, simplified as there
/// (reduce_scatter<tp> then all_gather<tp> is one all_reduce on tp). A
/// transition along another axis, or a local operation, evaluates it.
/// `explain(t)` lists its steps with their axis: "all_reduce<tp> P(sum) -> R".

#include <string>
#include <utility>
#include <vector>

#include "shardex/core/compile_errors.hpp"
#include "shardex/expr/explain.hpp"
#include "shardex/expr/redistribute.hpp"
#include "shardex/mesh/mesh_tensor.hpp"

namespace shardex {

namespace detail {
/// Where the steps of a training step are collected while `explain_step`
/// runs one (mesh/training.hpp); null otherwise.
inline Plan*& mesh_step_plan() {
  static thread_local Plan* plan = nullptr;
  return plan;
}

/// The plan's step names, marked with the axis: "all_gather" -> "all_gather<tp>".
inline void name_axis(Plan& p, std::string_view axis) {
  const std::string mark = "<" + std::string(axis) + ">";
  for (auto& s : p.steps) s.op += mark;
  for (auto& s : p.backward) s.op += mark;
  for (auto& s : p.simplifications) s = "along " + std::string(axis) + ": " + s;
}
}  // namespace detail

/// A lazy chain of transitions along axis I of a mesh tensor `Src`: `E` is
/// the single-axis chain over `Src::along<I>()`.
template <class Src, std::size_t I, class E>
class AlongAxis {
public:
  ///@{
  /// The element type and mesh of the source, its layouts with axis I's
  /// replaced by the chain's result, the MeshTensor it evaluates to, and I.
  using value_type = typename Src::value_type;
  using mesh_type = typename Src::mesh_type;
  using layouts = replace_at_t<typename Src::layouts, I, typename E::layout_type>;
  using result_type = MeshTensor<value_type, mesh_type, layouts>;
  static constexpr std::size_t axis_index = I;
  ///@}

  /// The chain `e` along axis I of `src`.
  AlongAxis(Src src, E e) : src_(std::move(src)), e_(std::move(e)) {}
  ///@{
  /// The source mesh tensor, and the single-axis chain.
  [[nodiscard]] const Src& source() const noexcept { return src_; }
  [[nodiscard]] const E& chain() const noexcept { return e_; }
  ///@}

  /// The plan on this rank, its steps named with the axis.
  [[nodiscard]] Plan plan() const {
    Plan p = explain(e_);
    detail::name_axis(p, mesh_type::names()[I]);
    return p;
  }

  /// Runs the chain on the tensor seen along axis I and sees the result back
  /// as a mesh tensor (MeshTensor's converting constructor calls it).
  [[nodiscard]] result_type evaluate() const {
    auto out = eval(e_);
    if (Plan* into = detail::mesh_step_plan()) {
      Plan p = plan();
      into->steps.insert(into->steps.end(), p.steps.begin(), p.steps.end());
      into->simplifications.insert(into->simplifications.end(), p.simplifications.begin(), p.simplifications.end());
      // Its adjoints are listed when the reverse pass runs them (if it does).
      // (A chain that moves nothing has no adjoint and may return its input.)
      if (!p.backward.empty() && out.node()) record_adjoints(*out.node(), std::move(p.backward));
    }
    result_type r = src_.template with_axis<I>(out);
    r.agree_across_mesh(std::string("shardex::") + e_.name() + "<" + std::string(mesh_type::names()[I]) + ">");
    return r;
  }

private:
  /// Makes the node list `adjoints` in the plan of the step being explained
  /// when its backward runs.
  template <class Node>
  static void record_adjoints(Node& node, std::vector<PlanStep> adjoints) {
    node.backward = [run = std::move(node.backward), adjoints = std::move(adjoints)](const auto& g) {
      if (Plan* p = detail::mesh_step_plan()) p->backward.insert(p->backward.end(), adjoints.begin(), adjoints.end());
      if (run) run(g);
    };
  }

public:
private:
  Src src_;
  E e_;
};

namespace detail {
template <class X>
struct is_along_axis : std::false_type {};
template <class S, std::size_t I, class E>
struct is_along_axis<AlongAxis<S, I, E>> : std::true_type {};
/// Whether X is a lazy chain along axis I (so that a step along I joins it).
template <class X, std::size_t I>
inline constexpr bool is_chain_along = false;
template <class S, std::size_t I, class E>
inline constexpr bool is_chain_along<AlongAxis<S, I, E>, I> = true;
}  // namespace detail

/// A mesh tensor or a lazy transition of one.
template <class X>
concept MeshExpr = is_mesh_tensor_v<X> || detail::is_along_axis<X>::value;

/// A mesh expression, evaluated.
template <MeshExpr X>
auto mesh_eval(const X& x) {
  if constexpr (is_mesh_tensor_v<X>)
    return x;
  else
    return x.evaluate();
}

/// The plan of a lazy transition along an axis.
template <class S, std::size_t I, class E>
Plan explain(const AlongAxis<S, I, E>& x) {
  return x.plan();
}

/// The transition `f` (a single-axis spelling, applied to the tensor seen
/// along axis I) as a lazy step along I; a chain along I grows.
template <std::size_t I, MeshExpr X, class F>
auto along_index(const X& x, F&& f) {
  if constexpr (detail::is_chain_along<X, I>) {
    using Src = std::remove_cvref_t<decltype(x.source())>;
    auto e = f(x.chain());
    return AlongAxis<Src, I, decltype(e)>(x.source(), std::move(e));
  } else {
    auto t = mesh_eval(x);
    auto e = f(t.template along<I>());
    return AlongAxis<decltype(t), I, decltype(e)>(std::move(t), std::move(e));
  }
}

/// The same along the axis named A (a compile error if the mesh lacks it).
template <MeshAxis A, MeshExpr X, class F>
auto along_axis(const X& x, F&& f) {
  using M = typename X::mesh_type;
  static_assert(M::template has_axis<A>, SHARDEX_ERR_MESH_NO_SUCH_AXIS);
  if constexpr (M::template has_axis<A>) return along_index<M::template index_of<A>>(x, std::forward<F>(f));
}

// ---- the user's spellings: the single-axis ones, with the axis first ------------------------

/// Sharded -> Replicated (default) or Invariant along A.
template <MeshAxis A, LayoutTag To = Replicated, MeshExpr X>
auto all_gather(const X& x, Strategy s = Strategy::automatic) {
  return along_axis<A>(x, [&](const auto& v) { return all_gather<To>(v, s); });
}
/// Partial -> Sharded along A.
template <MeshAxis A, ShardedLayout To, MeshExpr X>
auto reduce_scatter(const X& x, layout_mapping<To> to = lengths_from_type<To>(), Strategy s = Strategy::automatic) {
  return along_axis<A>(x, [&](const auto& v) { return reduce_scatter<To>(v, to, s); });
}
/// Partial -> Replicated (default) or Invariant along A.
template <MeshAxis A, LayoutTag To = Replicated, MeshExpr X>
auto all_reduce(const X& x) {
  return along_axis<A>(x, [&](const auto& v) { return all_reduce<To>(v); });
}
/// Replicated or Invariant -> Sharded along A; no communication.
template <MeshAxis A, ShardedLayout To, MeshExpr X>
auto slice(const X& x, layout_mapping<To> to = lengths_from_type<To>()) {
  return along_axis<A>(x, [&](const auto& v) { return slice<To>(v, to); });
}
/// `Sharded<C>` -> `Sharded<S>` along A.
template <MeshAxis A, ShardedLayout To, MeshExpr X>
auto all_to_all(const X& x, layout_mapping<To> to = lengths_from_type<To>(), Strategy s = Strategy::automatic) {
  return along_axis<A>(x, [&](const auto& v) { return all_to_all<To>(v, to, s); });
}
/// Invariant -> Replicated along A: nothing moves forward; the backward
/// all-reduces over A (on the data-parallel axis: the DDP all-reduce).
template <MeshAxis A, MeshExpr X>
auto replicate(const X& x) {
  return along_axis<A>(x, [&](const auto& v) { return replicate(v); });
}
/// Sharded -> Partial along A.
template <MeshAxis A, MeshExpr X>
auto zero_pad(const X& x) {
  return along_axis<A>(x, [&](const auto& v) { return zero_pad(v); });
}
/// Any layout to any other along A (the planner's route); a reshard when
/// only the lengths change.
template <MeshAxis A, LayoutTag To, MeshExpr X>
auto redistribute(const X& x, layout_mapping<To> to = lengths_from_type<To>(), Strategy s = Strategy::automatic) {
  return along_axis<A>(x, [&](const auto& v) { return redistribute<To>(v, to, s); });
}

}  // namespace shardex
