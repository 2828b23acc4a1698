// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Printing a host tensor's local part: "[[1, 1], [1, 1]]", numbers in
/// the shortest form that reads back exactly.

#include <limits>
#include <sstream>
#include <string>

#include "shardex/tensor/tensor.hpp"

namespace shardex {

/// This rank's local part as nested brackets, "[[1, 1], [1, 1]]" (a 0-d
/// tensor: its one number); no communication.
template <Element T, LayoutTag L>
std::string format_local(const Tensor<T, L, Host>& x) {
  std::ostringstream os;
  os.precision(std::numeric_limits<T>::max_digits10 - 2);
  const Shape& s = x.local_shape();
  if (s.rank() == 0) {
    os << x.data()[0];
    return os.str();
  }
  // Open and close brackets where the flat index crosses a dim's boundary.
  const std::int64_t n = s.numel();
  if (n == 0)
    return std::string(static_cast<std::size_t>(s.rank()), '[') + std::string(static_cast<std::size_t>(s.rank()), ']');
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t stride = 1;
    int opens = 0;
    for (int d = s.rank() - 1; d >= 0; --d) {
      stride *= s[d];
      if (i % stride == 0) ++opens;
    }
    if (i > 0) os << (opens ? "," : ", ");
    if (i > 0 && opens) os << ' ';
    for (int k = 0; k < opens; ++k) os << '[';
    os << x.data()[i];
    int closes = 0;
    stride = 1;
    for (int d = s.rank() - 1; d >= 0; --d) {
      stride *= s[d];
      if ((i + 1) % stride == 0) ++closes;
    }
    for (int k = 0; k < closes; ++k) os << ']';
  }
  return os.str();
}

}  // namespace shardex
