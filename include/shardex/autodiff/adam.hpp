// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `Adam<P...>`: Adam (Kingma & Ba) over parameters whose gradient has
/// their own layout (Invariant and Sharded, as for `sgd_step`), with
/// decoupled weight decay as `torch.optim.AdamW` computes it (AdamOptions::
/// weight_decay; parameters wrapped in `no_weight_decay(...)`, biases and
/// norms as a rule, are left out of it). Its two moments are tensors of each
/// parameter's layout and lengths, so they are sharded exactly like the
/// parameters, and a checkpoint saves them the same way (io/safetensors.hpp);
/// `steps()` is the count the bias correction uses.
///
/// @code
/// Adam adam(AdamOptions{.lr = 1e-3, .weight_decay = 0.1}, A, no_weight_decay(a), B, no_weight_decay(b));
/// backward(loss);
/// adam.set_lr(schedule(adam.steps()));   // e.g. a WarmupCosine
/// adam.step(A, a, B, b);                 // no communication
/// @endcode

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

#include "shardex/core/compile_errors.hpp"
#include "shardex/core/error.hpp"
#include "shardex/device/optimizer_ops.hpp"
#include "shardex/tensor/tensor.hpp"

namespace shardex {

/// Adam's hyper-parameters (designated initializers: `{.lr = 1e-3}`).
struct AdamOptions {
  /// The learning rate.
  double lr = 1e-3;
  /// The decay of the first moment (the mean of the gradients).
  double beta1 = 0.9;
  /// The decay of the second moment (the mean of their squares).
  double beta2 = 0.999;
  /// Added to the second moment's root, against a division by zero.
  double eps = 1e-8;
  /// Decoupled weight decay (AdamW): each step first multiplies a parameter
  /// by 1 - lr * weight_decay, as torch.optim.AdamW does; 0 is plain Adam.
  double weight_decay = 0;
};

/// A parameter that Adam leaves out of the weight decay (a bias, a norm's
/// weight): `Adam adam(options, A, no_weight_decay(a))`.
template <class X>
struct NoWeightDecay {
  /// The parameter.
  const X& param;
};
/// Marks `p` as left out of the weight decay, at Adam's construction.
template <class X>
NoWeightDecay<X> no_weight_decay(const X& p) {
  return {p};
}

namespace detail {
template <class X>
struct unwrap_decay {
  using type = X;
};
template <class X>
struct unwrap_decay<NoWeightDecay<X>> {
  using type = X;
};
template <class X>
const X& param_of(const X& p) {
  return p;
}
template <class X>
const X& param_of(const NoWeightDecay<X>& p) {
  return p.param;
}
template <class X>
constexpr bool decays(const X&) {
  return true;
}
template <class X>
constexpr bool decays(const NoWeightDecay<X>&) {
  return false;
}
}  // namespace detail

/// One fused Adam pass (step `s`) over parameter p with its gradient and
/// moments m and v, then zero_grad: a gradient nobody else holds is left zero
/// by the same pass (AdamStep::clear_grad) and its storage kept for the next
/// backward (Tensor::zero_grad_keeping_storage); one held elsewhere is read
/// and dropped. Adam::step's pass, for optimizers that keep their moments
/// otherwise (examples/gpt2/train.hpp).
template <class X>
void adam_pass(const X& p, const X& m, const X& v, optim::AdamStep s) {
  s.clear_grad = p.grad_storage_alone();
  X::device_type::adam_update(p.data(), m.data(), v.data(), p.grad().data(), p.size(), s);
  s.clear_grad ? p.zero_grad_keeping_storage() : p.zero_grad();
}

/// @brief Adam over the parameters P... (tensors on any device whose gradient
/// has their own layout); the moments are laid out like the parameters, on
/// the parameters' device, and each step is one fused pass per parameter
/// (device/optimizer_ops.hpp, for the host loop and the CUDA kernel alike).
template <class... P>
class Adam {
public:
  /// Zero moments shaped and laid out like `params` (each a parameter, or a
  /// parameter wrapped in no_weight_decay).
  template <class... A>
  requires(sizeof...(A) == sizeof...(P)) explicit Adam(AdamOptions o, const A&... params)
      : o_(checked(o)),
        m_(zeros_like(detail::param_of(params))...),
        v_(zeros_like(detail::param_of(params))...),
        decays_{detail::decays(params)...} {}

