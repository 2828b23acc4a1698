#pragma once
/// @file
/// @brief The `Host` device: tensors in host memory, local math through Eigen,
/// communication through MPI. Also the device-side primitives every lowering
/// plan needs (allocate, zero, copy a block of a strided array); the Cuda
/// device provides the same set with kernels.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "shardex/backend/mpi/communicator.hpp"
#include "shardex/device/host/eigen.hpp"

namespace shardex {

struct Host {
  using communicator = mpi::Communicator;
  static constexpr const char* name = "host";

  /// Zero-initialized storage of n elements.
  template <class T>
  static std::shared_ptr<T[]> allocate(std::int64_t n) {
    return std::make_shared<T[]>(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)));
  }

  template <class T>
  static void fill(T* p, std::int64_t n, T v) {
    std::fill(p, p + n, v);
  }

  /// y += alpha * x over n elements.
  template <class T>
  static void axpy(std::int64_t n, T alpha, const T* x, T* y) {
    for (std::int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
  }

  /// y = alpha * x over n elements (y may be x).
  template <class T>
  static void scale(std::int64_t n, T alpha, const T* x, T* y) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = alpha * x[i];
  }

  /// The sum of n elements (pairwise through Eigen's reduction).
  template <class T>
  static T sum(const T* x, std::int64_t n);

  /// Copies `len` rows of an (outer, *, inner) array: src rows [src_off, src_off+len)
  /// of a source with `src_extent` rows to dst rows [dst_off, ...) of a destination
  /// with `dst_extent` rows. One memcpy when the block is contiguous in both.
  template <class T>
  static void copy_block(const T* src, std::int64_t src_extent, std::int64_t src_off, T* dst, std::int64_t dst_extent,
                         std::int64_t dst_off, std::int64_t outer, std::int64_t len, std::int64_t inner) {
    const std::int64_t row = len * inner;
    if (row == 0 || outer == 0) return;
    if (outer == 1 || (src_extent == len && dst_extent == len)) {
      std::memcpy(dst + dst_off * inner, src + src_off * inner, static_cast<std::size_t>(outer * row) * sizeof(T));
      return;
    }
    for (std::int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + (o * dst_extent + dst_off) * inner, src + (o * src_extent + src_off) * inner,
                  static_cast<std::size_t>(row) * sizeof(T));
  }
};

template <class T>
T Host::sum(const T* x, std::int64_t n) {
  return n == 0 ? T(0) : host::ConstArrayMap<T>(x, static_cast<Eigen::Index>(n)).sum();
}

}  // namespace shardex
