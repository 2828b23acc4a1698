// SPDX-License-Identifier: MIT
// Programs that used to hang a job (issue #10's table), one per case name:
//
//   mpirun -n 3 fault_cases CASE
//
// Each must end, on every rank, with a clear message (the watchdog's, an
// abort's, or an error's) and a non-zero exit within the watchdog's deadline
// plus a few seconds; run_faults.py runs them with a short SHARDEX_TIMEOUT and
// checks that. In the hangs, rank 1 is the rank that misbehaves; the others
// go on to a collective it never joins. The bad inputs must throw on every
// rank, each rank printing its error.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <shardex.hpp>

using namespace shardex;

namespace {

/// The collective the well-behaved ranks go on to: an all_gather of uneven rows.
void collective(const mpi::Communicator& comm) {
  std::vector<std::int64_t> lens(static_cast<std::size_t>(comm.size()), 2);
  lens[0] = 1;
  std::int64_t rows = 0;
  for (auto l : lens) rows += l;
  auto x = Tensor<float, Sharded<0>>::ones(comm, {rows, 3}, layout_mapping<Sharded<0>>(lens));
  (void)apply_transition<Replicated>(x, {});
}

/// The table's bad inputs, written as a user would (no try/catch here: main
/// catches and prints). Each must throw on every rank, so that no rank goes
/// on to the collective. Returns false for an unknown name.
bool bad_input(const std::string& name, const mpi::Communicator& comm) {
  const int n = comm.size(), last = n - 1;
  std::vector<std::int64_t> one_row_on_last(static_cast<std::size_t>(n), 0);
  one_row_on_last[static_cast<std::size_t>(last)] = 1;
  if (name == "zeros_negative_then_all_reduce") {
    auto p = Tensor<float, Partial>::zeros(comm, {-1, 5});
    (void)apply_transition<Replicated>(p, {});
  } else if (name == "ones_negative") {
    (void)Tensor<float, Replicated>::ones(comm, {-1, 5});
  } else if (name == "sharded_negative_all_gather") {
    std::vector<std::int64_t> lens(static_cast<std::size_t>(n), 0);
    lens[0] = 4;
    auto x = Tensor<float, Sharded<1>>::ones(comm, {-2, 4}, layout_mapping<Sharded<1>>(lens));
    (void)apply_transition<Replicated>(x, {});
  } else if (name == "default_constructed") {
    Tensor<float, Partial> t;
    (void)apply_transition<Replicated>(t, {});
  } else if (name == "moved_from") {
    auto a = Tensor<float, Replicated>::ones(comm, {3, 4});
    auto b = std::move(a);
    Tensor<float, Replicated> c = a + b;
    (void)c;
  } else if (name == "shape_overflows") {
    (void)Tensor<double, Invariant>::zeros(comm, {std::int64_t(1) << 32, std::int64_t(1) << 32});
  } else if (name == "too_large_for_mpi") {
    (void)Tensor<float, Sharded<0>>::zeros(comm, {1, std::int64_t(1) << 31},
                                           layout_mapping<Sharded<0>>(one_row_on_last));
  } else if (name == "group_fails_part_way") {
    std::vector<double> never(8, 0.0);
    double mine = comm.rank();
    auto g = comm.group();
    g.recv(never.data(), 8, (comm.rank() + 1) % n);  // nobody sends it: cancelled when the group is left
    g.send(&mine, 1, n + 3);                         // an invalid peer: MPI_Isend fails
    g.end();
  } else if (name == "zeros_lengths_on_one_rank" || name == "slice_lengths_on_one_rank") {
    std::vector<std::int64_t> lens(static_cast<std::size_t>(n), 1);
    if (comm.rank() == 1) lens[0] = 2;  // sums to n + 1 on rank 1 only
    if (name == "zeros_lengths_on_one_rank")
      (void)Tensor<float, Sharded<0>>::zeros(comm, {n, 2}, layout_mapping<Sharded<0>>(lens));
    else
      (void)eager::dynamic_slice<Sharded<0>>(Tensor<float, Replicated>::ones(comm, {n, 2}), lens);
  } else {
    return false;
  }
  collective(comm);  // reached only if the bad input went through
  return true;
}

/// Runs `name`; returns main's exit code on the ranks that return.
int run(const std::string& name, const mpi::Communicator& comm) {
  const bool odd_one = comm.rank() == 1;
  if (name == "early_return") {
    if (odd_one) return 0;  // returns from main: Environment's destructor finalizes
    collective(comm);
  } else if (name == "caught_error") {
    if (odd_one) {
      try {
        throw std::runtime_error("a failure this rank handles by returning 1");
      } catch (const std::exception& e) {
        std::fprintf(stderr, "[rank 1] %s\n", e.what());
        return 1;
      }
    }
    collective(comm);
  } else if (name == "backward_on_one_rank") {
    auto w = Tensor<float, Invariant>::ones(comm, {3}).requires_grad();
    Tensor<float, Replicated> loss = sum(replicate(w));
    if (comm.rank() == 0) backward(loss);
    collective(comm);
  } else if (name == "check_level_differs") {
    if (odd_one) set_check_level(CheckLevel::local);
    collective(comm);
  } else if (name == "sigkill") {
    if (odd_one) std::raise(SIGKILL);
    collective(comm);
  } else if (name == "exit_without_finalize") {
    if (odd_one) std::exit(0);
    collective(comm);
  } else if (bad_input(name, comm)) {
    // (the bad input threw on every rank, or the case let it through: then run_faults sees exit 0)
  } else {
    if (comm.rank() == 0) std::fprintf(stderr, "fault_cases: unknown case %s\n", name.c_str());
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "";
  if (name == "unwinding") {
    // The Environment is destroyed while an exception propagates out of its
    // scope on rank 1: it aborts the job instead of waiting in MPI_Finalize.
    try {
      mpi::Environment env(argc, argv);
      auto comm = mpi::Communicator::world();
      if (comm.rank() == 1) throw std::runtime_error("an error leaving the Environment's scope");
      collective(comm);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "unwinding: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  mpi::Environment env(argc, argv);
  auto comm = mpi::Communicator::world();
  try {
    return run(name, comm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] error: %s\n", comm.rank(), e.what());
    return 1;
  }
}
