// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The element types a checkpoint stores: a float or double tensor is
/// saved as F64, F32, BF16 or F16 (`TensorList::add(name, t, StoredAs::bf16)`)
/// and loaded from any of them that holds its values exactly (BF16, F16 and
/// F32 into float; all four into double), as the checkpoints of other
/// frameworks are usually BF16. Narrowing happens only on save, where the
/// caller asked for it: to the nearest value, ties to even, too large to
/// infinity, NaN stays NaN. Compiled once (src/stored_dtype.cpp).

#include <cstdint>
#include <string_view>

namespace shardex {

/// How a saved tensor's elements are stored in the file: as the tensor holds
/// them (`native`: F32 for float, F64 for double) or converted, rounding
/// to the nearest value where the stored type is narrower.
enum class StoredAs { native, f64, f32, bf16, f16 };

}  // namespace shardex

namespace shardex::io {

/// The safetensors dtype of `s` for a tensor whose own dtype is `native`.
const char* stored_dtype(StoredAs s, const char* native);

/// Whether `dtype` is one shardex converts from and to: F64, F32, BF16, F16.
bool is_float_dtype(std::string_view dtype);

/// Whether every value of the float dtype `from` is exact in `to`.
bool holds_exactly(std::string_view from, std::string_view to);

///@{
/// The bits of the bfloat16 (8-bit exponent, 7-bit fraction) or IEEE
/// half (5-bit exponent, 10-bit fraction) nearest to `v`, ties to even,
/// rounded once (a double is not first rounded to float); beyond the
/// largest finite value, infinity; a NaN is a quiet NaN of the same sign.
std::uint16_t bf16_bits(double v);
std::uint16_t f16_bits(double v);
///@}
///@{
/// The value of bfloat16 or half bits (exact in float).
float bf16_value(std::uint16_t bits);
float f16_value(std::uint16_t bits);
///@}

///@{
/// `n` elements of the float dtype `from` at `src` as T at `dst`.
void decode(std::string_view from, const void* src, float* dst, std::int64_t n);
void decode(std::string_view from, const void* src, double* dst, std::int64_t n);
///@}
///@{
/// `n` elements of `src` as the float dtype `to` at `dst`.
void encode(const float* src, std::string_view to, void* dst, std::int64_t n);
void encode(const double* src, std::string_view to, void* dst, std::int64_t n);
///@}

}  // namespace shardex::io
