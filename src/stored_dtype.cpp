// SPDX-License-Identifier: MIT
// The element conversions of checkpoints (include/shardex/io/stored_dtype.hpp).
#include "shardex/io/stored_dtype.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "shardex/core/error.hpp"

namespace shardex::io {

namespace {

/// `v` rounded to float toward zero, its last bit set if that was inexact
/// ("round to odd"). A value rounded to odd at 24 bits and then to nearest
/// at 8 or 11 bits is rounded as if once: the odd bit stands for whatever
/// lay beyond float's precision, so a double just above a tie is not taken
/// for the tie.
float round_to_odd(double v) {
  const float f = static_cast<float>(v);
  if (static_cast<double>(f) == v || std::isnan(v)) return f;
  auto b = std::bit_cast<std::uint32_t>(f);
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) --b;  // rounded away from zero: one step back (sign-magnitude)
  return std::bit_cast<float>(b | 1u);
}

std::uint16_t bf16_of_float(float f) {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);  // to nearest, ties to even; a carry moves into the exponent (to inf at the top)
  return static_cast<std::uint16_t>(x >> 16);
}

std::uint16_t f16_of_float(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // quiet NaN
  if (ax >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // from 65520 (the tie above 65504) up: inf
  if (ax < 0x38800000u) {                                         // below 2^-14: a subnormal half, a multiple of 2^-24
    const float scaled = std::bit_cast<float>(ax) * 16777216.0f;  // exact: a power of two
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::nearbyint(scaled)));  // ties to even
  }
  std::uint32_t h = (((ax >> 23) - 112u) << 10) | ((ax >> 13) & 0x3ffu);  // rebias 127 -> 15
  const std::uint32_t rest = ax & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
  return static_cast<std::uint16_t>(sign | h);
}

enum class Kind { f64, f32, bf16, f16 };

Kind kind_of(std::string_view dtype) {
  if (dtype == "F64") return Kind::f64;
  if (dtype == "F32") return Kind::f32;
  if (dtype == "BF16") return Kind::bf16;
  if (dtype == "F16") return Kind::f16;
  throw invalid_argument("shardex: " + std::string(dtype) +
                         " is not a float dtype shardex converts (F64, F32, BF16, F16)");
}

template <class T>
void decode_as(std::string_view from, const void* src, T* dst, std::int64_t n) {
  const auto* bytes = static_cast<const unsigned char*>(src);
  const auto each = [&]<class S>(auto&& value_of) {
    for (std::int64_t i = 0; i < n; ++i) {
      S s;
      std::memcpy(&s, bytes + i * static_cast<std::int64_t>(sizeof(S)), sizeof(S));  // src need not be aligned
      dst[i] = static_cast<T>(value_of(s));
    }
  };
  switch (kind_of(from)) {
    case Kind::f64:
      each.template operator()<double>([](double v) { return v; });
      break;
    case Kind::f32:
      each.template operator()<float>([](float v) { return v; });
      break;
    case Kind::bf16:
      each.template operator()<std::uint16_t>(bf16_value);
      break;
    case Kind::f16:
      each.template operator()<std::uint16_t>(f16_value);
      break;
  }
}

template <class T>
void encode_as(const T* src, std::string_view to, void* dst, std::int64_t n) {
  auto* bytes = static_cast<unsigned char*>(dst);
  const auto each = [&](auto&& stored_of) {
    for (std::int64_t i = 0; i < n; ++i) {
      const auto s = stored_of(src[i]);
      std::memcpy(bytes + i * static_cast<std::int64_t>(sizeof(s)), &s, sizeof(s));
    }
  };
  switch (kind_of(to)) {
    case Kind::f64:
      each([](T v) { return static_cast<double>(v); });
      break;
    case Kind::f32:
      each([](T v) { return static_cast<float>(v); });
      break;
    case Kind::bf16:
      each([](T v) { return bf16_bits(v); });
      break;
    case Kind::f16:
      each([](T v) { return f16_bits(v); });
      break;
  }
}

}  // namespace

const char* stored_dtype(StoredAs s, const char* native) {
  switch (s) {
    case StoredAs::native:
      return native;
    case StoredAs::f64:
      return "F64";
    case StoredAs::f32:
      return "F32";
    case StoredAs::bf16:
      return "BF16";
    case StoredAs::f16:
      return "F16";
  }
  return native;
}

bool is_float_dtype(std::string_view dtype) {
  return dtype == "F64" || dtype == "F32" || dtype == "BF16" || dtype == "F16";
}

bool holds_exactly(std::string_view from, std::string_view to) {
  if (!is_float_dtype(from) || !is_float_dtype(to)) return false;
  if (from == to || to == "F64") return true;
  return to == "F32" && from != "F64";  // BF16 and F16 both fit F32; they do not fit each other
}

std::uint16_t bf16_bits(double v) { return bf16_of_float(round_to_odd(v)); }
std::uint16_t f16_bits(double v) { return f16_of_float(round_to_odd(v)); }

float bf16_value(std::uint16_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

float f16_value(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t e = (bits >> 10) & 0x1fu, m = bits & 0x3ffu;
  if (e == 0) {  // zero or subnormal: m * 2^-24, exact
    const float v = std::ldexp(static_cast<float>(m), -24);
    return sign ? -v : v;
  }
  if (e == 31) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));  // inf, NaN (payload kept)
  return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
}

void decode(std::string_view from, const void* src, float* dst, std::int64_t n) { decode_as(from, src, dst, n); }
void decode(std::string_view from, const void* src, double* dst, std::int64_t n) { decode_as(from, src, dst, n); }
void encode(const float* src, std::string_view to, void* dst, std::int64_t n) { encode_as(src, to, dst, n); }
void encode(const double* src, std::string_view to, void* dst, std::int64_t n) { encode_as(src, to, dst, n); }

}  // namespace shardex::io
