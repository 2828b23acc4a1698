// SPDX-License-Identifier: MIT
// A program that uses an installed (or subproject) shardex: an uneven
// all_gather on every rank, checked, with the layout in the type. The
// consumers test (run_consumers.py) builds it three ways and runs it on 2 ranks.
#include <cstdio>
#include <vector>

#include <shardex.hpp>

using namespace shardex;

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  const auto comm = mpi::Communicator::world();
  std::vector<std::int64_t> lengths;
  std::int64_t rows = 0;
  for (int r = 0; r < comm.size(); ++r) lengths.push_back(r + 1), rows += r + 1;  // 1, 2, ...: uneven
  const auto x = Tensor<double, Sharded<0>>::from_function(
      comm, {rows, 3}, [](std::span<const std::int64_t> i) { return double(10 * i[0] + i[1]); },
      layout_mapping<Sharded<0>>(lengths));
  const Tensor<double, Replicated> y = all_gather(x);
  int wrong = 0;
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < 3; ++j) wrong += y(i, j) != double(10 * i + j);
  if (comm.rank() == 0)
    std::printf("consumer: all_gather of %lld uneven rows on %d ranks: %s\n", static_cast<long long>(rows), comm.size(),
                wrong == 0 ? "ok" : "WRONG");
  return wrong == 0 ? 0 : 1;
}
