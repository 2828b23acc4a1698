// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `measure_speeds` and `measured_lengths`: uneven lengths from each
/// rank's measured GEMM throughput instead of speeds typed by hand.
///
/// Each rank times a product of the model's shape on its own device (a
/// warm-up, then the median of `repeats` runs), the ranks exchange their
/// speeds (GFLOP/s) so that every rank holds the same list, and
/// `measured_lengths` splits an extent in proportion to it
/// (`proportional_lengths`: summing to the extent, zeros allowed). By default
/// the ranks measure one at a time, so that ranks sharing cores or a device do
/// not measure each other's load. Collective: every rank calls it.
///
/// Not part of <shardex.hpp>: include <shardex/device/calibrate.hpp>.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "shardex/core/error.hpp"
#include "shardex/device/device.hpp"
#include "shardex/device/host/host.hpp"
#include "shardex/layout/lengths.hpp"
#include "shardex/core/agree.hpp"

namespace shardex {

/// What a calibration runs.
struct CalibrationOptions {
  /// The product to time: the model's own shape (e.g. batch x hidden x ffn).
  GemmShape gemm = GemmShape::plain(256, 256, 256);
  /// Timed runs after one warm-up; the median counts.
  int repeats = 5;
  /// How many times this rank runs the product per timed run (rounded up):
  /// a rank that will also carry other work (or, in tests, a rank slowed on
  /// purpose) measures proportionally slower. Real work, not a scaled number.
  double load_factor = 1.0;
  /// The ranks measure one after another (true) or all at once (false, when
  /// every rank has a device of its own).
  bool in_turn = true;
};

namespace detail {
/// This rank's GEMM speed in GFLOP/s on Dev, as the options say.
inline void check_calibration(const CalibrationOptions& o) {
  const GemmShape& g = o.gemm;
  if (g.m <= 0 || g.n <= 0 || g.k <= 0 || g.batch <= 0 || o.repeats <= 0 || !(o.load_factor > 0))
    throw invalid_argument("shardex::measure_speeds: the product must have positive sizes (m " + std::to_string(g.m) +
                           ", k " + std::to_string(g.k) + ", n " + std::to_string(g.n) + ", batch " +
                           std::to_string(g.batch) + "), and repeats (" + std::to_string(o.repeats) +
                           ") and load_factor (" + std::to_string(o.load_factor) + ") must be positive");
}

template <class Dev, class T>
double gemm_speed(const CalibrationOptions& o) {
  const GemmShape& g = o.gemm;
  const std::int64_t a_size = (g.batch - 1) * g.stride_a + g.m * g.k, b_size = (g.batch - 1) * g.stride_b + g.k * g.n,
                     c_size = (g.batch - 1) * g.stride_c + g.m * g.n;
  auto a = Dev::template allocate<T>(a_size);
  auto b = Dev::template allocate<T>(b_size);
  auto c = Dev::template allocate<T>(c_size);
  const int times = static_cast<int>(std::max(1.0, o.load_factor + 0.999999));
  const auto once = [&] {
    for (int i = 0; i < times; ++i) Dev::gemm(g, T(1), a.get(), b.get(), T(0), c.get());
    (void)Dev::sum(c.get(), std::min<std::int64_t>(c_size, 1));  // a value on the host: the device has finished
  };
  once();  // warm-up: caches, pools, a GPU's first launch
  std::vector<double> seconds;
  for (int r = 0; r < o.repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(seconds.begin(), seconds.begin() + static_cast<std::ptrdiff_t>(seconds.size() / 2), seconds.end());
  const double median = std::max(seconds[seconds.size() / 2], 1e-9);
  // The speed left for the model: one product's flops in the time of `times`.
  const double flops = 2.0 * double(g.m) * double(g.n) * double(g.k) * double(g.batch);
  return flops / median / 1e9;
}
}  // namespace detail

/// Every rank's GEMM speed in GFLOP/s, the same list on every rank (index:
/// rank). `T` is the element type the model computes in. Collective.
template <class Dev = Host, class T = float, class Comm>
std::vector<double> measure_speeds(const Comm& comm, const CalibrationOptions& o = {}) {
  detail::check_calibration(o);  // before any rank measures, so that a bad option throws everywhere alike
  const auto& control = detail::control_of(comm);
  const int n = control.size();
  double mine = 0;
  std::string failed;  // this rank's measurement failed (e.g. out of memory): agreed below, not a hang
  const auto measure = [&] {
    try {
      mine = detail::gemm_speed<Dev, T>(o);
    } catch (const std::exception& e) {
      failed = "shardex::measure_speeds on rank " + std::to_string(control.rank()) + ": " + e.what();
    }
  };
  if (o.in_turn) {
    for (int r = 0; r < n; ++r) {  // one rank at a time; the others wait in the barrier
      if (r == control.rank()) measure();
      control.barrier();
    }
  } else {
    measure();
  }
  detail::Signature sig;
  sig.add("shardex::measure_speeds");
  detail::agree(control, failed, sig, [] { return std::string("shardex::measure_speeds"); });
  std::vector<double> speeds(static_cast<std::size_t>(n));
  control.all_gather(&mine, speeds.data(), 1);
  return speeds;
}

/// Lengths of `total` in proportion to measure_speeds(comm, o): what
/// `--speeds auto` gives the examples. Collective; the same on every rank.
template <class Dev = Host, class T = float, class Comm>
std::vector<std::int64_t> measured_lengths(const Comm& comm, std::int64_t total, const CalibrationOptions& o = {}) {
  const std::vector<double> speeds = measure_speeds<Dev, T>(comm, o);
  return proportional_lengths(total, speeds);
}

}  // namespace shardex
