// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `Adam<P...>`: Adam (Kingma & Ba) over parameters whose gradient has
/// their own layout (Invariant and Sharded, as for `sgd_step`). Its two
/// moments are tensors of each parameter's layout and lengths, so they are
/// sharded exactly like the parameters, and a checkpoint saves them the same
/// way (io/safetensors.hpp); `steps()` is the count the bias correction uses.
///
/// @code
/// Adam adam(AdamOptions{.lr = 1e-3}, A, a, B, b);   // moments made like A, a, B, b
/// backward(loss);
/// adam.step(A, a, B, b);                              // no communication
/// @endcode

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

#include "shardex/core/compile_errors.hpp"
#include "shardex/core/error.hpp"
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
};

/// @brief Adam over the parameters P... (host tensors whose gradient has
/// their own layout); the moments are laid out like the parameters.
template <class... P>
class Adam {
public:
  /// Zero moments shaped and laid out like `params`.
  explicit Adam(AdamOptions o, const P&... params) : o_(o), m_(zeros_like(params)...), v_(zeros_like(params)...) {}

  /// One update of every parameter from its gradient (a parameter without a
  /// gradient is left as it is), then zero_grad. No communication.
  void step(P&... params) {
    ++t_;
    step_each(std::index_sequence_for<P...>(), params...);
  }

  /// The hyper-parameters.
  [[nodiscard]] const AdamOptions& options() const noexcept { return o_; }
  /// The number of steps taken (the bias correction's t).
  [[nodiscard]] std::int64_t steps() const noexcept { return t_; }
  /// Sets the step count (a resumed run continues its bias correction).
  void set_steps(std::int64_t t) { t_ = t; }
  /// The first and second moments, in the parameters' order.
  [[nodiscard]] std::tuple<P...>& first_moments() noexcept { return m_; }
  /// The second moments (the first: first_moments()).
  [[nodiscard]] std::tuple<P...>& second_moments() noexcept { return v_; }

private:
  template <class X>
  static X zeros_like(const X& p) {
    static_assert(std::same_as<typename X::grad_type, X>, SHARDEX_ERR_SGD_PARAMETER_NOT_SELF_DUAL);
    static_assert(std::same_as<typename X::device_type, Host>, SHARDEX_ERR_ADAM_HOST_ONLY);
    p.require_valid("shardex::Adam");
    return X::zeroed(p.comm(), p.shape(), p.mapping());
  }
  template <std::size_t... I>
  void step_each(std::index_sequence<I...>, P&... params) {
    (update(params, std::get<I>(m_), std::get<I>(v_)), ...);
  }
  template <class X>
  void update(X& p, X& m, X& v) {
    if (!p.has_grad()) return;
    using T = typename X::value_type;
    const auto& g = p.grad();
    const double c1 = 1 - std::pow(o_.beta1, static_cast<double>(t_)),
                 c2 = 1 - std::pow(o_.beta2, static_cast<double>(t_));
    T* pd = p.data();
    T* md = m.data();
    T* vd = v.data();
    const T* gd = g.data();
    for (std::int64_t i = 0; i < p.size(); ++i) {
      md[i] = static_cast<T>(o_.beta1 * md[i] + (1 - o_.beta1) * gd[i]);
      vd[i] = static_cast<T>(o_.beta2 * vd[i] + (1 - o_.beta2) * gd[i] * gd[i]);
      pd[i] -= static_cast<T>(o_.lr * (md[i] / c1) / (std::sqrt(vd[i] / c2) + o_.eps));
    }
    p.zero_grad();
  }

  AdamOptions o_;
  std::tuple<P...> m_, v_;
  std::int64_t t_ = 0;
};

/// `Adam adam(options, A, b)` deduces Adam<decltype(A), decltype(b)>.
template <class... P>
Adam(AdamOptions, const P&...) -> Adam<P...>;

}  // namespace shardex
