// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief How many threads each rank's local math may use on the host.
///
/// The default is one thread per rank (one rank per core, the layout of a
/// tensor-parallel run on CPUs), or `SHARDEX_THREADS` from the environment.
/// More threads parallelize Eigen's GEMM, the bulk of a training step, and
/// need a build with OpenMP (the `openmp` feature, SHARDEX_WITH_OPENMP);
/// without it `set_threads` is accepted and every product stays on one thread.
///
/// @code
/// shardex::host::set_threads(2);   // one rank on a 2-core machine
/// @endcode

namespace shardex::host {

/// Threads for the local math of this process from now on (at least 1).
void set_threads(int n) noexcept;
/// The threads the local math uses: set_threads, else SHARDEX_THREADS, else 1.
int threads() noexcept;

}  // namespace shardex::host
