#pragma once
/// @file
/// @brief Scaling by a number: linear, so it keeps every layout (a Partial
/// tensor scaled is the scaled pending sum).

#include "shardex/device/tensor.hpp"

namespace shardex {

template <Scalar T, LayoutTag L, class Dev>
Tensor<T, L, Dev> scale(const Tensor<T, L, Dev>& x, T alpha) {
  auto y = Tensor<T, L, Dev>::zeros(x.comm(), x.shape(), x.mapping());
  Dev::scale(x.size(), alpha, x.data(), y.data());
  if (x.node())
    y.record("scale", {x.node()}, [in = x.node(), alpha](const Tensor<T, dual_t<L>, Dev>& g) {
      auto gx = g.clone();
      Dev::scale(gx.size(), alpha, gx.data(), gx.data());
      in->accumulate(gx);
    });
  return y;
}

template <Scalar T, LayoutTag L, class Dev>
Tensor<T, L, Dev> operator*(const Tensor<T, L, Dev>& x, T alpha) { return scale(x, alpha); }
template <Scalar T, LayoutTag L, class Dev>
Tensor<T, L, Dev> operator*(T alpha, const Tensor<T, L, Dev>& x) { return scale(x, alpha); }
template <Scalar T, LayoutTag L, class Dev>
Tensor<T, L, Dev> operator/(const Tensor<T, L, Dev>& x, T d) { return scale(x, T(1) / d); }

}  // namespace shardex
