// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `TensorExpr`: a tensor or a lazy expression over tensors.
///
/// **Concept `TensorExpr`.** Minimal complete definition: the types
/// `value_type`, `layout_type`, `device_type`, and `shape()`, `mapping()`,
/// `comm()` (what the result will be, known before anything runs).
/// Laws: `eval(e)` has layout `layout_type`, global shape `shape()` and mapping
/// `mapping()`; evaluating twice gives the same values.
/// Models: `Tensor` (a leaf: eval returns it), and the nodes of expr/:
/// `Redistribute`, `Elementwise`, `MatMul`, `Sum`, `Transpose`.
///
/// Nodes store their operands by value (tensors are shared handles, so this is
/// cheap and an `auto` expression never dangles). Evaluation is a separate
/// function per node (`evaluate`), as Eigen keeps evaluators apart from
/// expression types.

#include <concepts>
#include <type_traits>

#include "shardex/tensor/tensor.hpp"

namespace shardex {

namespace detail {
template <class E>
struct is_tensor : std::false_type {};
template <class T, class L, class D>
struct is_tensor<Tensor<T, L, D>> : std::true_type {};
}  // namespace detail

/// True for a `Tensor<T, L, Device>` (cv and references removed), false for a lazy node.
template <class E>
inline constexpr bool is_tensor_v = detail::is_tensor<std::remove_cvref_t<E>>::value;

/// What an expression takes: a Tensor, or a lazy node that will evaluate to
/// one. Minimal complete definition: `value_type`, `layout_type`,
/// `device_type`, `shape()` (the global shape), `mapping()`, `comm()`.
template <class E>
concept TensorExpr = requires(const E& e) {
  typename E::value_type;
  typename E::layout_type;
  typename E::device_type;
  { e.shape() } -> std::convertible_to<Shape>;
  e.mapping();
  e.comm();
};

/// A lazy node (a TensorExpr that is not a Tensor).
template <class E>
concept LazyExpr = TensorExpr<E> && !is_tensor_v<E>;

/// The tensor an expression evaluates to.
template <TensorExpr E>
using eval_t = Tensor<typename E::value_type, typename E::layout_type, typename E::device_type>;

/// Runs an expression: the simplified plan of its transitions, its local
/// operations (elementwise ones fused into one pass), and records the backward
/// of each step if any input is differentiable. A Tensor evaluates to itself.
template <TensorExpr E>
eval_t<E> eval(const E& e) {
  if constexpr (is_tensor_v<E>) {
    e.require_valid("shardex: a tensor used in an expression");
    return e;
  } else
    return evaluate(e);  // found by ADL next to each node type
}

/// backward(loss) of a lazy loss: evaluates it, then runs the backward pass.
template <LazyExpr E>
void backward(const E& loss) {
  backward(eval(loss));
}

}  // namespace shardex
