// SPDX-License-Identifier: MIT
// The float element-wise passes a transformer's step runs, forward and
// backward, for check_vectorized.py to compile at several instruction sets
// and find every host loop under SHARDEX_SIMD vectorized: gelu(add_bias(x, b))
// (GPT-2's MLP), a sum with a broadcast operand, products and differences with
// an operand that takes no gradient (the backward's scratch rows), tanh and
// relu. Run as a program it checks one gradient, so that it is not dead code.
#include <cmath>
#include <cstdio>

#include <shardex.hpp>

using namespace shardex;

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  const auto comm = mpi::Communicator::world();
  using RF = Tensor<float, Replicated, Host>;
  auto x = RF::uniform(comm, Shape{3, 8}, 1);
  auto y = RF::uniform(comm, Shape{3, 8}, 2);
  auto b = RF::uniform(comm, Shape{8}, 3);
  const auto c = RF::uniform(comm, Shape{3, 8}, 4);  // takes no gradient
  x.requires_grad();
  y.requires_grad();
  b.requires_grad();
  const RF u = gelu(add_bias(x, b));
  const RF v = add_bias(u * c, b) - y;
  const RF w = tanh(v) * y + relu(x - c) * 0.5f + (y + 1.0f);
  backward(sum(w));
  // d/dy of sum(w) = -tanh'(v) y + tanh(v) + 1 at element 0.
  const float t = std::tanh(v.data()[0]);
  const float want = -(1 - t * t) * y.data()[0] + t + 1;
  const float got = y.grad().data()[0];
  if (std::fabs(got - want) > 1e-5f * (1 + std::fabs(want))) {
    std::fprintf(stderr, "fused_loops: d/dy %g, want %g\n", got, want);
    return 1;
  }
  return 0;
}
