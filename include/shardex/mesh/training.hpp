// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Training on a mesh: `backward(loss)` and `backward(y, dy)` over the
/// whole mesh, `sgd_step(lr, params...)` for mesh parameters,
/// `explain_step(f)` (the transitions a training step runs, forward and
/// backward, each with its axis), and `to_global(x)`.
///
/// The data-parallel gradient all-reduce is nobody's code: a parameter
/// Invariant on `dp` is used through `replicate<dp>(p)`, whose adjoint (the
/// table's entry P -> I, an all-reduce over dp) sums the gradients of the dp
/// groups in the reverse pass. `explain_step` lists it as "all_reduce<dp>".

#include <string>
#include <vector>

#include "shardex/autodiff/backward.hpp"
#include "shardex/autodiff/grad_norm.hpp"
#include "shardex/core/compile_errors.hpp"
#include "shardex/core/error.hpp"
#include "shardex/expr/plan.hpp"
#include "shardex/mesh/local_ops.hpp"
#include "shardex/mesh/transitions.hpp"
#include "shardex/tensor/transfer.hpp"

namespace shardex {

namespace detail {
template <class X>
void check_loss(const X& loss, const char* op) {
  loss.require_valid(op);
  if (loss.shape().numel() != 1)
    throw invalid_argument(std::string(op) + ": the loss must hold one element, but it is " + loss.describe());
  if (!loss.inner().node())
    throw error(std::string(op) + ": the loss does not depend on any tensor that requires_grad()");
}
}  // namespace detail

/// Fills the gradient of every differentiable tensor `loss` depends on, on
/// every axis (the seed is 1 on every rank, as for one axis). Collective over
/// the mesh's world: every rank calls it on the same graph. Each collective
/// of the pass agrees on its own call over its axis' sub-communicator (the
/// shapes differ from one group of an axis to another, so the world cannot
/// agree on the whole pass at once as one axis does).
template <MeshExpr X>
void backward(const X& loss_expr) {
  const auto loss = mesh_eval(loss_expr);
  detail::check_loss(loss, "shardex::backward(loss)");
  autodiff::reverse_pass(
      *loss.inner().node(), static_cast<const mpi::Communicator*>(nullptr), [&] { loss.inner().node()->seed(); },
      [&] {
        return "shardex::backward(loss) on world rank " + std::to_string(loss.mesh().world().rank()) + " (loss " +
               loss.describe() + ")";
      });
}

/// The reverse pass from `y` with its gradient given, `dy` (dual layouts):
/// afterwards each differentiable input holds the adjoint of y's maker
/// applied to dy (torch's y.backward(dy)).
template <Scalar T, MeshType M, PerAxisLayouts Ls>
void backward(const MeshTensor<T, M, Ls>& y, const MeshTensor<T, M, dual_layouts_t<Ls>>& dy) {
  y.require_valid("shardex::backward(y, dy)");
  dy.require_valid("shardex::backward(y, dy)");
  if (!y.inner().node()) throw error("shardex::backward(y, dy): y does not depend on any tensor that requires_grad()");
  // Global facts only, so that every rank decides alike: the global shapes,
  // the lengths of every axis (dy's those of y's dual layouts), the mesh.
  const auto yd = MeshTensor<T, M, dual_layouts_t<Ls>>::assemble(y.mesh(), y.shape(), y.dual_mappings(), dy.inner());
  if (dy.shape() != y.shape() || dy.signature().value() != yd.signature().value() || !(dy.mesh() == y.mesh()))
    throw invalid_argument("shardex::backward(y, dy) on world rank " + std::to_string(y.mesh().world().rank()) +
                           ": dy is " + dy.describe() + " but y is " + y.describe() +
                           "; dy must have y's shape, the dual " + "layouts and y's lengths");
  auto& node = *y.inner().node();
  autodiff::reverse_pass(
      node, static_cast<const mpi::Communicator*>(nullptr), [&] { node.grad = dy.inner().clone(); },
      [&] {
        return "shardex::backward(y, dy) on world rank " + std::to_string(y.mesh().world().rank()) + " (y " +
               y.describe() + ")";
      });
}

/// p -= lr * grad(p) for mesh parameters, Invariant or Sharded on every axis.
template <Scalar T, MeshType M, PerAxisLayouts Ls>
void sgd_update(MeshTensor<T, M, Ls>& p, double lr) {
  static_assert(std::same_as<dual_layouts_t<Ls>, Ls>, SHARDEX_ERR_MESH_SGD_NOT_SELF_DUAL);
  auto in = p.inner();
  sgd_update(in, lr);
}

/// A mesh parameter in grad_norm (autodiff/grad_norm.hpp): its gradient's
/// box counted by the ranks holding its first copy (coordinate 0 on every
/// Invariant axis), over the whole mesh.
template <Scalar T, MeshType M, PerAxisLayouts Ls>
struct grad_norm_part<MeshTensor<T, M, Ls>> {
  ///@{
  /// The parameter type P and the grad_norm_part interface
  /// (autodiff/grad_norm.hpp): the mesh world's host communicator, the global
  /// shape, the squares this rank counts (0 but on the first copy) and the
  /// scaling of the local gradient.
  using P = MeshTensor<T, M, Ls>;
  static_assert(std::same_as<dual_layouts_t<Ls>, Ls>, SHARDEX_ERR_MESH_GRAD_NORM_NOT_SELF_DUAL);
  static const mpi::Communicator& comm(const P& p) { return detail::control_of(p.mesh().world()); }
  static const Shape& shape(const P& p) { return p.shape(); }
  static double counted_squares(const P& p) {
    const auto& in = p.inner();
    if (!in.has_grad() || !p.first_copy()) return 0.0;
    return detail::sum_of_squares<typename M::device_type>(in.grad().data(), in.grad().size());
  }
  static void scale_grad(const P& p, double factor) {
    grad_norm_part<typename P::inner_type>::scale_grad(p.inner(), factor);
  }
  ///@}
};

/// Runs `step` (a training step: forward, backward, update) and returns the
/// plan of what it ran on this rank: every transition with its axis, strategy
/// and bytes and every local operation, in order, then in `backward` the
/// adjoints of those transitions that the reverse pass ran, in the order it
/// ran them. Steps of single-axis tensors inside `step` are not listed.
template <class F>
Plan explain_step(F&& step) {
  Plan p;
  Plan* outer = std::exchange(detail::mesh_step_plan(), &p);
  try {
    step();
  } catch (...) {
    detail::mesh_step_plan() = outer;
    throw;
  }
  detail::mesh_step_plan() = outer;
  return p;
}

namespace detail {
/// x with every axis from I on made whole: gathered where Sharded, summed
/// where Partial (into Invariant).
template <std::size_t I, class X>
auto whole_from(const X& x) {
  if constexpr (I == X::axis_count) {
    return x;
  } else {
    using L = typename X::template layout_at<I>;
    if constexpr (is_sharded_v<L>)
      return whole_from<I + 1>(mesh_eval(along_index<I>(x, [](const auto& v) { return all_gather<Invariant>(v); })));
    else if constexpr (std::same_as<L, Partial>)
      return whole_from<I + 1>(mesh_eval(along_index<I>(x, [](const auto& v) { return all_reduce<Invariant>(v); })));
    else
      return whole_from<I + 1>(x);
  }
}
}  // namespace detail

/// The logical value of `x` on every rank, row-major, in host memory:
/// gathered and summed along every axis. Collective over the mesh.
template <MeshExpr X>
std::vector<typename X::value_type> to_global(const X& x) {
  const auto whole = detail::whole_from<0>(mesh_eval(x).detach());
  const auto local = to<Host>(whole.inner());
  return {local.data(), local.data() + local.size()};
}

}  // namespace shardex
