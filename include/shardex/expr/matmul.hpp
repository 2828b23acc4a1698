// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `matmul(a, b)`: the local product of 2-d tensors, with the layout
/// rules of rules::matmul (column-parallel R x S(1) -> S(1), row-parallel
/// S(1) x S(0) -> P, ...). Every rule is a local GEMM of the local blocks; the
/// backward is two more local GEMMs (da = g b^T, db = a^T g), whose layouts come
/// out as the duals by the same rules. All communication stays in transitions.
/// `matmul(a, transpose(b))` reads b as it is stored (the GEMM's transposed
/// operand): no transposed copy of b forward, none of its gradient backward
/// (GPT-2's output layer, h wte^T, with wte its largest tensor).

#include <algorithm>
#include <string>

#include "shardex/core/compile_errors.hpp"
#include "shardex/expr/expression.hpp"
#include "shardex/expr/rules.hpp"
#include "shardex/expr/transpose.hpp"

namespace shardex {

/// @brief The node of `matmul(a, b)` for 2-d a and b; its layout is rules::matmul's.
template <TensorExpr A, TensorExpr B>
class MatMul {
public:
  ///@{
  /// The TensorExpr interface: a's element type and device, rules::matmul's
  /// layout, the shape (a's rows, b's columns), a's communicator, and the
  /// mapping of the sharded operand the result keeps (b's column-parallel, a's
  /// row-sharded).
  using value_type = typename A::value_type;
  static_assert(Scalar<value_type>, SHARDEX_ERR_TOKEN_IDS_FLOAT_ONLY);
  using device_type = typename A::device_type;
  using layout_type = typename rules::matmul<typename A::layout_type, typename B::layout_type>::type;
  static_assert(std::same_as<typename B::value_type, value_type>, SHARDEX_ERR_MATMUL_MIXED_TYPES);

  /// The node of a x b (matmul() builds it).
  MatMul(A a, B b) : a_(std::move(a)), b_(std::move(b)) {}

