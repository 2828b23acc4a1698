// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `reshape(x, shape)`: the same row-major elements under another global
/// shape. Whole layouts take any shape with as many elements; a `Sharded<D>`
/// tensor keeps dims 0..D as they are (so each rank's slice stays one block)
/// and may regroup the dims after D, e.g. (seq, heads * dh) -> (seq, heads, dh).
/// Local and without a copy: the result is a view of x's storage, as torch's
/// view is (writing one writes the other); the backward views the gradient
/// back.

#include <string>
#include <vector>

#include "shardex/core/compile_errors.hpp"
#include "shardex/expr/expression.hpp"

namespace shardex {

/// @brief The node of `reshape(x, shape)`: x's layout and mapping, another global shape.
template <TensorExpr E>
class Reshape {
public:
  ///@{
  /// The TensorExpr interface (x's, with the new global shape), `node_name`
  /// as explain() prints it, and the operand.
  static constexpr const char* node_name = "reshape";
  using value_type = typename E::value_type;
  static_assert(Scalar<value_type>, SHARDEX_ERR_TOKEN_IDS_FLOAT_ONLY);
  using device_type = typename E::device_type;
  using layout_type = typename E::layout_type;

  /// The node of x seen with global shape `to` (reshape() builds it).
  Reshape(E arg, Shape to) : arg_(std::move(arg)), to_(to) {}
  [[nodiscard]] Shape shape() const { return to_; }
  [[nodiscard]] decltype(auto) comm() const { return arg_.comm(); }
  [[nodiscard]] decltype(auto) mapping() const { return arg_.mapping(); }
  [[nodiscard]] const E& arg() const noexcept { return arg_; }
  ///@}

private:
  E arg_;
  Shape to_;
};

/// x's elements under the global shape `to`, lazy (the rules in the file's note).
template <TensorExpr E>
auto reshape(const E& x, const Shape& to) {
  return Reshape<E>(x, to);
}

namespace detail {

/// x's local elements, in the same row-major order, as a tensor of layout L,
/// global shape `to` and mapping `m`: a view of x's storage, no copy (the
/// operations that write into an operand do so only into storage it holds
/// alone, tensor.hpp's owns_storage_alone); its backward, recorded as `op`,
/// sees the gradient as x's the same way. Reshape and the heads' split and
/// merge (nn/heads.hpp) are this.
template <LayoutTag L, class X>
auto same_elements(const X& x, const Shape& to, layout_mapping<L> m, const char* op) {
  using T = typename X::value_type;
  using Dev = typename X::device_type;
  using LX = typename X::layout_type;
  auto out = x.template viewed_as<L>(to, std::move(m));
  if (x.node())
    out.record(op, {x.node()},
               [in = x.node(), from = x.shape(), gm = dual_mapping<LX>(x.mapping())](
                   const Tensor<T, dual_t<L>, Dev>& g) { in->accumulate(g.template viewed_as<dual_t<LX>>(from, gm)); });
  return out;
}

}  // namespace detail

/// Runs the node: a view of x's local elements, no copy; the backward views
/// the gradient back.
/// @throws invalid_argument if the element count differs, or a sharded x's
/// dims up to the sharded one change.
template <TensorExpr E>
auto evaluate(const Reshape<E>& e) {
  using L = typename E::layout_type;
  auto x = eval(e.arg());
  const Shape& from = x.shape();
  const Shape to = e.shape();
  bool ok = from.numel() == to.numel();
  if constexpr (is_sharded_v<L>) {
    ok = ok && to.rank() > L::dim && from.rank() > L::dim;
    for (int d = 0; ok && d <= L::dim; ++d) ok = from[d] == to[d];
  }
  if (!ok)
    throw invalid_argument(
        "shardex::reshape(x, " + to.str() + ") on rank " + std::to_string(x.rank()) + ": x is " + x.describe() +
        (is_sharded_v<L> ? "; a sharded tensor keeps its dims up to the sharded one and its element count"
                         : "; the element count must stay the same"));
  return detail::same_elements<L>(x, to, x.mapping(), "reshape");
}

}  // namespace shardex
