// Programs that used to hang a job (issue #10's table), one per case name:
//
//   mpirun -n 3 fault_cases CASE
//
// Each must end, on every rank, with a clear message (the watchdog's, an
// abort's, or an error's) and a non-zero exit within the watchdog's deadline
// plus a few seconds; run_faults.py runs them with a short SHARDEX_TIMEOUT and
// checks that. Rank 1 is the rank that misbehaves; the others go on to a
// collective it never joins.
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
  (void)transit<Replicated>(x, {});
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
