// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The element update of Adam with decoupled weight decay (AdamW, as
/// torch.optim.AdamW computes it), written once for both devices: `Host`
/// loops over it and the Cuda kernel (src/cuda/kernels.cu) calls it, one
/// fused pass over a parameter, its gradient and its two moments.

#include <cstdint>

#include "shardex/core/host_device.hpp"

namespace shardex::optim {

/// The scalars of one Adam step: the learning rate, the moments' decays, eps,
/// the bias corrections c1 = 1 - beta1^t and c2 = 1 - beta2^t, the
/// decoupled weight decay's factor 1 - lr * weight_decay (1 when the
/// parameter is left out of it), and a factor of the gradient (a clipping's,
/// applied in the same pass instead of one more pass over the gradients).
struct AdamStep {
  ///@{
  /// See above.
  double lr, beta1, beta2, eps, c1, c2, shrink;
  double grad_scale = 1;
  ///@}
};

/// Element i, with g = grad_scale g: p *= shrink; m = beta1 m + (1 - beta1) g;
/// v = beta2 v + (1 - beta2) g^2; p -= lr (m / c1) / (sqrt(v / c2) + eps), in
/// double whatever T.
template <class T>
SHARDEX_HD inline void adam_update_at(T* p, T* m, T* v, const T* g, std::int64_t i, const AdamStep& s) {
  const double gi = s.grad_scale * g[i];
  p[i] = static_cast<T>(s.shrink * p[i]);
  m[i] = static_cast<T>(s.beta1 * m[i] + (1 - s.beta1) * gi);
  v[i] = static_cast<T>(s.beta2 * v[i] + (1 - s.beta2) * gi * gi);
  p[i] -= static_cast<T>(s.lr * (m[i] / s.c1) / (math::sqrt(v[i] / s.c2) + s.eps));
}

}  // namespace shardex::optim
