// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The element-wise operations: each one a small value type with its
/// value `f` and its local derivative `df` (the adjoint of one element),
/// as FastAD pairs a function with its backward map. They compile for the
/// CPU and the GPU alike (`SHARDEX_HD`), so the CUDA fused pass computes with
/// the very same definitions as the host pass; `code` names each one in a
/// fused program (device/fused_program.hpp). The list of them, `all_ops` at
/// the end, is the one place an operation is registered: the op codes and
/// both interpreters of a fused program are generated from it.

#include <type_traits>

#include "shardex/core/compile_errors.hpp"
#include "shardex/core/host_device.hpp"

namespace shardex::ops {

// ---- binary ----------------------------------------------------------------
/// a + b.
struct Add {
  ///@{
  /// The protocol of an operation: `arity` (its operand count); `name`, in
  /// traces and messages; `f`, the value; `df`, which adds the gradient g
  /// times each partial derivative to the operands' adjoints (ga, gb). A unary
  /// operation also says whether it is `linear` (it then applies to a Partial
  /// tensor part by part).
  static constexpr int arity = 2;
  static constexpr const char* name = "add";
  template <class T>
  SHARDEX_HD T f(T a, T b) const {
    return a + b;
  }
  template <class T>
  SHARDEX_HD void df(T, T, T g, T& ga, T& gb) const {
    ga += g;
    gb += g;
  }
  ///@}
};
/// a - b.
struct Sub {
  ///@{
  /// The operation protocol (see ops::Add).
  static constexpr int arity = 2;
  static constexpr const char* name = "sub";
  template <class T>
  SHARDEX_HD T f(T a, T b) const {
    return a - b;
  }
  template <class T>
  SHARDEX_HD void df(T, T, T g, T& ga, T& gb) const {
    ga += g;
    gb -= g;
  }
  ///@}
};
/// a * b.
struct Mul {
  ///@{
  /// The operation protocol (see ops::Add).
  static constexpr int arity = 2;
  static constexpr const char* name = "mul";
  template <class T>
  SHARDEX_HD T f(T a, T b) const {
    return a * b;
  }
  template <class T>
  SHARDEX_HD void df(T a, T b, T g, T& ga, T& gb) const {
    ga += g * b;
    gb += g * a;
  }
  ///@}
};

/// a / b. Its layout rule (rules::div) refuses a Partial divisor: 1 / (sum of
/// parts) is not the sum of anything.
struct Div {
  ///@{
  /// The operation protocol (see ops::Add).
  static constexpr int arity = 2;
  static constexpr const char* name = "div";
  template <class T>
  SHARDEX_HD T f(T a, T b) const {
    return a / b;
  }
  template <class T>
  SHARDEX_HD void df(T a, T b, T g, T& ga, T& gb) const {
    const T q = g / b;
    ga += q;
    gb -= q * (a / b);
  }
  ///@}
};

// ---- unary, linear -------------------------------------------------------------
/// -a.
struct Neg {
  ///@{
  /// The operation protocol (see ops::Add).
  static constexpr int arity = 1;
  static constexpr const char* name = "neg";
  static constexpr bool linear = true;
  template <class T>
  SHARDEX_HD T f(T a) const {
    return -a;
  }
  template <class T>
  SHARDEX_HD void df(T, T g, T& ga) const {
    ga -= g;
  }
  ///@}
};
/// x * alpha (alpha held as double; exact for float and double alike).
struct Scale {
  ///@{
  /// The operation protocol (see ops::Add); `alpha`, the factor.
  static constexpr int arity = 1;
  static constexpr const char* name = "scale";
  static constexpr bool linear = true;
  double alpha = 1.0;
  template <class T>
  SHARDEX_HD T f(T a) const {
    return static_cast<T>(alpha) * a;
  }
  template <class T>
  SHARDEX_HD void df(T, T g, T& ga) const {
    ga += static_cast<T>(alpha) * g;
  }
  ///@}
};

// ---- unary, affine ----------------------------------------------------------------
/// x + c (c held as double). Not linear: on a Partial tensor it would add c
/// once per rank, so its rule (rules::shift) refuses Partial.
struct Shift {
  ///@{
  /// The operation protocol (see ops::Add); `c`, the constant added.
  static constexpr int arity = 1;
  static constexpr const char* name = "shift";
  static constexpr bool linear = false;
  double c = 0.0;
  template <class T>
  SHARDEX_HD T f(T a) const {
    return a + static_cast<T>(c);
  }
  template <class T>
  SHARDEX_HD void df(T, T g, T& ga) const {
    ga += g;
  }
  ///@}
};

// ---- unary, non-linear ------------------------------------------------------------
/// GeLU, tanh approximation (as Megatron and GPT-2 use).
struct Gelu {
  ///@{
  /// The operation protocol (see ops::Add); `inner(a)` = sqrt(2 / pi) (a + 0.044715 a^3).
  static constexpr int arity = 1;
  static constexpr const char* name = "gelu";
  static constexpr bool linear = false;
  template <class T>
  SHARDEX_HD static T inner(T a) {
    const T c = static_cast<T>(0.7978845608028654);  // sqrt(2 / pi)
    return c * (a + static_cast<T>(0.044715) * a * a * a);
  }
  template <class T>
  SHARDEX_HD T f(T a) const {
    return static_cast<T>(0.5) * a * (T(1) + math::tanh(inner(a)));
  }
  template <class T>
  SHARDEX_HD void df(T a, T g, T& ga) const {
    const T c = static_cast<T>(0.7978845608028654);
    const T t = math::tanh(inner(a));
    const T dinner = c * (T(1) + static_cast<T>(3 * 0.044715) * a * a);
    ga += g * (static_cast<T>(0.5) * (T(1) + t) + static_cast<T>(0.5) * a * (T(1) - t * t) * dinner);
  }
  ///@}
};
/// max(a, 0); its derivative at 0 is taken as 0.
struct Relu {
  ///@{
  /// The operation protocol (see ops::Add).
  static constexpr int arity = 1;
  static constexpr const char* name = "relu";
  static constexpr bool linear = false;
  template <class T>
  SHARDEX_HD T f(T a) const {
    return math::select(a > T(0), a, T(0));
  }
  template <class T>
  SHARDEX_HD void df(T a, T g, T& ga) const {
    ga += math::select(a > T(0), g, T(0));
  }
  ///@}
};
/// tanh(a), through math::tanh.
struct Tanh {
  ///@{
  /// The operation protocol (see ops::Add).
  static constexpr int arity = 1;
  static constexpr const char* name = "tanh";
  static constexpr bool linear = false;
  template <class T>
  SHARDEX_HD T f(T a) const {
    return math::tanh(a);
  }
  template <class T>
  SHARDEX_HD void df(T a, T g, T& ga) const {
    const T t = math::tanh(a);
    ga += g * (T(1) - t * t);
  }
  ///@}
};
/// e^a.
struct Exp {
  ///@{
  /// The operation protocol (see ops::Add).
  static constexpr int arity = 1;
  static constexpr const char* name = "exp";
  static constexpr bool linear = false;
  template <class T>
  SHARDEX_HD T f(T a) const {
    return math::exp(a);
  }
  template <class T>
  SHARDEX_HD void df(T a, T g, T& ga) const {
    ga += g * math::exp(a);
  }
  ///@}
};

/// The square root.
struct Sqrt {
  ///@{
  /// The operation protocol (see ops::Add).
  static constexpr int arity = 1;
  static constexpr const char* name = "sqrt";
  static constexpr bool linear = false;
  template <class T>
  SHARDEX_HD T f(T a) const {
    return math::sqrt(a);
  }
  template <class T>
  SHARDEX_HD void df(T a, T g, T& ga) const {
    ga += g * static_cast<T>(0.5) / math::sqrt(a);
  }
  ///@}
};
/// 1 / sqrt(a) (a layer norm's scale).
struct Rsqrt {
  ///@{
  /// The operation protocol (see ops::Add).
  static constexpr int arity = 1;
  static constexpr const char* name = "rsqrt";
  static constexpr bool linear = false;
  template <class T>
  SHARDEX_HD T f(T a) const {
    return T(1) / math::sqrt(a);
  }
  template <class T>
  SHARDEX_HD void df(T a, T g, T& ga) const {
    const T r = T(1) / math::sqrt(a);
    ga -= g * static_cast<T>(0.5) * r * r * r;
  }
  ///@}
};
/// The natural logarithm.
struct Log {
  ///@{
  /// The operation protocol (see ops::Add).
  static constexpr int arity = 1;
  static constexpr const char* name = "log";
  static constexpr bool linear = false;
  template <class T>
  SHARDEX_HD T f(T a) const {
    return math::log(a);
  }
  template <class T>
  SHARDEX_HD void df(T a, T g, T& ga) const {
    ga += g / a;
  }
  ///@}
};
/// 1 / (1 + exp(-a)), from exp of a non-positive number only (no overflow).
struct Sigmoid {
  ///@{
  /// The operation protocol (see ops::Add); `value(a)` is the sigmoid, shared by f and df.
  static constexpr int arity = 1;
  static constexpr const char* name = "sigmoid";
  static constexpr bool linear = false;
  template <class T>
  SHARDEX_HD static T value(T a) {
    const T e = math::exp(a > T(0) ? -a : a);
    return a > T(0) ? T(1) / (T(1) + e) : e / (T(1) + e);
  }
  template <class T>
  SHARDEX_HD T f(T a) const {
    return value(a);
  }
  template <class T>
  SHARDEX_HD void df(T a, T g, T& ga) const {
    const T s = value(a);
    ga += g * s * (T(1) - s);
  }
  ///@}
};
/// SiLU (swish), a * sigmoid(a): the gate of SwiGLU (LLaMA's MLP).
struct Silu {
  ///@{
  /// The operation protocol (see ops::Add).
  static constexpr int arity = 1;
  static constexpr const char* name = "silu";
  static constexpr bool linear = false;
  template <class T>
  SHARDEX_HD T f(T a) const {
    return a * Sigmoid::value(a);
  }
  template <class T>
  SHARDEX_HD void df(T a, T g, T& ga) const {
    const T s = Sigmoid::value(a);
    ga += g * (s + a * s * (T(1) - s));
  }
  ///@}
};

// ---- the list -------------------------------------------------------------------------
/// A list of operation types.
template <class... Ops>
struct op_list {
  /// How many operations the list holds.
  static constexpr int size = sizeof...(Ops);
};
/// Every element-wise operation. A new one is a struct above plus its name here.
using all_ops = op_list<Add, Sub, Mul, Div, Neg, Scale, Shift, Gelu, Relu, Tanh, Exp, Sqrt, Rsqrt, Log, Sigmoid, Silu>;

/// An instruction's operation in a fused program: 0 reads a leaf, 1 + i runs
/// the i-th operation of `all_ops`.
using OpCode = int;
/// The code of the instruction that reads a leaf.
inline constexpr OpCode leaf_code = 0;

namespace detail {
template <class Op, class... Ops>
constexpr OpCode code_in(op_list<Ops...>) {
  OpCode code = 0, next = 1;
  ((code = std::is_same_v<Op, Ops> ? next : code, ++next), ...);
  return code;
}
}  // namespace detail

/// The code of operation Op: 1 + its index in all_ops.
template <class Op>
inline constexpr OpCode code_of = detail::code_in<Op>(all_ops{});
static_assert(code_of<Add> == 1 && code_of<Silu> == all_ops::size, SHARDEX_ERR_OP_CODES_FOLLOW_LIST);

/// Whether an operation carries a constant (Scale's factor `alpha`, Shift's
/// addend `c`): a fused program keeps it in the instruction
/// (FusedInstr::constant), so that the device pass computes with it.
template <class Op>
concept has_constant = requires(const Op& op) {
  op.alpha;
}
|| requires(const Op& op) { op.c; };

/// The constant of an operation that has one (see has_constant).
template <has_constant Op>
constexpr double constant_of(const Op& op) {
  if constexpr (requires { op.alpha; })
    return op.alpha;
  else
    return op.c;
}

namespace detail {
// An operation's state must fit the instruction: none, or one double constant.
template <class... Ops>
constexpr bool fits_an_instruction(op_list<Ops...>) {
  return ((std::is_empty_v<Ops> || (has_constant<Ops> && sizeof(Ops) == sizeof(double))) && ...);
}
}  // namespace detail
static_assert(detail::fits_an_instruction(all_ops{}), SHARDEX_ERR_OP_STATE_NOT_IN_INSTRUCTION);

}  // namespace shardex::ops
