// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `split_heads(x, batch, dh)` and `merge_heads(y)`: between the 2-d
/// token matrices of the projections, (tokens, heads * dh), and the 4-d
/// (batch, seq, heads, dh) of causal_attention, with the lengths carried in
/// units of heads: a column-parallel projection `Sharded<1>` whose lengths
/// are multiples of dh (3 heads of 64 columns: 192) becomes `Sharded<2>` with
/// lengths in heads (3), and back. Whole layouts stay whole. The same row-major
/// elements, a view of the operand's storage with no copy; the backward is the
/// other function.
///
/// @code
/// Tensor<float, Sharded<1>> q = matmul(x, w_q);            // (tokens, 12 * 64), lengths 3*64, 3*64, 2*64, ...
/// auto y = causal_attention(split_heads(q, batch, 64), split_heads(k, batch, 64), split_heads(v, batch, 64));
/// Tensor<float, Sharded<1>> h = merge_heads(y);            // (tokens, 12 * 64) again
/// @endcode

#include <cstdint>
#include <string>
#include <vector>

#include "shardex/core/compile_errors.hpp"
#include "shardex/expr/expression.hpp"
#include "shardex/expr/reshape.hpp"
#include "shardex/expr/rules.hpp"

namespace shardex {

namespace rules {
/// The layout of split_heads (Split) or merge_heads: whole layouts keep
/// theirs; Sharded<1> (tokens, heads * dh) <-> Sharded<2> (batch, seq, heads,
/// dh); the lengths change units at run time.
template <LayoutTag L, bool Split>
struct heads {
  static_assert(!std::same_as<L, Partial>, SHARDEX_ERR_HEADS_PARTIAL);
  static_assert(!is_sharded_v<L> || sharded_on < L, Split ? 1 : 2 >, SHARDEX_ERR_HEADS_SHARDED_DIM);
  /// The result's layout.
  using type = std::conditional_t<is_sharded_v<L>, Sharded<Split ? 2 : 1>, L>;
};
}  // namespace rules

/// @brief The node of split_heads (Split) or merge_heads; its layout is rules::heads'.
template <TensorExpr E, bool Split>
class Heads {
public:
  ///@{
  /// The TensorExpr interface (the new shape and mapping), `node_name` as
  /// explain() prints it, and the operand.
  static constexpr const char* node_name = Split ? "split_heads" : "merge_heads";
  using value_type = typename E::value_type;
  static_assert(Scalar<value_type>, SHARDEX_ERR_TOKEN_IDS_FLOAT_ONLY);
  using device_type = typename E::device_type;
  using layout_type = typename rules::heads<typename E::layout_type, Split>::type;

  /// The node (split_heads() and merge_heads() build it): `batch` and `dh`
  /// only for split_heads.
  Heads(E arg, std::int64_t batch, std::int64_t dh) : arg_(std::move(arg)), batch_(batch), dh_(dh) {}
  [[nodiscard]] Shape shape() const {
    const Shape s = arg_.shape();
    if constexpr (Split)
      return s.rank() == 2 && batch_ > 0 && dh_ > 0 ? Shape{batch_, s[0] / batch_, s[1] / dh_, dh_} : Shape{};
    else
      return s.rank() == 4 ? Shape{s[0] * s[1], s[2] * s[3]} : Shape{};
  }
  [[nodiscard]] decltype(auto) comm() const { return arg_.comm(); }
  [[nodiscard]] layout_mapping<layout_type> mapping() const {
    if constexpr (is_sharded_v<layout_type>) {
      std::vector<std::int64_t> ls;
      const std::int64_t unit = Split ? dh_ : (arg_.shape().rank() == 4 ? arg_.shape()[3] : 1);
      const auto from = arg_.mapping();  // kept: lengths() is a view into it
      for (auto l : from.lengths()) ls.push_back(Split ? (unit > 0 ? l / unit : 0) : l * unit);
      return layout_mapping<layout_type>(ls);
    } else {
      return {};
    }
  }
  [[nodiscard]] const E& arg() const noexcept { return arg_; }
  [[nodiscard]] std::int64_t batch() const noexcept { return batch_; }
  [[nodiscard]] std::int64_t dh() const noexcept { return dh_; }
  ///@}

private:
  E arg_;
  std::int64_t batch_, dh_;
};

/// (tokens, heads * dh) -> (batch, tokens / batch, heads, dh), lazy; Sharded<1>
/// lengths (multiples of dh) become Sharded<2> lengths in heads.
template <TensorExpr E>
auto split_heads(const E& x, std::int64_t batch, std::int64_t dh) {
  return Heads<E, true>(x, batch, dh);
}

/// (batch, seq, heads, dh) -> (batch * seq, heads * dh), lazy; split_heads' inverse.
template <TensorExpr E>
auto merge_heads(const E& y) {
  return Heads<E, false>(y, 0, 0);
}

/// Runs the node: a view of the same row-major elements, no copy; the backward
/// views the gradient back.
/// @throws invalid_argument unless the shapes divide (tokens by batch, columns
/// and each rank's length by dh) and x has the rank the function takes.
template <TensorExpr E, bool Split>
auto evaluate(const Heads<E, Split>& e) {
  using L = typename Heads<E, Split>::layout_type;
  auto x = eval(e.arg());
  const Shape s = x.shape();
  bool ok = Split ? (s.rank() == 2 && e.batch() > 0 && e.dh() > 0 && s[0] % e.batch() == 0 && s[1] % e.dh() == 0)
                  : s.rank() == 4;
  if constexpr (Split && is_sharded_v<typename E::layout_type>)
    for (auto l : x.lengths()) ok = ok && e.dh() > 0 && l % e.dh() == 0;
  if (!ok)
    throw invalid_argument(std::string("shardex::") + Heads<E, Split>::node_name + " on rank " +
                           std::to_string(x.rank()) + ": x is " + x.describe() +
                           (Split ? "; it must be (tokens, heads * dh) with the tokens a multiple of batch " +
                                        std::to_string(e.batch()) + " and the columns (and each rank's length) of dh " +
                                        std::to_string(e.dh())
                                  : std::string("; it must be (batch, seq, heads, dh)")));
  return detail::same_elements<L>(x, e.shape(), e.mapping(), Heads<E, Split>::node_name);
}

}  // namespace shardex
