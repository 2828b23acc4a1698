// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Declaration of `Tensor` and of the element types it supports.

#include <concepts>
#include <cstdint>

#include "shardex/layout/layouts.hpp"

namespace shardex {

/// The floating-point element types: the ones with math and gradients.
template <class T>
concept Scalar = std::same_as<T, float> || std::same_as<T, double>;

/// The integer element types of token ids (embedding's and cross_entropy's
/// indices): data without a gradient, in a whole layout or Sharded, never
/// Partial (a sum of ids means nothing).
template <class T>
concept TokenId = std::same_as<T, std::int32_t> || std::same_as<T, std::int64_t>;

/// The element types of tensors: floating point (Scalar) or token ids (TokenId).
template <class T>
concept Element = Scalar<T> || TokenId<T>;

/// "float32", "float64", "int32" or "int64": the name of T in messages and files.
template <class T>
constexpr const char* dtype_name() {
  if constexpr (std::same_as<T, float>)
    return "float32";
  else if constexpr (std::same_as<T, double>)
    return "float64";
  else if constexpr (std::same_as<T, std::int32_t>)
    return "int32";
  else
    return "int64";
}

struct Host;

/// `Device` defaults to Host.
template <Element T, LayoutTag L, class Device = Host>
class Tensor;

}  // namespace shardex
