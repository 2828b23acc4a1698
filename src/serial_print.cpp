// SPDX-License-Identifier: MIT
// print_in_rank_order for a build without MPI: the one rank is rank 0, so its
// text is all there is to print.
#include "shardex/backend/mpi/print.hpp"

#include <ostream>

#if SHARDEX_WITH_MPI
#error "serial_print.cpp is the build without MPI; src/meson.build compiles mpi_print.cpp instead"
#endif

namespace shardex::mpi {

void print_in_rank_order(const Communicator& comm, const std::string& text, std::ostream& out) {
  comm.barrier();  // throws on an empty communicator, as the MPI version's gather does
  out << text << std::flush;
}

}  // namespace shardex::mpi