  [[nodiscard]] Shape shape() const {
    const Shape sa = a_.shape(), sb = b_.shape();
    return Shape{sa.rank() > 0 ? sa[0] : 0, sb.rank() > 1 ? sb[1] : 0};
  }
  [[nodiscard]] decltype(auto) comm() const { return a_.comm(); }
  [[nodiscard]] layout_mapping<layout_type> mapping() const {
    if constexpr (rules::matmul<typename A::layout_type, typename B::layout_type>::column_parallel)
      return b_.mapping();
    else if constexpr (rules::matmul<typename A::layout_type, typename B::layout_type>::row_sharded)
      return a_.mapping();
    else
      return {};
  }
  ///@}
  ///@{
  /// The operands a and b.
  [[nodiscard]] const A& lhs() const noexcept { return a_; }
  [[nodiscard]] const B& rhs() const noexcept { return b_; }
  ///@}

private:
  A a_;
  B b_;
};

/// The 2-d product a x b, lazy; the layouts must fit a rule of rules::matmul
/// (a compile error names the pair otherwise).
template <TensorExpr A, TensorExpr B>
auto matmul(const A& a, const B& b) {
  return MatMul<A, B>(a, b);
}

namespace detail {

template <class X>
void check_2d(const X& x, const char* which, const std::string& where) {
  if (x.local_shape().rank() != 2)
    throw invalid_argument("shardex::matmul(a, b)" + where + ": " + which + " must be 2-d, but it is " + x.describe());
}

}  // namespace detail

/// Runs the node: one local GEMM, and the backward's two (da = g b^T, db = a^T g).
/// @throws invalid_argument if a or b is not 2-d or the contraction dims (or
/// their lengths) differ.
template <TensorExpr A, TensorExpr B>
auto evaluate(const MatMul<A, B>& e) {
  using T = typename MatMul<A, B>::value_type;
  using L = typename MatMul<A, B>::layout_type;
  using Dev = typename MatMul<A, B>::device_type;
  auto a = eval(e.lhs());
  auto b = eval(e.rhs());
  const std::string where = " on rank " + std::to_string(a.rank());
  detail::check_2d(a, "a", where);
  detail::check_2d(b, "b", where);
  // Row-parallel splits the contraction dim: compare the lengths, which every
  // rank knows, not the local extents, which can agree on some ranks only.
  bool same_split = true;
  std::string split;
  if constexpr (rules::matmul<typename A::layout_type, typename B::layout_type>::row_parallel) {
    same_split = std::ranges::equal(a.lengths(), b.lengths());
    split = " (the same global extent split with different lengths: " + to_string(a.lengths()) + " and " +
            to_string(b.lengths()) + ")";
  }
  if (a.shape()[1] != b.shape()[0] || !same_split || a.local_shape()[1] != b.local_shape()[0])
    throw invalid_argument("shardex::matmul(a, b)" + where + ": the contraction dims differ: a is " + a.describe() +
                           ", b is " + b.describe() + (a.shape()[1] == b.shape()[0] ? split : ""));
  const std::int64_t m = a.local_shape()[0], k = a.local_shape()[1], n = b.local_shape()[1];
  auto out = Tensor<T, L, Dev>::empty(a.comm(), e.shape(), e.mapping());  // gemm with beta 0 writes it whole
  Dev::gemm(GemmShape::plain(m, k, n), T(1), a.data(), b.data(), T(0), out.data());
  if (a.node() || b.node()) {
    std::vector<std::shared_ptr<autodiff::Node>> inputs;
    autodiff::add_input(inputs, a.node());
    autodiff::add_input(inputs, b.node());
    out.record("matmul", std::move(inputs), [a, b, m, k, n](const Tensor<T, dual_t<L>, Dev>& g) {
      if (a.node()) {  // da = g b^T, layout dual(A)
        a.node()->accumulate_product([&](T* da, T beta) {
          Dev::gemm(GemmShape::plain(m, n, k, false, true), T(1), g.data(), b.data(), beta, da);
        });
      }
      if (b.node()) {  // db = a^T g, layout dual(B)
        b.node()->accumulate_product([&](T* db, T beta) {
          Dev::gemm(GemmShape::plain(k, m, n, true, false), T(1), a.data(), g.data(), beta, db);
        });
      }
    });
  }
  return out;
}

/// Runs `matmul(a, transpose(b))` as one GEMM reading b (n x k, as stored)
/// transposed, and the backward's two (da = g b, db = g^T a, b's own layout):
/// the same values as transposing first, without the copy.
/// @throws invalid_argument as the general case.
template <TensorExpr A, TensorExpr E>
auto evaluate(const MatMul<A, Transpose<E>>& e) {
  using T = typename MatMul<A, Transpose<E>>::value_type;
  using L = typename MatMul<A, Transpose<E>>::layout_type;
  using Dev = typename MatMul<A, Transpose<E>>::device_type;
  auto a = eval(e.lhs());
  auto b = eval(e.rhs().arg());  // the stored operand: op(b) = b^T
  const std::string where = " on rank " + std::to_string(a.rank());
  detail::check_2d(a, "a", where);
  if (b.local_shape().rank() != 2)
    throw invalid_argument("shardex::matmul(a, transpose(b))" + where + ": b must be 2-d, but it is " + b.describe());
  bool same_split = true;
  std::string split;
  if constexpr (rules::matmul<typename A::layout_type, typename Transpose<E>::layout_type>::row_parallel) {
    same_split = std::ranges::equal(a.lengths(), b.lengths());
    split = " (the same global extent split with different lengths: " + to_string(a.lengths()) + " and " +
            to_string(b.lengths()) + ")";
  }
  if (a.shape()[1] != b.shape()[1] || !same_split || a.local_shape()[1] != b.local_shape()[1])
    throw invalid_argument("shardex::matmul(a, transpose(b))" + where + ": the contraction dims differ: a is " +
                           a.describe() + ", b (before the transpose) is " + b.describe() +
                           (a.shape()[1] == b.shape()[1] ? split : ""));
  const std::int64_t m = a.local_shape()[0], k = a.local_shape()[1], n = b.local_shape()[0];
  auto out = Tensor<T, L, Dev>::empty(a.comm(), e.shape(), e.mapping());  // gemm with beta 0 writes it whole
  Dev::gemm(GemmShape::plain(m, k, n, false, true), T(1), a.data(), b.data(), T(0), out.data());
  if (a.node() || b.node()) {
    std::vector<std::shared_ptr<autodiff::Node>> inputs;
    autodiff::add_input(inputs, a.node());
    autodiff::add_input(inputs, b.node());
    out.record("matmul", std::move(inputs), [a, b, m, k, n](const Tensor<T, dual_t<L>, Dev>& g) {
      if (a.node()) {  // da = g b (g: m x n, b: n x k), layout dual(A)
        a.node()->accumulate_product([&](T* da, T beta) {
          Dev::gemm(GemmShape::plain(m, n, k), T(1), g.data(), b.data(), beta, da);
        });
      }
      if (b.node()) {  // db = g^T a (n x k, b's own shape), layout dual(E)
        b.node()->accumulate_product([&](T* db, T beta) {
          Dev::gemm(GemmShape::plain(n, m, k, true, false), T(1), g.data(), a.data(), beta, db);
        });
      }
    });
  }
  return out;
}

}  // namespace shardex
