// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `SHARDEX_HD` marks the few functions compiled for both the CPU and
/// the GPU (the element-wise operations and the fused-pass interpreter), and
/// `shardex::math` gives them the math functions that exist on both sides.
/// g++ sees plain inline functions; nvcc sees `__host__ __device__` ones.

#include <cmath>
#include <type_traits>

#if defined(__CUDACC__)
#define SHARDEX_HD __host__ __device__
#else
/// `__host__ __device__` under nvcc (the function compiles for both), nothing
/// under a host compiler.
#define SHARDEX_HD
#endif

/// Marks a loop whose iterations are independent for vectorization; the
/// build defines SHARDEX_OPENMP_SIMD (with -fopenmp-simd: no OpenMP runtime)
/// where the compiler takes `#pragma omp simd`.
#if defined(SHARDEX_OPENMP_SIMD) && !defined(__CUDACC__)
#define SHARDEX_SIMD _Pragma("omp simd")
#define SHARDEX_PRAGMA(text) _Pragma(#text)
#else
#define SHARDEX_SIMD
/// The pragma of unquoted `text` where the build vectorizes such loops
/// (SHARDEX_OPENMP_SIMD), else nothing.
#define SHARDEX_PRAGMA(text)
#endif

namespace shardex::math {

// In device code std::tanh is a host function; CUDA's overloads of ::tanh and
// ::tanhf are the device ones. On the host, std:: is the right choice.
/// tanh of a float as a rational function, odd degree 13 over even degree 6
/// (the minimax fit Eigen uses for its vectorized tanh: a few ulp), clamped
/// where tanh rounds to +-1. Branch free and inline, so that the fused
/// element-wise loops vectorize: glibc's tanhf (through expm1f) was a seventh
/// of a Megatron MLP step.
inline float rational_tanh(float a) {
  const float x =
      a < -7.90531110763549805f ? -7.90531110763549805f : (a > 7.90531110763549805f ? 7.90531110763549805f : a);
  const float x2 = x * x;
  float p = x2 * -2.76076847742355e-16f + 2.00018790482477e-13f;
  p = x2 * p + -8.60467152213735e-11f;
  p = x2 * p + 5.12229709037114e-08f;
  p = x2 * p + 1.48572235717979e-05f;
  p = x2 * p + 6.37261928875436e-04f;
  p = x2 * p + 4.89352455891786e-03f;
  p = x * p;
  float q = x2 * 1.19825839466702e-06f + 1.18534705686654e-04f;
  q = x2 * q + 2.26843463243900e-03f;
  q = x2 * q + 4.89352518554385e-03f;
  const float t = p / q;
  return (a < 0.0004f && a > -0.0004f) ? a : t;  // tiny |a|: tanh(a) = a to float precision
}

/// tanh on either side: rational_tanh for a float on the host (vectorizes),
/// std::tanh for a double, CUDA's tanhf / tanh in device code.
template <class T>
SHARDEX_HD inline T tanh(T a) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>)
    return ::tanhf(a);
  else
    return ::tanh(a);
#elif !defined(__CUDACC__)
  if constexpr (std::is_same_v<T, float>)
    return rational_tanh(a);
  else
    return std::tanh(a);
#else
  return std::tanh(a);
#endif
}

// exp, sqrt, log: CUDA's float and double overloads in device code (std:: is
// host-only there), std:: on the host.
#if defined(__CUDA_ARCH__)
#define SHARDEX_MATH_FUNCTION(fn)           \
  template <class T>                        \
  SHARDEX_HD inline T fn(T a) {             \
    if constexpr (std::is_same_v<T, float>) \
      return ::fn##f(a);                    \
    else                                    \
      return ::fn(a);                       \
  }
#else
/// Defines `math::fn` for exp, sqrt and log (undefined after use).
#define SHARDEX_MATH_FUNCTION(fn) \
  template <class T>              \
  SHARDEX_HD inline T fn(T a) {   \
    return std::fn(a);            \
  }
#endif
SHARDEX_MATH_FUNCTION(exp)
SHARDEX_MATH_FUNCTION(sqrt)
SHARDEX_MATH_FUNCTION(log)
#undef SHARDEX_MATH_FUNCTION

}  // namespace shardex::math
