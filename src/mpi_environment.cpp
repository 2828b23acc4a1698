// SPDX-License-Identifier: MIT
// RAII MPI initialization: see include/shardex/backend/mpi/environment.hpp.
#include "shardex/backend/mpi/environment.hpp"

#include "shardex/core/trace.hpp"

#include <cstdio>
#include <exception>

#include "shardex/backend/mpi/communicator.hpp"
#include "shardex/core/watchdog.hpp"
#include "shardex/device/host/gemm_kernels.hpp"
#include "shardex/device/host/memory_pool.hpp"

namespace shardex::mpi {

namespace {
bool initialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  return flag != 0;
}

// Rank 0's cached times, or every rank times the GEMM kernels at once and all
// take the sums (integers: exact): every rank chooses the same kernel per class.
void choose_gemm_kernels_together() {
  host::GemmAgreement agree;
  MPI_Comm_rank(MPI_COMM_WORLD, &agree.rank);
  agree.sum = [](std::vector<std::int64_t>& ns) {
    check(MPI_Allreduce(MPI_IN_PLACE, ns.data(), static_cast<int>(ns.size()), MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD),
          "MPI_Allreduce (the GEMM kernels' timings)");
  };
  agree.broadcast = [](std::vector<std::int64_t>& v) {
    check(MPI_Bcast(v.data(), static_cast<int>(v.size()), MPI_INT64_T, 0, MPI_COMM_WORLD),
          "MPI_Bcast (the GEMM kernels' cached timings)");
  };
  host::choose_gemm_kernels(agree);
}
}  // namespace

Environment::Environment(int& argc, char**& argv) {
  host::keep_freed_memory();
  host::blas_core();  // OpenBLAS's kernels corrected before MPI_Init starts threads (src/host_gemm.cpp)
  if (!initialized()) {
    check(MPI_Init(&argc, &argv), "MPI_Init");
    owns_ = true;
  }
  if (owns_) trace::start_from_environment();
  choose_gemm_kernels_together();
}

Environment::Environment() {
  host::keep_freed_memory();
  host::blas_core();  // as above
  if (!initialized()) {
    check(MPI_Init(nullptr, nullptr), "MPI_Init");
    owns_ = true;
  }
  if (owns_) trace::start_from_environment();
  choose_gemm_kernels_together();
}

Environment::~Environment() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!owns_ || finalized) return;
  if (std::uncaught_exceptions() > 0) {
    // Leaving by an exception: the peers may be inside a collective this rank
    // will never join, and MPI_Finalize would wait for them forever.
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(
        stderr,
        "[shardex] rank %d: shardex::mpi::Environment is destroyed while an exception propagates; aborting the "
        "job (MPI_Abort) instead of waiting in MPI_Finalize for peers that may be inside a collective\n",
        rank);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (trace::enabled()) {  // SHARDEX_TRACE, or a trace never stopped: merged and written now
    const watchdog::Armed armed("the trace's merge (shardex::trace::stop in Environment's destructor)",
                                "MPI_COMM_WORLD (a peer returned without reaching it)", watchdog::default_timeout());
    try {
      trace::stop();
    } catch (const std::exception& e) {  // a destructor: report, and finalize anyway
      std::fprintf(stderr, "[shardex] trace: not written: %s\n", e.what());
    }
  }
  // A rank that returns from main while its peers still wait in a collective
  // (or never reach MPI_Finalize) would wait here forever: watched.
  const watchdog::Armed armed("MPI_Finalize (shardex::mpi::Environment's destructor)",
                              "MPI_COMM_WORLD (its peers are still inside a collective, or do not finalize)",
                              watchdog::default_timeout());
  MPI_Finalize();  // never throws: errors at exit are ignored
}

bool Environment::active() noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return initialized() && !finalized;
}

}  // namespace shardex::mpi
