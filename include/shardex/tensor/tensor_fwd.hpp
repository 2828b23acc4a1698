// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Declaration of `Tensor` and of the element types it supports.

#include <concepts>

#include "shardex/layout/layouts.hpp"

namespace shardex {

/// The element types of tensors.
template <class T>
concept Scalar = std::same_as<T, float> || std::same_as<T, double>;

/// "float32" or "float64": the name of T in messages and files.
template <class T>
constexpr const char* dtype_name() {
  return std::same_as<T, float> ? "float32" : "float64";
}

struct Host;

/// `Device` defaults to Host.
template <Scalar T, LayoutTag L, class Device = Host>
class Tensor;

}  // namespace shardex
