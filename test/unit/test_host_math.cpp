// SPDX-License-Identifier: MIT
// The host's float tanh (math::rational_tanh in core/host_device.hpp, what
// gelu and tanh compute in the fused element-wise passes), against std::tanh
// in double on floats of every magnitude: within 6 ulp of the correctly
// rounded value (the worst over all 2^32 floats is 4.9, at 5.13, where g++
// contracts the polynomial into fused multiply-adds; 5.4 without them), a
// tiny |a| returned exactly, +-1 from 7.9 up and at the infinities, odd
// (the sign of -0 kept), a NaN kept a NaN. Its clamp and its choices are
// integer operations on the bits so that the loops vectorize on AVX2 too;
// these cases pin that those operations choose what the float selects did.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include <shardex/core/host_device.hpp>

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_host_math {

using shardex::math::rational_tanh;

namespace {

/// |got - tanh(a)| in units of the last place of tanh(a) rounded to float.
double ulp_error(float a, float got) {
  const double want = std::tanh(static_cast<double>(a));
  const float rounded = std::fabs(static_cast<float>(want));
  const double ulp = static_cast<double>(std::nextafter(rounded, std::numeric_limits<float>::infinity())) - rounded;
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

}  // namespace

TEST_CASE("rational_tanh is within 6 ulp of tanh on floats of every magnitude, odd, exact where tanh is a or +-1") {
  double worst = 0;
  float worst_at = 0;
  int checked = 0;
  // Every 997th bit pattern of the non-negative floats up to infinity (2.1
  // million values: every binade, the tiny, the fitted and the saturated).
  for (std::uint32_t bits = 0; bits < 0x7f800000u; bits += 997) {
    const float a = std::bit_cast<float>(bits);
    const float y = rational_tanh(a);
    const double e = ulp_error(a, y);
    if (e > worst) worst = e, worst_at = a;
    if (std::bit_cast<std::uint32_t>(rational_tanh(-a)) != (std::bit_cast<std::uint32_t>(y) ^ 0x80000000u)) {
      FAIL_CHECK("rational_tanh(-a) is not -rational_tanh(a) at a = " << a);
      break;
    }
    ++checked;
  }
  INFO("the worst error, at a = ", worst_at);
  CHECK(worst <= 6.0);
  CHECK(checked > 2'000'000);

  // Below 0.0004 tanh(a) is a to float precision: returned as it is.
  for (const float a : {0.0f, 1e-30f, std::numeric_limits<float>::denorm_min(), 1e-5f, 0.00039999f})
    CHECK(std::bit_cast<std::uint32_t>(rational_tanh(a)) == std::bit_cast<std::uint32_t>(a));
  CHECK(std::signbit(rational_tanh(-0.0f)));
  // The fit's last value below the cap, and +-1 above it.
  CHECK(rational_tanh(7.9f) < 1.0f);
  CHECK(rational_tanh(7.9f) > 0.999999f);
  for (const float a :
       {7.91f, 8.0f, 20.0f, 1e30f, std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity()}) {
    CHECK(rational_tanh(a) == 1.0f);
    CHECK(rational_tanh(-a) == -1.0f);
  }
  CHECK(std::isnan(rational_tanh(std::numeric_limits<float>::quiet_NaN())));
  CHECK(std::isnan(rational_tanh(-std::numeric_limits<float>::quiet_NaN())));
  CHECK(std::isnan(rational_tanh(std::bit_cast<float>(0x7f800001u))));  // the smallest NaN, just above infinity
}

}  // namespace shardex_test_host_math
