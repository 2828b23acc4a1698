// SPDX-License-Identifier: MIT
#pragma once
// What the benchmark programs share to report a time: the median of the
// measured repetitions, and the slowest rank's time of one.

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace bench {

/// The median of `v` (the upper one of an even count).
inline double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

/// The largest `v` over the ranks of `comm` (an MPI communicator).
inline double max_over_ranks(MPI_Comm comm, double v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, comm);
  return v;
}

}  // namespace bench