  /// One update of every parameter from its gradient (a parameter without a
  /// gradient is left as it is), then zero_grad: a gradient held by nobody
  /// else is left zero by the same pass and kept for the next backward
  /// (Tensor::zero_grad_keeping_storage). No communication.
  void step(P&... params) {
    ++t_;
    step_each(std::index_sequence_for<P...>(), params...);
  }

  /// The hyper-parameters.
  [[nodiscard]] const AdamOptions& options() const noexcept { return o_; }
  /// The learning rate of the next steps (a schedule sets it before each step).
  void set_lr(double lr) {
    check_lr(lr, "shardex::Adam::set_lr");
    o_.lr = lr;
  }
  /// Whether parameter i (in the constructor's order) takes the weight decay.
  [[nodiscard]] bool decays(std::size_t i) const { return decays_.at(i); }
  /// The number of steps taken (the bias correction's t).
  [[nodiscard]] std::int64_t steps() const noexcept { return t_; }
  /// Sets the step count (a resumed run continues its bias correction).
  void set_steps(std::int64_t t) { t_ = t; }
  /// The first and second moments, in the parameters' order.
  [[nodiscard]] std::tuple<P...>& first_moments() noexcept { return m_; }
  /// The second moments (the first: first_moments()).
  [[nodiscard]] std::tuple<P...>& second_moments() noexcept { return v_; }

private:
  static void check_lr(double lr, const char* who) {
    if (!std::isfinite(lr) || lr < 0)
      throw invalid_argument(std::string(who) + ": the learning rate must be finite and >= 0, not " +
                             std::to_string(lr));
  }
  static AdamOptions checked(const AdamOptions& o) {
    const auto bad = [](const char* what, double v) {
      return invalid_argument(std::string("shardex::Adam: ") + what + " " + std::to_string(v));
    };
    check_lr(o.lr, "shardex::Adam");
    if (!(o.beta1 >= 0 && o.beta1 < 1)) throw bad("beta1 must be in [0, 1), not", o.beta1);
    if (!(o.beta2 >= 0 && o.beta2 < 1)) throw bad("beta2 must be in [0, 1), not", o.beta2);
    if (!(o.eps > 0) || !std::isfinite(o.eps)) throw bad("eps must be finite and > 0, not", o.eps);
    if (!std::isfinite(o.weight_decay) || o.weight_decay < 0)
      throw bad("weight_decay must be finite and >= 0, not", o.weight_decay);
    return o;
  }
  template <class X>
  static X zeros_like(const X& p) {
    static_assert(std::same_as<typename X::grad_type, X>, SHARDEX_ERR_SGD_PARAMETER_NOT_SELF_DUAL);
    p.require_valid("shardex::Adam");
    return X::zeroed(p.comm(), p.shape(), p.mapping());
  }
  template <std::size_t... I>
  void step_each(std::index_sequence<I...>, P&... params) {
    (update(params, std::get<I>(m_), std::get<I>(v_), decays_[I]), ...);
  }
  template <class X>
  void update(X& p, X& m, X& v, bool decay) {
    if (!p.has_grad()) return;
    adam_pass(p, m, v,
              {.lr = o_.lr,
               .beta1 = o_.beta1,
               .beta2 = o_.beta2,
               .eps = o_.eps,
               .c1 = 1 - std::pow(o_.beta1, static_cast<double>(t_)),
               .c2 = 1 - std::pow(o_.beta2, static_cast<double>(t_)),
               .shrink = decay ? 1 - o_.lr * o_.weight_decay : 1.0});
  }

  AdamOptions o_;
  std::tuple<P...> m_, v_;
  std::array<bool, sizeof...(P)> decays_;
  std::int64_t t_ = 0;
};

/// `Adam adam(options, A, no_weight_decay(b))` deduces Adam<decltype(A), decltype(b)>.
template <class... A>
Adam(AdamOptions, const A&...) -> Adam<typename detail::unwrap_decay<A>::type...>;

}  // namespace shardex
