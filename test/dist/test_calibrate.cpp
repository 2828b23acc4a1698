// SPDX-License-Identifier: MIT
// measure_speeds and measured_lengths: every rank gets the same list, the
// lengths sum to the extent, and a rank slowed on purpose (load_factor 4: it
// really runs the product four times per timed run) gets proportionally
// fewer rows; at one rank, its slowed speed is about a quarter of its own.
#include <doctest/doctest.h>

#include <numeric>

#include <shardex.hpp>
#include <shardex/device/calibrate.hpp>

#include "support/dist.hpp"

using namespace shardex;
using shardex::test::world;

TEST_CASE("measure_speeds: positive, and the same list on every rank") {
  const auto& comm = world();
  CalibrationOptions o;
  o.gemm = GemmShape::plain(64, 64, 64);
  const auto speeds = measure_speeds<Host, double>(comm, o);
  REQUIRE(speeds.size() == static_cast<std::size_t>(comm.size()));
  for (double s : speeds) CHECK(s > 0);
  std::vector<double> from_zero = speeds;
  comm.broadcast(from_zero.data(), static_cast<std::int64_t>(from_zero.size()), 0);
  CHECK(from_zero == speeds);
}

TEST_CASE("measured_lengths: a rank slowed four times gets about a quarter of the rows of the others") {
  const auto& comm = world();
  const int n = comm.size();
  CalibrationOptions o;
  o.gemm = GemmShape::plain(96, 96, 96);
  o.repeats = 7;
  const int slow = n - 1;
  const std::int64_t total = 1000 * n;
  // Timings on a shared machine are noisy (another job's burst can land in one
  // rank's measurement): up to three measurements, the first in range counts.
  // Every rank sees the same lengths, so every rank makes the same decision.
  double ratio = -1;
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (n == 1) {
      // One rank has no other rank to compare with: its speed slowed four
      // times against its own speed unslowed, and all the rows are its own.
      const auto lens = measured_lengths<Host, float>(comm, total, o);
      CHECK(lens == std::vector<std::int64_t>{total});
      CalibrationOptions slowed = o;
      slowed.load_factor = 4;
      const double plain = measure_speeds<Host, float>(comm, o).at(0);
      ratio = measure_speeds<Host, float>(comm, slowed).at(0) / plain;
      MESSAGE("one rank: its speed slowed four times is " << ratio << " of its plain speed (expected about 0.25)");
    } else {
      CalibrationOptions mine = o;
      if (comm.rank() == slow) mine.load_factor = 4;
      const auto lens = measured_lengths<Host, float>(comm, total, mine);
      REQUIRE(lens.size() == static_cast<std::size_t>(n));
      CHECK(std::accumulate(lens.begin(), lens.end(), std::int64_t(0)) == total);
      std::vector<std::int64_t> from_zero = lens;
      comm.broadcast(from_zero.data(), n, 0);
      CHECK(from_zero == lens);  // every rank computes the same split
      double others = 0;
      for (int r = 0; r < n; ++r)
        if (r != slow) others += double(lens[static_cast<std::size_t>(r)]);
      others /= n - 1;
      ratio = double(lens[static_cast<std::size_t>(slow)]) / others;
      MESSAGE("lengths " << to_string(std::span<const std::int64_t>(lens)) << ": the slowed rank's share is " << ratio
                         << " of the others' (expected about 0.25)");
    }
    if (ratio > 0.12 && ratio < 0.45) break;
  }
  CHECK(ratio > 0.12);
  CHECK(ratio < 0.45);
}

TEST_CASE("measure_speeds: a product of size zero is refused on every rank") {
  const auto& comm = world();
  CalibrationOptions o;
  o.gemm = GemmShape::plain(0, 8, 8);
  CHECK_THROWS_WITH_AS(measure_speeds<Host>(comm, o), doctest::Contains("positive sizes"), invalid_argument);
  comm.barrier();
}
