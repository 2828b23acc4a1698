// SPDX-License-Identifier: MIT
#pragma once
// Helpers for tests that run on every rank under mpirun.

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "shardex/backend/mpi/communicator.hpp"

namespace shardex::test {

/// The communicator of the whole run (a duplicate of MPI_COMM_WORLD).
inline const mpi::Communicator& world() {
  static const mpi::Communicator comm = mpi::Communicator::world();
  return comm;
}

/// The world size the program was launched with, known before MPI starts
/// (doctest evaluates a test case's decorators then): mpirun's
/// OMPI_COMM_WORLD_SIZE (Open MPI) or PMI_SIZE (MPICH), else 1 (run directly,
/// or the build without MPI). For `TEST_CASE("..." * doctest::skip(launched_ranks() < 2))`:
/// a case that needs two ranks is skipped at one, and the runner's summary
/// counts it as skipped instead of passed.
inline int launched_ranks() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* v = std::getenv(var)) return static_cast<int>(std::strtol(v, nullptr, 10));
  return 1;
}

/// Whether this program is built with AddressSanitizer (the sanitizer build):
/// a test case that measures time skips there (`doctest::skip(sanitized)`),
/// since ASan's checks are in every load and store it times.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool sanitized = true;
#else
inline constexpr bool sanitized = false;
#endif
#else
inline constexpr bool sanitized = false;
#endif

/// Why this test program cannot run here; empty when it can (see mpi_main.cpp).
std::string skip_reason();

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

/// The lengths cases of a test at n ranks, drawn from a shared generator:
/// `random` random splits of 1 .. max_total (zeros likely), one with a forced
/// zero and one where a single rank holds everything (n > 1), then even
/// lengths (the plain-collective paths) and all zero, if asked for.
struct LengthsCases {
  int random = 3;
  std::int64_t max_total = 12;
  bool even = true;
  bool empty = true;
};

inline std::vector<std::vector<std::int64_t>> lengths_cases(std::mt19937_64& rng, int n, LengthsCases c) {
  using Lens = std::vector<std::int64_t>;
  std::uniform_int_distribution<std::int64_t> total(1, c.max_total);
  std::uniform_int_distribution<int> pick(0, n - 1);
  std::vector<Lens> cs;
  for (int k = 0; k < c.random; ++k) cs.push_back(random_lengths(rng, n, total(rng)));
  if (n > 1) {
    Lens a = random_lengths(rng, n, total(rng) + 1);
    const auto z = static_cast<std::size_t>(pick(rng));
    a[(z + 1) % a.size()] += a[z];
    a[z] = 0;
    cs.push_back(a);
    Lens b(static_cast<std::size_t>(n), 0);
    b[static_cast<std::size_t>(pick(rng))] = total(rng);
    cs.push_back(b);
  }
  if (c.even) cs.push_back(Lens(static_cast<std::size_t>(n), 1 + static_cast<std::int64_t>(rng() % 4)));
  if (c.empty) cs.push_back(Lens(static_cast<std::size_t>(n), 0));
  return cs;
}

}  // namespace shardex::test

/// REQUIRE that holds on every rank or stops the test case on every rank.
#define SHARDEX_REQUIRE_ALL(cond) REQUIRE(::shardex::test::all_ranks(static_cast<bool>(cond)))
