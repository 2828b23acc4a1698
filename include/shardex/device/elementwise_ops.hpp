#pragma once
/// @file
/// @brief The element-wise operations: each one a small value type with its
/// value `f` and its local derivative `df` (the adjoint of one element),
/// as FastAD pairs a function with its backward map. They compile for the
/// CPU and the GPU alike (`SHARDEX_HD`), so the CUDA fused pass computes with
/// the very same definitions as the host pass; `code` names each one in a
/// fused program (device/fused_program.hpp).

#include "shardex/core/host_device.hpp"

namespace shardex::ops {

/// The operations of a fused program: one per op type below, plus `leaf`.
enum class OpCode : int { leaf, add, sub, mul, neg, scale, gelu, relu, tanh, exp };

// ---- binary ----------------------------------------------------------------
struct Add {
  static constexpr const char* name = "add";
  static constexpr OpCode code = OpCode::add;
  template <class T> SHARDEX_HD T f(T a, T b) const { return a + b; }
  template <class T> SHARDEX_HD void df(T, T, T g, T& ga, T& gb) const { ga += g; gb += g; }
};
struct Sub {
  static constexpr const char* name = "sub";
  static constexpr OpCode code = OpCode::sub;
  template <class T> SHARDEX_HD T f(T a, T b) const { return a - b; }
  template <class T> SHARDEX_HD void df(T, T, T g, T& ga, T& gb) const { ga += g; gb -= g; }
};
struct Mul {
  static constexpr const char* name = "mul";
  static constexpr OpCode code = OpCode::mul;
  template <class T> SHARDEX_HD T f(T a, T b) const { return a * b; }
  template <class T> SHARDEX_HD void df(T a, T b, T g, T& ga, T& gb) const { ga += g * b; gb += g * a; }
};

// ---- unary, linear -------------------------------------------------------------
struct Neg {
  static constexpr const char* name = "neg";
  static constexpr OpCode code = OpCode::neg;
  static constexpr bool linear = true;
  template <class T> SHARDEX_HD T f(T a) const { return -a; }
  template <class T> SHARDEX_HD void df(T, T g, T& ga) const { ga -= g; }
};
/// x * alpha (alpha held as double; exact for float and double alike).
struct Scale {
  static constexpr const char* name = "scale";
  static constexpr OpCode code = OpCode::scale;
  static constexpr bool linear = true;
  double alpha = 1.0;
  template <class T> SHARDEX_HD T f(T a) const { return static_cast<T>(alpha) * a; }
  template <class T> SHARDEX_HD void df(T, T g, T& ga) const { ga += static_cast<T>(alpha) * g; }
};

// ---- unary, non-linear ------------------------------------------------------------
/// GeLU, tanh approximation (as Megatron and GPT-2 use).
struct Gelu {
  static constexpr const char* name = "gelu";
  static constexpr OpCode code = OpCode::gelu;
  static constexpr bool linear = false;
  template <class T> SHARDEX_HD static T inner(T a) {
    const T c = static_cast<T>(0.7978845608028654);  // sqrt(2 / pi)
    return c * (a + static_cast<T>(0.044715) * a * a * a);
  }
  template <class T> SHARDEX_HD T f(T a) const { return static_cast<T>(0.5) * a * (T(1) + math::tanh(inner(a))); }
  template <class T> SHARDEX_HD void df(T a, T g, T& ga) const {
    const T c = static_cast<T>(0.7978845608028654);
    const T t = math::tanh(inner(a));
    const T dinner = c * (T(1) + static_cast<T>(3 * 0.044715) * a * a);
    ga += g * (static_cast<T>(0.5) * (T(1) + t) + static_cast<T>(0.5) * a * (T(1) - t * t) * dinner);
  }
};
struct Relu {
  static constexpr const char* name = "relu";
  static constexpr OpCode code = OpCode::relu;
  static constexpr bool linear = false;
  template <class T> SHARDEX_HD T f(T a) const { return a > T(0) ? a : T(0); }
  template <class T> SHARDEX_HD void df(T a, T g, T& ga) const { ga += a > T(0) ? g : T(0); }
};
struct Tanh {
  static constexpr const char* name = "tanh";
  static constexpr OpCode code = OpCode::tanh;
  static constexpr bool linear = false;
  template <class T> SHARDEX_HD T f(T a) const { return math::tanh(a); }
  template <class T> SHARDEX_HD void df(T a, T g, T& ga) const {
    const T t = math::tanh(a);
    ga += g * (T(1) - t * t);
  }
};
struct Exp {
  static constexpr const char* name = "exp";
  static constexpr OpCode code = OpCode::exp;
  static constexpr bool linear = false;
  template <class T> SHARDEX_HD T f(T a) const { return math::exp(a); }
  template <class T> SHARDEX_HD void df(T a, T g, T& ga) const { ga += g * math::exp(a); }
};

}  // namespace shardex::ops
