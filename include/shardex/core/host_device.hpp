#pragma once
/// @file
/// @brief `SHARDEX_HD` marks the few functions compiled for both the CPU and
/// the GPU (the element-wise operations and the fused-pass interpreter), and
/// `shardex::math` gives them the math functions that exist on both sides.
/// g++ sees plain inline functions; nvcc sees `__host__ __device__` ones.

#include <cmath>
#include <type_traits>

#if !defined(__CUDACC__)
#include <Eigen/Core>  // Eigen never meets nvcc (see device/cuda/)
#endif

#if defined(__CUDACC__)
#define SHARDEX_HD __host__ __device__
#else
#define SHARDEX_HD
#endif

namespace shardex::math {

// In device code std::tanh is a host function; CUDA's overloads of ::tanh and
// ::tanhf are the device ones. On the host, std:: is the right choice.
// On the host, float takes Eigen's rational approximation (a few ulp, branch
// free): glibc's tanhf, through expm1f, was a seventh of a Megatron MLP step.
template <class T>
SHARDEX_HD inline T tanh(T a) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return ::tanhf(a);
  else return ::tanh(a);
#elif !defined(__CUDACC__)
  if constexpr (std::is_same_v<T, float>) return Eigen::internal::generic_fast_tanh_float(a);
  else return std::tanh(a);
#else
  return std::tanh(a);
#endif
}

template <class T>
SHARDEX_HD inline T exp(T a) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return ::expf(a);
  else return ::exp(a);
#else
  return std::exp(a);
#endif
}

}  // namespace shardex::math
