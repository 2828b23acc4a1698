// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `layer_norm(x, weight, bias, eps)` and `rms_norm(x, weight, eps)`
/// over the last dim of a 2-d x (tokens, hidden), as torch's layer_norm and
/// RMSNorm, with the layout rule of rules::norm. The hidden dim must be whole
/// on each rank; the tokens may be sharded (sequence parallelism). The weight
/// and bias follow x as a bias does (rules::bias): under sequence parallelism
/// (x `Sharded<0>`) they must be `Replicated`, which is `replicate(w)` of the
/// `Invariant` parameter, so the replicate's derived adjoint all-reduces their
/// gradients (Megatron's hand-tagged `sequence_parallel` weights, here a type);
/// an `Invariant` weight meeting a sharded x is a compile error.
///
/// @code
/// Tensor<float, Sharded<0>> h = ...;                       // tokens split (sequence parallelism)
/// Tensor<float, Invariant> ln_w = ..., ln_b = ...;          // the parameters
/// Tensor<float, Sharded<0>> y = layer_norm(h, replicate(ln_w), replicate(ln_b));
/// @endcode

#include <cstdint>
#include <string>
#include <tuple>

#include "shardex/core/compile_errors.hpp"
#include "shardex/expr/expression.hpp"
#include "shardex/expr/rules.hpp"
#include "shardex/transition/plan_step.hpp"

namespace shardex {

namespace rules {
/// The rule of layer_norm / rms_norm for a 2-d x (tokens, hidden) and a
/// weight (and bias) of layout W: the hidden dim (1) whole on every rank, x
/// not Partial; then add_bias's pairs: (I, I) -> I, (R, R) -> R, (S(0), R) -> S(0).
template <LayoutTag X, LayoutTag W>
struct norm {
  static_assert(!std::same_as<X, Partial>, SHARDEX_ERR_NORM_PARTIAL);
  static_assert(!is_sharded_v<X> || sharded_on<X, 0>, SHARDEX_ERR_NORM_LAST_DIM_SHARDED);
  static_assert(!is_sharded_v<W> && !std::same_as<W, Partial>, SHARDEX_ERR_NORM_WEIGHT_SHARDED);
  static_assert(!(is_sharded_v<X> && std::same_as<W, Invariant>), SHARDEX_ERR_NORM_SP_WEIGHT_INVARIANT);
  static_assert(!(std::same_as<X, Replicated> && std::same_as<W, Invariant>)&&!(std::same_as<X, Invariant> &&
                                                                                std::same_as<W, Replicated>),
                SHARDEX_ERR_INVARIANT_MEETS_PER_RANK);
  /// The result's layout: x's.
  using type = X;
};
}  // namespace rules

/// @brief The node of `layer_norm` (HasBias) or `rms_norm`; its layout is rules::norm's.
template <TensorExpr X, TensorExpr W, bool Rms>
class Norm {
public:
  ///@{
  /// The TensorExpr interface (x's shape, communicator, mapping), the
  /// operands, eps; for explain, the operands and the (local) step.
  static constexpr const char* node_name = Rms ? "rms_norm" : "layer_norm";
  using value_type = typename X::value_type;
  using device_type = typename X::device_type;
  using layout_type = typename rules::norm<typename X::layout_type, typename W::layout_type>::type;
  static_assert(Scalar<value_type>, SHARDEX_ERR_TOKEN_IDS_FLOAT_ONLY);
  static_assert(std::same_as<typename W::value_type, value_type>, SHARDEX_ERR_ELEMENTWISE_MIXED_TYPES);

