// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `sgd_step(lr, params...)`: p -= lr * grad(p), then zero_grad, for
/// parameters whose gradient has their own layout (Invariant and Sharded). A
/// Replicated parameter's gradient is Partial (a pending sum), so updating
/// each copy with its own part would let the copies drift apart: make such a
/// parameter Invariant and `replicate` it where it is used; replicate's
/// backward all-reduces its gradient.

#include <concepts>

#include "shardex/core/compile_errors.hpp"
#include "shardex/tensor/tensor.hpp"

namespace shardex {

/// p -= lr * grad(p) (nothing without a gradient), then zero_grad; one
/// parameter of sgd_step.
template <Scalar T, LayoutTag L, class Dev>
void sgd_update(Tensor<T, L, Dev>& p, double lr) {
  static_assert(std::same_as<dual_t<L>, L>, SHARDEX_ERR_SGD_PARAMETER_NOT_SELF_DUAL);
  if (p.has_grad()) Dev::axpy(p.size(), static_cast<T>(-lr), p.grad().data(), p.data());
  p.zero_grad();
}

/// One step of plain gradient descent on every parameter; no communication.
template <class... P>
void sgd_step(double lr, P&... params) {
  (sgd_update(params, lr), ...);
}

}  // namespace shardex
