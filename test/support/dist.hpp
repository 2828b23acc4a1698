#pragma once
// Helpers for tests that run on every rank under mpirun.

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "shardex/backend/mpi/communicator.hpp"

namespace shardex::test {

/// The communicator of the whole run (a duplicate of MPI_COMM_WORLD).
inline const mpi::Communicator& world() {
  static const mpi::Communicator comm = mpi::Communicator::world();
  return comm;
}

/// True on every rank iff `ok` is true on every rank. Use it before leaving a
/// test case early: a rank that leaves alone would leave its peers waiting in
/// the next collective.
inline bool all_ranks(bool ok, const mpi::Communicator& comm = world()) {
  std::int64_t v = ok ? 1 : 0;
  comm.all_reduce_min(&v, 1);
  return v == 1;
}

/// A generator seeded identically on every rank (random sizes and lengths must
/// agree across ranks or the collectives would not match).
inline std::mt19937_64 shared_rng(std::uint64_t seed) { return std::mt19937_64(seed); }

/// n random lengths summing to `total`, zeros included on purpose.
inline std::vector<std::int64_t> random_lengths(std::mt19937_64& rng, int n, std::int64_t total) {
  std::vector<std::int64_t> ls(static_cast<std::size_t>(n), 0);
  std::uniform_int_distribution<int> pick(0, n - 1);
  for (std::int64_t i = 0; i < total; ++i) ++ls[static_cast<std::size_t>(pick(rng))];
  return ls;
}

}  // namespace shardex::test

/// REQUIRE that holds on every rank or stops the test case on every rank.
#define SHARDEX_REQUIRE_ALL(cond) REQUIRE(::shardex::test::all_ranks(static_cast<bool>(cond)))