  /// The node (layer_norm() and rms_norm() build it); `bias` is ignored by rms_norm.
  Norm(X x, W weight, W bias, double eps)
      : x_(std::move(x)), weight_(std::move(weight)), bias_(std::move(bias)), eps_(eps) {}
  [[nodiscard]] Shape shape() const { return x_.shape(); }
  [[nodiscard]] decltype(auto) comm() const { return x_.comm(); }
  [[nodiscard]] decltype(auto) mapping() const { return x_.mapping(); }
  [[nodiscard]] const X& x() const noexcept { return x_; }
  [[nodiscard]] const W& weight() const noexcept { return weight_; }
  [[nodiscard]] const W& bias() const noexcept { return bias_; }
  [[nodiscard]] double eps() const noexcept { return eps_; }
  [[nodiscard]] std::tuple<const X&, const W&> operands() const noexcept { return {x_, weight_}; }
  [[nodiscard]] PlanStep explain_step() const {
    return PlanStep::local(node_name, "(" + layout_name(x_.mapping()) + ", " + layout_name(weight_.mapping()) + ")",
                           layout_name(mapping()));
  }
  ///@}

private:
  X x_;
  W weight_, bias_;
  double eps_;
};

/// (x - mean) / sqrt(var + eps) * weight + bias over the last dim of a 2-d x,
/// lazy (torch.nn.functional.layer_norm over the last dim; var is the biased one).
template <TensorExpr X, TensorExpr W>
auto layer_norm(const X& x, const W& weight, const W& bias, double eps = 1e-5) {
  return Norm<X, W, false>(x, weight, bias, eps);
}

/// x / sqrt(mean(x^2) + eps) * weight over the last dim of a 2-d x, lazy (torch.nn.RMSNorm).
template <TensorExpr X, TensorExpr W>
auto rms_norm(const X& x, const W& weight, double eps = 1e-6) {
  return Norm<X, W, true>(x, weight, weight, eps);
}

/// Runs the node: one pass per row (two-pass statistics) keeping each row's
/// mean and rstd; the backward is local (the input's gradient per row, the
/// weight's and bias's as column sums over the rank's rows, in their dual
/// layouts: a Replicated weight's gradient is Partial, summed by its replicate).
/// @throws invalid_argument unless x is 2-d and the weight (and bias) 1-d of x's last extent.
template <TensorExpr X, TensorExpr W, bool Rms>
auto evaluate(const Norm<X, W, Rms>& e) {
  using T = typename X::value_type;
  using L = typename Norm<X, W, Rms>::layout_type;
  using Dev = typename X::device_type;
  auto x = eval(e.x());
  auto w = eval(e.weight());
  auto b = eval(e.bias());
  const Shape s = x.local_shape();
  const std::int64_t cols = s.rank() == 2 ? s[1] : -1;
  const auto fits = [cols](const auto& t) { return t.local_shape().rank() == 1 && t.local_shape()[0] == cols; };
  if (cols < 0 || !fits(w) || (!Rms && !fits(b)))
    throw invalid_argument(std::string("shardex::") + Norm<X, W, Rms>::node_name + " on rank " +
                           std::to_string(x.rank()) + ": x must be 2-d (tokens, hidden) and the weight" +
                           (Rms ? "" : " and bias") + " 1-d of x's hidden extent; x is " + x.describe() + ", weight " +
                           w.describe() + (Rms ? std::string() : ", bias " + b.describe()));
  const std::int64_t rows = s[0];
  auto mean = Dev::template allocate_uninitialized<T>(rows);
  auto rstd = Dev::template allocate_uninitialized<T>(rows);
  auto out = Tensor<T, L, Dev>::empty(x.comm(), x.shape(), x.mapping());  // written whole
  Dev::norm_forward(x.data(), w.data(), Rms ? static_cast<const T*>(nullptr) : b.data(), out.data(), mean.get(),
                    rstd.get(), rows, cols, static_cast<T>(e.eps()), Rms);
  bool bias_grad = !Rms && b.node();  // (not const: for rms_norm, clang would call its capture below unneeded)
  if (x.node() || w.node() || bias_grad) {
    std::vector<std::shared_ptr<autodiff::Node>> inputs;
    autodiff::add_input(inputs, x.node());
    autodiff::add_input(inputs, w.node());
    if (bias_grad) autodiff::add_input(inputs, b.node());
    out.record(
        Norm<X, W, Rms>::node_name, std::move(inputs),
        [x, w, b, mean, rstd, rows, cols, bias_grad](const Tensor<T, dual_t<L>, Dev>& g) {
          // Every gradient asked for, each written whole by the passes below.
          const bool weights = w.node() || bias_grad;
          auto dw = w.node() ? w.node()->make_empty()
                             : (weights ? b.node()->make_empty() : typename decltype(w)::grad_type{});
          auto db = bias_grad ? b.node()->make_empty() : dw;
          T* db_data = bias_grad ? db.data() : static_cast<T*>(nullptr);
          bool done = false;
          if constexpr (requires(T * p, const T* q) {
                          Dev::norm_backward_fused(q, q, q, q, q, p, p, p, rows, cols, Rms, true);
                        }) {
            if (x.node() && weights) {
              // The host: every gradient in one pass over the rows, x's added straight into its gradient
              // where that adds in place (beta 1: the residual stream's, which holds the skip path's
              // contribution already), else written into fresh storage (beta 0) and accumulated.
              x.node()->accumulate_product([&](T* dx, T beta) {
                Dev::norm_backward_fused(x.data(), w.data(), g.data(), mean.get(), rstd.get(), dx, dw.data(), db_data,
                                         rows, cols, Rms, beta != T(0));
              });
              done = true;
            }
          }
          if (!done && x.node()) {
            auto dx = x.node()->make_empty();
            Dev::norm_backward_input(x.data(), w.data(), g.data(), mean.get(), rstd.get(), dx.data(), rows, cols, Rms);
            x.node()->accumulate(dx);
          }
          if (!done && weights)
            Dev::norm_backward_weight(x.data(), g.data(), mean.get(), rstd.get(), dw.data(), db_data, rows, cols);
          if (w.node()) w.node()->accumulate(dw);
          if (bias_grad) b.node()->accumulate(db);
        });
  }
  return out;
}

}  // namespace shardex
