// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `Tensor::array()`: a host tensor's local elements as a flat Eigen
/// array. Apart from tensor.hpp so that only a translation unit that asks for
/// Eigen parses it (about half of a small header's compile time).

#include <concepts>

#include "shardex/device/host/eigen.hpp"
#include "shardex/device/host/host.hpp"
#include "shardex/tensor/tensor.hpp"

namespace shardex {

template <Element T, LayoutTag L, class Device>
auto Tensor<T, L, Device>::array() const requires std::same_as<Device, Host> {
  return host::ArrayMap<T>(data_, static_cast<Eigen::Index>(size()));
}

}  // namespace shardex
