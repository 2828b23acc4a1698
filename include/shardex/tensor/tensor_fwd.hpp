#pragma once
/// @file
/// @brief Declaration of `Tensor` and of the element types it supports.

#include <concepts>

#include "shardex/layout/layouts.hpp"

namespace shardex {

/// The element types of tensors.
template <class T>
concept Scalar = std::same_as<T, float> || std::same_as<T, double>;

template <class T>
/// "float32" or "float64": the name of T in messages and files.
constexpr const char* dtype_name() {
  return std::same_as<T, float> ? "float32" : "float64";
}

struct Host;

template <Scalar T, LayoutTag L, class Device = Host>
/// The tensor (defined in tensor/tensor.hpp); Device defaults to Host.
class Tensor;

}  // namespace shardex
