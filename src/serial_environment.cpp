// SPDX-License-Identifier: MIT
// shardex::mpi::Environment for a build without MPI: there is nothing to
// initialize, but the class keeps its contract: Environment::active() is true
// while an Environment is alive, and Communicator::world() requires one, as
// with MPI, so that a program written against this build runs on the MPI one.
#include "shardex/backend/mpi/environment.hpp"

#include <atomic>
#include <exception>

#include "shardex/config.hpp"
#include "shardex/core/trace.hpp"
#include "shardex/device/host/gemm_kernels.hpp"
#include "shardex/device/host/memory_pool.hpp"

#if SHARDEX_WITH_MPI
#error "serial_environment.cpp is the build without MPI; src/meson.build compiles mpi_environment.cpp instead"
#endif

namespace shardex::mpi {

namespace {
std::atomic<int> g_alive{0};  // Environments alive now
}  // namespace

Environment::Environment(int& /*argc*/, char**& /*argv*/) : Environment() {}

Environment::Environment() : owns_(true) {
  host::keep_freed_memory();
  host::blas_core();  // OpenBLAS's kernels corrected before any product (src/host_gemm.cpp)
  ++g_alive;
  trace::start_from_environment();
}

Environment::~Environment() {
  if (owns_ && std::uncaught_exceptions() == 0) trace::stop();  // SHARDEX_TRACE: written at exit
  if (owns_) --g_alive;
}

bool Environment::active() noexcept { return g_alive.load() > 0; }

}  // namespace shardex::mpi
