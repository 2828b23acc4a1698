// SPDX-License-Identifier: MIT
#pragma once
// Test tensors with smooth, distinct values at each global index, the same
// whatever the world size or lengths: a model made on n ranks and on one holds
// the same numbers, so their results can be compared.

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include <shardex.hpp>

namespace shardex::test {

/// A value in [-0.5, 0.5] at a global index, distinct per salt.
inline double smooth_value(std::span<const std::int64_t> idx, int salt) {
  std::int64_t k = salt;
  for (auto i : idx) k = k * 131 + i;
  return std::sin(0.37 * static_cast<double>(k)) * 0.5;
}

/// A double tensor of layout L and global shape g holding smooth_value(idx,
/// salt); ls are the lengths of a Sharded L (ignored otherwise).
template <class L>
Tensor<double, L> smooth_tensor(const mpi::Communicator& comm, const Shape& g, int salt,
                                const std::vector<std::int64_t>& ls) {
  const auto f = [&](std::span<const std::int64_t> idx) { return smooth_value(idx, salt); };
  if constexpr (is_sharded_v<L>)
    return Tensor<double, L>::from_function(comm, g, f, layout_mapping<L>(ls));
  else
    return Tensor<double, L>::from_function(comm, g, f);
}

}  // namespace shardex::test
