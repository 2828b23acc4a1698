// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `transpose(x)` of a 2-d tensor: S(0) <-> S(1), other layouts kept.
/// Local; the backward transposes the gradient back.

#include <string>

#include "shardex/core/compile_errors.hpp"
#include "shardex/expr/expression.hpp"
#include "shardex/expr/rules.hpp"

namespace shardex {

/// @brief The node of `transpose(x)` for a 2-d x; its layout is rules::transpose's.
template <TensorExpr E>
class Transpose {
public:
  ///@{
  /// The TensorExpr interface (the shape's two dims swapped, the layout of
  /// rules::transpose, x's lengths), `node_name` as explain() prints it, and the operand.
  static constexpr const char* node_name = "transpose";
  using value_type = typename E::value_type;
  static_assert(Scalar<value_type>, SHARDEX_ERR_TOKEN_IDS_FLOAT_ONLY);
  using device_type = typename E::device_type;
  using layout_type = typename rules::transpose<typename E::layout_type>::type;

  /// The node of x transposed (transpose() builds it).
  explicit Transpose(E arg) : arg_(std::move(arg)) {}
  [[nodiscard]] Shape shape() const {
    const Shape s = arg_.shape();
    return s.rank() == 2 ? Shape{s[1], s[0]} : s;
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

/// x^T for a 2-d x, lazy: S(0) <-> S(1), other layouts kept.
template <TensorExpr E>
auto transpose(const E& x) {
  return Transpose<E>(x);
}

/// Runs the node: one local transpose; the backward transposes the gradient back.
/// @throws invalid_argument if x is not 2-d.
template <TensorExpr E>
auto evaluate(const Transpose<E>& e) {
  using T = typename E::value_type;
  using L = typename Transpose<E>::layout_type;
  using Dev = typename E::device_type;
  auto x = eval(e.arg());
  if (x.shape().rank() != 2)
    throw invalid_argument("shardex::transpose(x) on rank " + std::to_string(x.rank()) + ": x must be 2-d, but it is " +
                           x.describe());
  auto out = Tensor<T, L, Dev>::zeroed(x.comm(), e.shape(), e.mapping());
  const std::int64_t rows = x.local_shape()[0], cols = x.local_shape()[1];
  Dev::transpose_2d(x.data(), out.data(), rows, cols);
  if (x.node())
    out.record("transpose", {x.node()}, [in = x.node(), rows, cols](const Tensor<T, dual_t<L>, Dev>& g) {
      auto gx = in->make_full(T(0));
      Dev::transpose_2d(g.data(), gx.data(), cols, rows);
      in->accumulate(gx);
    });
  return out;
}

}  // namespace shardex
