// SPDX-License-Identifier: MIT
// A translation unit that uses the whole DSL: every transition, the planner
// and explain, every local rule, fused element-wise expressions and autodiff,
// in float and double. bench/compile_time.py times its compilation against
// compile_eigen.cpp, the same MLP written with plain Eigen.
#include <iostream>

#include <shardex.hpp>

using namespace shardex;

template <class T>
T mlp(const mpi::Communicator& comm, std::uint64_t seed) {
  const int n = comm.size();
  std::vector<std::int64_t> lens(static_cast<std::size_t>(n), 16 / n);
  lens.back() += 16 - (16 / n) * n;
  const layout_mapping<Sharded<1>> m1(lens);
  const layout_mapping<Sharded<0>> m0(lens);
  auto x = Tensor<T, Invariant>::normal(comm, {8, 12}, seed);
  auto a = Tensor<T, Sharded<1>>::normal(comm, {12, 16}, seed + 1, T(0), T(0.1), m1).requires_grad();
  auto ab = Tensor<T, Sharded<0>>::zeros(comm, {16}, m0).requires_grad();
  auto b = Tensor<T, Sharded<0>>::normal(comm, {16, 12}, seed + 2, T(0), T(0.1), m0).requires_grad();
  auto bb = Tensor<T, Invariant>::zeros(comm, {12}).requires_grad();
  auto h = gelu(add_bias(matmul(replicate(x), a), ab));                         // column-parallel: S(1)
  Tensor<T, Replicated> y = add_bias(all_reduce(matmul(h, b)), replicate(bb));  // row-parallel: P -> R
  auto target = Tensor<T, Replicated>::uniform(comm, {8, 12}, seed + 3);
  auto d = y - target;
  Tensor<T, Replicated> loss = sum(d * d) / T(2 * n);
  backward(loss);
  // The other transitions and rules, so that all of them are instantiated.
  std::vector<std::int64_t> rows(static_cast<std::size_t>(n), 0);
  rows.front() = 8;
  Tensor<T, Sharded<0>> s0 = slice<Sharded<0>>(y, rows);
  (void)s0;
  Tensor<T, Sharded<1>> t =
      all_to_all<Sharded<1>>(transpose(transpose(Tensor<T, Sharded<0>>::ones(comm, {16, 16}, m0))), lens);
  Tensor<T, Partial> zp = zero_pad(t);
  Tensor<T, Sharded<0>> rs = reduce_scatter<Sharded<0>>(zp, lens);
  Tensor<T, Invariant> gi = all_gather<Invariant>(rs);
  Tensor<T, Replicated> ri = redistribute<Replicated>(all_reduce<Invariant>(zp));
  Tensor<T, Sharded<0>> rd = redistribute<Sharded<0>>(rs, std::vector<std::int64_t>(lens.rbegin(), lens.rend()));
  Tensor<T, Sharded<0>> s = sum<1>(tanh(relu(exp(-(rd * T(0.5))))));
  std::cout << explain(all_gather(reduce_scatter<Sharded<0>>(zp, lens))).str() << gi.describe() << ri.describe()
            << s.describe();
  return loss.data()[0] + a.grad().data()[0];
}

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  auto comm = mpi::Communicator::world();
  std::cout << mlp<float>(comm, 1) + mlp<double>(comm, 2) << "\n";
}
