// SPDX-License-Identifier: MIT
// print_in_rank_order: gather every rank's text to rank 0 and write it there.
#include "shardex/backend/mpi/print.hpp"

#include <ostream>
#include <vector>

namespace shardex::mpi {

void print_in_rank_order(const Communicator& comm, const std::string& text, std::ostream& out) {
  const int n = comm.size();
  int len = to_count(static_cast<std::int64_t>(text.size()), "print_in_rank_order");
  std::vector<int> lens(static_cast<std::size_t>(n)), displs(static_cast<std::size_t>(n));
  check(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm.native()), "MPI_Gather (print_in_rank_order)");
  std::string all;
  if (comm.rank() == 0) {
    int total = 0;
    for (int i = 0; i < n; ++i) {
      displs[static_cast<std::size_t>(i)] = total;
      total += lens[static_cast<std::size_t>(i)];
    }
    all.resize(static_cast<std::size_t>(total));
  }
  check(MPI_Gatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, comm.native()),
        "MPI_Gatherv (print_in_rank_order)");
  if (comm.rank() == 0) out << all << std::flush;
}

}  // namespace shardex::mpi
