// SPDX-License-Identifier: MIT
// Every operation of the reference module (shared/reference/collectives.py),
// forward and backward, on four CPU ranks:
//
//   mpirun -n 4 build/examples/reference_collectives
//
// Each case builds a parameter whose layout is its operation's From layout,
// applies the operation, sums, and prints each rank's loss and gradient.
// The objective is the sum over ranks of the local losses, so losses that are
// the same on every rank are divided by 4, as the reference does.
#include <iostream>
#include <sstream>

#include <shardex.hpp>

#include "support/command_line.hpp"

using namespace shardex;
using S1 = Sharded<1, lengths<1, 2, 3, 4>>;  // rank r holds r + 1 columns of 10

namespace {

template <class Loss, class Param>
void report(const mpi::Communicator& comm, const char* title, const char* expect, const Loss& loss, const Param& p) {
  if (comm.rank() == 0) std::cout << "testing " << title << "  (expect: " << expect << ")\n";
  std::ostringstream os;
  os << "  rank " << comm.rank() << ": loss " << format_local(loss) << ", grad "
     << layout_name<dual_t<typename Param::layout_type>>() << " " << format_local(p.grad()) << "\n";
  mpi::print_in_rank_order(comm, os.str(), std::cout);
}

}  // namespace

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  auto comm = mpi::Communicator::world();
  CLI::App app("reference_collectives: every operation of the reference module, forward and backward, on 4 ranks",
               "reference_collectives");
  command_line::configure(app);
  if (const auto code = command_line::parse(app, argc, argv, comm.rank())) return *code;
  const int rank = comm.rank();
  return command_line::run("reference_collectives", rank, [&] {
    if (comm.size() != 4)
      throw command_line::refused("run on 4 ranks (mpirun -n 4), not " + std::to_string(comm.size()));
    for (Strategy s : {Strategy::padded, Strategy::per_root}) {
      const bool by_group = s == Strategy::per_root;
      auto p = Tensor<float, S1>::ones(comm, {5, 10}).requires_grad();  // local (5, rank + 1)
      auto loss = eval(sum(all_gather(p, s)) / 4.0);
      backward(loss);
      report(comm, by_group ? "all_gather_by_group_call" : "all_gather", "losses are the same, grads are 1", loss, p);
    }
    {
      auto p = Tensor<float, Partial>::full(comm, {5, 4}, float(rank)).requires_grad();
      auto loss = eval(sum(all_reduce(p)) / 4.0);
      backward(loss);
      report(comm, "all_reduce", "losses are the same, grads are 1", loss, p);
    }
    for (Strategy s : {Strategy::padded, Strategy::per_root}) {
      const bool by_group = s == Strategy::per_root;
      auto p = Tensor<float, Partial>::ones(comm, {5, 10}).requires_grad();
      auto loss = eval(sum(reduce_scatter<S1>(p, s)));
      backward(loss);
      report(comm, by_group ? "reduce_scatter_by_group_call" : "reduce_scatter",
             "losses proportional to rank, grads are 1", loss, p);
    }
    {
      auto p = Tensor<float, Replicated>::ones(comm, {5, 10}).requires_grad();
      auto loss = eval(sum(dynamic_slice<S1>(p)));
      backward(loss);
      report(comm, "dynamic_slice", "losses proportional to rank, grads are partially 1", loss, p);
    }
    {
      auto p = Tensor<float, S1>::ones(comm, {10, 10}).requires_grad();  // local (10, rank + 1)
      auto loss = eval(sum(all_to_all<Sharded<0, lengths<4, 3, 2, 1>>>(p)));
      backward(loss);
      report(comm, "all_to_all", "losses are reverse proportional to rank, grads are 1", loss, p);
    }
    {
      using C = Sharded<1, lengths<0, 2, 0, 8>>;
      auto p = Tensor<float, C>::ones(comm, {10, 10}).requires_grad();
      Tensor<float, Sharded<0, lengths<5, 0, 5, 0>>> y = all_to_all<Sharded<0, lengths<5, 0, 5, 0>>>(p);
      auto loss = eval(sum(y));
      backward(loss);
      if (rank == 0) std::cout << "testing all_to_all with zero  (expect: shapes (10, 0|2|0|8) -> (5|0|5|0, 10))\n";
      std::ostringstream os;
      os << "  rank " << rank << ": p " << p.local_shape().str() << " -> " << y.local_shape().str() << ", loss "
         << format_local(loss) << ", grad " << format_local(p.grad()) << "\n";
      mpi::print_in_rank_order(comm, os.str(), std::cout);
    }
    {
      auto p = Tensor<float, Invariant>::ones(comm, {5, 5}).requires_grad();
      auto loss = eval(sum(replicate(p)) / 4.0);
      backward(loss);
      report(comm, "replicate", "losses are the same, grads are 1", loss, p);
    }
    return 0;
  });
}
