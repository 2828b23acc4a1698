// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Sums: `sum(x)` over all dims (a 0-d result) and `sum<K>(x)` over dim
/// K (the dim is removed), with the rules of rules::sum_all / rules::sum_dim: a
/// sum over the sharded dim is Partial; a sum over another dim keeps the
/// sharding (its dim index shifts down when K is before it). The backward
/// broadcasts the gradient back over the summed dims; no communication.

#include <string>

#include "shardex/core/compile_errors.hpp"
#include "shardex/expr/expression.hpp"
#include "shardex/expr/rules.hpp"

namespace shardex {

/// The layout of sum(x) for x of layout L.
template <LayoutTag L>
using sum_layout_t = typename rules::sum_all<L>::type;

/// K = -1: all dims.
template <TensorExpr E, int K>
class Sum {
public:
  ///@{
  /// The TensorExpr interface (x's element type and device; the layout of
  /// rules::sum_all or rules::sum_dim; the shape without dim K, 0-d for all
  /// dims), `node_name` as explain() prints it, and the operand.
  static constexpr const char* node_name = K < 0 ? "sum" : "sum_dim";
  using value_type = typename E::value_type;
  static_assert(Scalar<value_type>, SHARDEX_ERR_TOKEN_IDS_FLOAT_ONLY);
  using device_type = typename E::device_type;
  using layout_type = std::conditional_t < K<0, typename rules::sum_all<typename E::layout_type>::type,
                                             typename rules::sum_dim<typename E::layout_type, (K < 0 ? 0 : K)>::type>;

  /// The node of the sum of x (sum() builds it).
  explicit Sum(E arg) : arg_(std::move(arg)) {}

  [[nodiscard]] Shape shape() const {
    if constexpr (K < 0) {
      return Shape{};
    } else {
      const Shape s = arg_.shape();
      std::vector<std::int64_t> ext;
      for (int d = 0; d < s.rank(); ++d)
        if (d != K) ext.push_back(s[d]);
      return Shape(std::span<const std::int64_t>(ext));
    }
  }
  [[nodiscard]] decltype(auto) comm() const { return arg_.comm(); }
  [[nodiscard]] layout_mapping<layout_type> mapping() const {
    if constexpr (is_sharded_v<layout_type>)
      return carry_lengths<layout_type, typename E::layout_type>(arg_.mapping());
    else
      return {};
  }
  [[nodiscard]] const E& arg() const noexcept { return arg_; }
  ///@}

private:
  E arg_;
};

/// The sum of all elements: a 0-d tensor.
template <TensorExpr E>
auto sum(const E& x) {
  return Sum<E, -1>(x);
}

/// The sum over dim K, which is removed from the shape.
template <int K, TensorExpr E>
auto sum(const E& x) {
  static_assert(K >= 0, SHARDEX_ERR_SUM_DIM);
  return Sum<E, K>(x);
}

/// Runs the node: a local sum; the backward broadcasts the gradient back.
/// @throws invalid_argument if x has no dim K.
template <TensorExpr E, int K>
auto evaluate(const Sum<E, K>& e) {
  using T = typename E::value_type;
  using L = typename Sum<E, K>::layout_type;
  using Dev = typename E::device_type;
  auto x = eval(e.arg());
  if constexpr (K >= 0) {
    if (K >= x.shape().rank())
      throw invalid_argument("shardex::sum<" + std::to_string(K) + ">(x) on rank " + std::to_string(x.rank()) +
                             ": x has no dim " + std::to_string(K) + ", it is " + x.describe());
  }
  auto out = Tensor<T, L, Dev>::zeroed(x.comm(), e.shape(), e.mapping());
  const DimView v = K < 0 ? DimView{1, x.size(), 1} : DimView::of(x.local_shape(), K < 0 ? 0 : K);
  Dev::sum_middle(x.data(), out.data(), v.outer, v.extent, v.inner);
  if (x.node())
    out.record(K < 0 ? "sum" : "sum_dim", {x.node()}, [in_node = x.node(), v](const Tensor<T, dual_t<L>, Dev>& g) {
      auto gx = in_node->make_empty();  // broadcast_middle writes it whole
      Dev::broadcast_middle(g.data(), gx.data(), v.outer, v.extent, v.inner);
      in_node->accumulate(gx);
    });
  return out;
}

}  // namespace shardex
