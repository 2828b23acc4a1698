// SPDX-License-Identifier: MIT
// The shortest program that uses shardex; runs on any number of ranks:
//
//   mpirun -n 4 build/examples/hello
#include <iostream>
#include <string>
#include <vector>

#include <shardex.hpp>

using namespace shardex;

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  auto comm = mpi::Communicator::world();
  const int n = comm.size(), r = comm.rank();

  // A 2 x (1 + 2 + ... + n) tensor sharded along dim 1: rank r holds r + 1 columns, all equal to r + 1.
  std::vector<std::int64_t> lens;
  for (int i = 0; i < n; ++i) lens.push_back(i + 1);
  const std::int64_t cols = std::int64_t(n) * (n + 1) / 2;
  auto x = Tensor<double, Sharded<1>>::full(comm, {2, cols}, r + 1.0, layout_mapping<Sharded<1>>(lens)).requires_grad();

  auto y = all_gather(x);  // lazy: Replicated, every rank will hold the whole 2 x cols tensor
  Tensor<double, Replicated> loss = sum(y) / double(n);  // runs here; each rank's loss counts 1/n
  backward(loss);                                        // the adjoint of all_gather (a reduce_scatter) runs here

  const std::string line =
      "rank " + std::to_string(r) + ": loss " + format_local(loss) + ", grad " + format_local(x.grad());
  mpi::print_in_rank_order(comm, line + "\n", std::cout);  // rank 0 prints every rank's line, in order
}
