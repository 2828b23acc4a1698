// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `SHARDEX_HD` marks the few functions compiled for both the CPU and
/// the GPU (the element-wise operations and the fused-pass interpreter), and
/// `shardex::math` gives them the math functions that exist on both sides.
/// g++ sees plain inline functions; nvcc sees `__host__ __device__` ones.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
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
/// (the minimax fit Eigen uses for its vectorized tanh: a few ulp), +-1 above
/// 7.9 (where tanh is +-1 to a few ulp). Branch free and inline, so that the
/// fused element-wise loops vectorize: glibc's tanhf (through expm1f) was a seventh
/// of a Megatron MLP step.
///
/// The clamp is an integer min and the choices masks on the bits, not float
/// selects: from `a > c ? c : a` g++ computes x * x ahead on the constant's
/// path (PRE), and from `tiny ? a : p / q` it sinks the division into the
/// other path; either leaves a float operation that may trap under a branch,
/// which only AVX-512's masks vectorize. On AVX2 the fused passes around a
/// gelu ran scalar, 10x slower (bench/RESULTS.md; test/vectorize pins it).
inline float rational_tanh(float a) {
  constexpr std::uint32_t sign_bit = 0x80000000u, infinity = 0x7f800000u, one = 0x3f800000u;
  // Above the cap tanh(a) is +-1 to a few ulp; below tiny it is a to float precision.
  constexpr std::uint32_t cap = std::bit_cast<std::uint32_t>(7.90531110763549805f);
  constexpr std::uint32_t tiny = std::bit_cast<std::uint32_t>(0.0004f);
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(a);
  // Non-negative floats order as their bits do (a NaN's above infinity's).
  // Masks of all ones: a returned as it is (tiny, or a NaN), +-1 (above the cap).
  const std::uint32_t magnitude = bits & ~sign_bit;
  const std::uint32_t keep_a = 0u - static_cast<std::uint32_t>((magnitude < tiny) | (magnitude > infinity));
  const std::uint32_t big = 0u - static_cast<std::uint32_t>(magnitude > cap);
  const float x = std::bit_cast<float>((bits & sign_bit) | std::min(magnitude, cap));  // no overflow in p below
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
  const std::uint32_t t = std::bit_cast<std::uint32_t>(p / q);
  return std::bit_cast<float>((bits & keep_a) | (((bits & sign_bit) | one) & big & ~keep_a) | (t & ~(keep_a | big)));
}

/// `c ? a : b`, on the host as masks on the bits: g++ can turn a conditional
/// operator into a branch and sink the float math that feeds one side under
/// it, which leaves the loop scalar where there are no masked operations
/// (rational_tanh above). In device code the conditional operator.
template <class T>
SHARDEX_HD inline T select(bool c, T a, T b) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
    const Bits m = Bits(0) - static_cast<Bits>(c);
    return std::bit_cast<T>((std::bit_cast<Bits>(a) & m) | (std::bit_cast<Bits>(b) & ~m));
  } else {
    return c ? a : b;
  }
#else
  return c ? a : b;
#endif
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
