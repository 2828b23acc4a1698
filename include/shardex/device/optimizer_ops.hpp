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
/// With clear_grad the pass also leaves zeros in the gradient it has read,
/// for the next backward to add into (Tensor::zero_grad_keeping_storage).
struct AdamStep {
  ///@{
  /// See above.
  double lr, beta1, beta2, eps, c1, c2, shrink;
  double grad_scale = 1;
  bool clear_grad = false;
  ///@}
};

/// An AdamStep's scalars folded once per pass and rounded to T, so that the
/// element update runs in T's arithmetic, as torch.optim.AdamW's does: in
/// double for a float parameter, each element's two divisions and square root
/// were double-width vector instructions and the host's pass ran at a third of
/// its memory bandwidth (bench/RESULTS.md, "AdamW in the parameter's type").
template <class T>
struct AdamTerms {
  ///@{
  /// beta1, 1 - beta1, beta2, 1 - beta2, eps, the decay's factor, the
  /// gradient's factor, lr / c1 (torch's step size) and 1 / sqrt(c2).
  T beta1, one_minus_beta1, beta2, one_minus_beta2, eps, shrink, grad_scale, step_size, inv_sqrt_c2;
  ///@}
  /// The terms of step `s`, in T.
  SHARDEX_HD explicit AdamTerms(const AdamStep& s)
      : beta1(static_cast<T>(s.beta1)),
        one_minus_beta1(static_cast<T>(1 - s.beta1)),
        beta2(static_cast<T>(s.beta2)),
        one_minus_beta2(static_cast<T>(1 - s.beta2)),
        eps(static_cast<T>(s.eps)),
        shrink(static_cast<T>(s.shrink)),
        grad_scale(static_cast<T>(s.grad_scale)),
        step_size(static_cast<T>(s.lr / s.c1)),
        inv_sqrt_c2(static_cast<T>(1 / math::sqrt(s.c2))) {}
};

/// Element i, with g = grad_scale g, in T: m = beta1 m + (1 - beta1) g;
/// v = beta2 v + (1 - beta2) g^2; p = shrink p - (lr / c1) m / (sqrt(v) (1 /
/// sqrt(c2)) + eps): torch.optim.AdamW's formula, within a few ulp of its
/// float results (torch updates m by lerp and divides by sqrt(c2); here one
/// division an element, not two).
template <class T>
SHARDEX_HD inline void adam_update_at(T* p, T* m, T* v, const T* g, std::int64_t i, const AdamTerms<T>& k) {
  const T gi = k.grad_scale * g[i];
  const T mi = k.beta1 * m[i] + k.one_minus_beta1 * gi;
  const T vi = k.beta2 * v[i] + k.one_minus_beta2 * (gi * gi);
  m[i] = mi;
  v[i] = vi;
  p[i] = k.shrink * p[i] - k.step_size * (mi / (math::sqrt(vi) * k.inv_sqrt_c2 + k.eps));
}

/// adam_update_at, then zeros in the gradient's element (AdamStep::clear_grad).
template <class T>
SHARDEX_HD inline void adam_update_clearing_at(T* p, T* m, T* v, T* g, std::int64_t i, const AdamTerms<T>& k) {
  adam_update_at(p, m, v, g, i, k);
  g[i] = T(0);
}

}  // namespace shardex::optim
