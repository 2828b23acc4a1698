// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Output from every rank, in rank order, on rank 0 (mpirun interleaves
/// the ranks' own output arbitrarily).

#include <iosfwd>
#include <string>

#include "shardex/backend/mpi/communicator.hpp"

namespace shardex::mpi {

/// Collective: rank 0 writes every rank's `text` to `out`, rank 0's first.
void print_in_rank_order(const Communicator& comm, const std::string& text, std::ostream& out);

}  // namespace shardex::mpi
