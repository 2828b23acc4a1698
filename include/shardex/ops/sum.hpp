#pragma once
/// @file
/// @brief `sum(x)`: the sum of all elements, with its layout rule.
///
/// | x            | sum(x)  | why                                         |
/// |--------------|---------|---------------------------------------------|
/// | `I`          | `I`     | one shared value                            |
/// | `R`          | `R`     | every rank sums its own copy                |
/// | `P(sum)`     | `P(sum)`| a sum of partial sums is still pending      |
/// | `S(d)`       | `P(sum)`| each rank sums its slice; the total is their sum |

#include <type_traits>

#include "shardex/device/tensor.hpp"

namespace shardex {

template <LayoutTag L>
using sum_layout_t = std::conditional_t<is_sharded_v<L>, Partial, L>;

/// The sum of all elements of x, a 0-d tensor of layout `sum_layout_t<L>`.
template <Scalar T, LayoutTag L, class Dev>
Tensor<T, sum_layout_t<L>, Dev> sum(const Tensor<T, L, Dev>& x) {
  using Out = sum_layout_t<L>;
  auto y = Tensor<T, Out, Dev>::full(x.comm(), Shape{}, Dev::sum(x.data(), x.size()));
  if (x.node())
    y.record("sum", {x.node()}, [in = x.node()](const Tensor<T, dual_t<Out>, Dev>& g) {
      // d(sum)/dx = 1 everywhere: the seed's value spread over x's shape.
      T v{};
      Dev::copy_block(g.data(), 1, 0, &v, 1, 0, 1, 1, 1);
      in->accumulate(in->make_full(v));
    });
  return y;
}

}  // namespace shardex
