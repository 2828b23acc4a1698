// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Eigen maps over host memory: the local math of host tensors.
// IWYU pragma: private

#include <cstdint>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#endif
#include <Eigen/Core>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace shardex::host {

/// n elements at a pointer as a flat Eigen array (Tensor::array()).
template <class T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
/// The same, read-only.
template <class T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

}  // namespace shardex::host
