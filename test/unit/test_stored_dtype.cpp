// SPDX-License-Identifier: MIT
// The element conversions of checkpoints (io/stored_dtype.hpp): BF16 and F16
// bits to float and back, checked against oracles that do not share the
// conversion's code:
// - every one of the 65536 bit patterns widens to a float that narrows back
//   to the same bits (NaNs to a NaN);
// - F16 against the compiler's own _Float16 conversions (correctly rounded
//   by libgcc), from float and from double, on values of every magnitude;
// - BF16 against the definition: the result is one of the two neighbours of
//   the value, the nearer one, the even one on a tie, infinity beyond the
//   largest finite value;
// - a double just above a tie is rounded up (a double rounded first to
//   float would land on the tie and go to even: the round-to-odd step);
// - decode/encode of buffers, and which dtypes load into which exactly.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <shardex/core/error.hpp>
#include <shardex/io/stored_dtype.hpp>

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_stored_dtype {

using namespace shardex;

namespace {

/// Values of every magnitude a half or bfloat16 meets: zeros, subnormals,
/// normals, past the largest finite one, both signs, many random fractions.
std::vector<double> test_values() {
  std::vector<double> v{0.0,
                        -0.0,
                        1.0,
                        -1.0,
                        65504.0,
                        65519.99,
                        65520.0,
                        65536.0,
                        1e6,
                        1e-30,
                        3e38,
                        3.5e38,
                        1e300,
                        -1e300,
                        5.960464477539063e-08,
                        2.9802322387695312e-08,
                        2.98023224e-08,
                        6.1035156e-05};
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> frac(1.0, 2.0);
  for (int e = -140; e <= 130; ++e)
    for (int k = 0; k < 40; ++k) {
      const double x = std::ldexp(frac(rng), e);
      v.push_back(k % 2 ? x : -x);
    }
  return v;
}

/// Whether bfloat16 bits `b` are the nearest to `x` (ties to even): its
/// neighbours one step either side are not nearer.
bool nearest_bf16(double x, std::uint16_t b) {
  const long double got = io::bf16_value(b);
  if (std::isinf(static_cast<double>(got))) {  // only beyond the largest finite bfloat16 plus half a step
    const long double top = io::bf16_value(0x7f7f), half_step = std::ldexp(1.0L, 127 - 8);
    return std::signbit(static_cast<double>(got)) == std::signbit(x) &&
           std::fabs(static_cast<long double>(x)) >= top + half_step;
  }
  const long double d = std::fabs(static_cast<long double>(x) - got);
  for (int step : {-1, 1}) {
    const std::uint16_t mag = b & 0x7fff;
    if ((mag == 0 && step < 0) || mag + step >= 0x7f80) continue;  // no neighbour there
    const auto nb = static_cast<std::uint16_t>((b & 0x8000) | (mag + step));
    const long double dn = std::fabs(static_cast<long double>(x) - static_cast<long double>(io::bf16_value(nb)));
    if (dn < d || (dn == d && (b & 1))) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("every BF16 and F16 bit pattern widens to float and narrows back to itself") {
  int bf_wrong = 0, f16_wrong = 0;
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    const float bf = io::bf16_value(b), h = io::f16_value(b);
    if (std::isnan(bf))
      bf_wrong += !std::isnan(io::bf16_value(io::bf16_bits(bf)));
    else
      bf_wrong += io::bf16_bits(bf) != b;
    if (std::isnan(h))
      f16_wrong += !std::isnan(io::f16_value(io::f16_bits(h)));
    else
      f16_wrong += io::f16_bits(h) != b;
  }
  CHECK(bf_wrong == 0);
  CHECK(f16_wrong == 0);
  // A few by heart: 1, -2, the largest finite, the smallest subnormal, inf.
  CHECK(io::bf16_value(0x3f80) == 1.0f);
  CHECK(io::bf16_value(0xc000) == -2.0f);
  CHECK(io::f16_value(0x3c00) == 1.0f);
  CHECK(io::f16_value(0x7bff) == 65504.0f);
  CHECK(io::f16_value(0x0001) == std::ldexp(1.0f, -24));
  CHECK(std::isinf(io::f16_value(0x7c00)));
  CHECK(std::signbit(io::f16_value(0x8000)));
}

#ifdef __FLT16_MANT_DIG__
TEST_CASE("F16 from float and from double: the compiler's correctly rounded _Float16 conversion") {
  int from_float = 0, from_double = 0;
  for (double x : test_values()) {
    const auto f = static_cast<float>(x);
    from_float += io::f16_bits(f) != std::bit_cast<std::uint16_t>(static_cast<_Float16>(f));
    from_double += io::f16_bits(x) != std::bit_cast<std::uint16_t>(static_cast<_Float16>(x));
  }
  CHECK(from_float == 0);
  CHECK(from_double == 0);
}
#endif

TEST_CASE("BF16 from float and from double: the nearest value, ties to even, inf past the top") {
  int wrong = 0;
  for (double x : test_values()) {
    wrong += !nearest_bf16(x, io::bf16_bits(x));
    wrong += !nearest_bf16(static_cast<float>(x), io::bf16_bits(static_cast<float>(x)));
  }
  CHECK(wrong == 0);
  // Ties: halfway between 1 and the next bfloat16 (1 + 2^-7) goes to 1 (even);
  // halfway between 1 + 2^-7 and 1 + 2^-6 goes to 1 + 2^-6.
  CHECK(io::bf16_bits(1.0 + std::ldexp(1.0, -8)) == 0x3f80);
  CHECK(io::bf16_bits(1.0 + 3 * std::ldexp(1.0, -8)) == 0x3f82);
  CHECK(io::bf16_bits(-(1.0 + std::ldexp(1.0, -8))) == 0xbf80);
  CHECK(io::bf16_bits(std::numeric_limits<double>::infinity()) == 0x7f80);
  CHECK(std::isnan(io::bf16_value(io::bf16_bits(std::nan("")))));
  CHECK(std::signbit(io::bf16_value(io::bf16_bits(-std::numeric_limits<double>::quiet_NaN()))));
}

TEST_CASE("a double just above a tie rounds up, though rounded to float first it would be the tie") {
  // 1 + 2^-8 + 2^-40: float rounds it to 1 + 2^-8 (a BF16 tie, which goes to even: 1).
  const double just_above = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  REQUIRE(static_cast<float>(just_above) == 1.0f + std::ldexp(1.0f, -8));
  CHECK(io::bf16_bits(just_above) == 0x3f81);
  CHECK(io::bf16_bits(-just_above) == 0xbf81);
  // The same for half: 1 + 2^-11 is a tie (to 1), 2^-40 above it is not.
  CHECK(io::f16_bits(1.0 + std::ldexp(1.0, -11)) == 0x3c00);
  CHECK(io::f16_bits(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)) == 0x3c01);
  // Just below a tie rounds down.
  CHECK(io::bf16_bits(1.0 + std::ldexp(1.0, -8) - std::ldexp(1.0, -40)) == 0x3f80);
  // Past the largest finite half by less than half a step: stays finite.
  CHECK(io::f16_bits(65519.0) == 0x7bff);
  CHECK(io::f16_bits(65520.0) == 0x7c00);
  CHECK(io::f16_bits(-1e9) == 0xfc00);
}

TEST_CASE("decode and encode buffers of every float dtype; which dtypes load into which exactly") {
  const std::vector<double> xs{0.0, -1.5, 3.140625, 1e-7, 70000.0, -2.5e-3};
  for (const char* dtype : {"F64", "F32", "BF16", "F16"}) {
    CAPTURE(dtype);
    std::vector<unsigned char> stored(xs.size() * 8);
    io::encode(xs.data(), dtype, stored.data(), static_cast<std::int64_t>(xs.size()));
    std::vector<double> back(xs.size());
    io::decode(dtype, stored.data(), back.data(), static_cast<std::int64_t>(back.size()));
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const double expected = std::string_view(dtype) == "F64"    ? xs[i]
                              : std::string_view(dtype) == "F32"  ? static_cast<double>(static_cast<float>(xs[i]))
                              : std::string_view(dtype) == "BF16" ? io::bf16_value(io::bf16_bits(xs[i]))
                                                                  : io::f16_value(io::f16_bits(xs[i]));
      CHECK(back[i] == expected);
    }
    // Through float, from an odd (unaligned) place in the buffer.
    std::vector<float> fs(xs.begin(), xs.end());
    std::vector<unsigned char> odd(xs.size() * 8 + 1);
    io::encode(fs.data(), dtype, odd.data() + 1, static_cast<std::int64_t>(fs.size()));
    std::vector<float> fback(fs.size());
    io::decode(dtype, odd.data() + 1, fback.data(), static_cast<std::int64_t>(fback.size()));
    if (std::string_view(dtype) != "BF16" && std::string_view(dtype) != "F16")
      CHECK(fback == fs);
    else
      CHECK(fback[1] == -1.5f);
  }
  CHECK_THROWS_WITH_AS(io::decode("I64", nullptr, static_cast<float*>(nullptr), 0),
                       doctest::Contains("I64 is not a float dtype"), invalid_argument);
  CHECK(io::holds_exactly("BF16", "F32"));
  CHECK(io::holds_exactly("F16", "F32"));
  CHECK(io::holds_exactly("F32", "F64"));
  CHECK(io::holds_exactly("F16", "F64"));
  CHECK_FALSE(io::holds_exactly("F64", "F32"));
  CHECK_FALSE(io::holds_exactly("BF16", "F16"));
  CHECK_FALSE(io::holds_exactly("I32", "F64"));
  CHECK(std::string(io::stored_dtype(StoredAs::native, "F32")) == "F32");
  CHECK(std::string(io::stored_dtype(StoredAs::bf16, "F64")) == "BF16");
}

}  // namespace shardex_test_stored_dtype
