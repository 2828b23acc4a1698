// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `Shape`: the extents of a row-major N-d array (N <= Shape::max_rank),
/// and the (outer, extent, inner) view of one dim that every sharded copy uses.

#include <algorithm>
#include <array>
#include <limits>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "shardex/core/compile_errors.hpp"
#include "shardex/core/error.hpp"
#include "shardex/core/strided_block.hpp"

namespace shardex {

/// Extents of a row-major array. A small regular value type (no allocation).
class Shape {
public:
  /// The most dims a Shape holds (its extents live inline, no allocation).
  static constexpr int max_rank = 6;

  constexpr Shape() = default;
  /// From extents: `Shape{5, 10}`; `Shape{}` is 0-d (one element).
  /// @throws invalid_argument for more than max_rank extents.
  constexpr Shape(std::initializer_list<std::int64_t> extents) {
    if (extents.size() > max_rank)
      throw invalid_argument("shardex::Shape: rank " + std::to_string(extents.size()) + " exceeds max_rank 6");
    for (auto e : extents) ext_[rank_++] = e;
  }
  /// From a run-time list of extents.
  /// @throws invalid_argument for more than max_rank extents.
  explicit Shape(std::span<const std::int64_t> extents) {
    if (extents.size() > max_rank)
      throw invalid_argument("shardex::Shape: rank " + std::to_string(extents.size()) + " exceeds max_rank 6");
    for (auto e : extents) ext_[rank_++] = e;
  }

  /// The number of dims.
  [[nodiscard]] constexpr int rank() const noexcept { return rank_; }
  ///@{
  /// The extent of dim d (unchecked: @pre 0 <= d < rank()).
  [[nodiscard]] constexpr std::int64_t operator[](int d) const noexcept { return ext_[static_cast<std::size_t>(d)]; }
  [[nodiscard]] constexpr std::int64_t& operator[](int d) noexcept { return ext_[static_cast<std::size_t>(d)]; }
  ///@}
  /// The number of elements: the product of the extents (1 for a 0-d shape).
  [[nodiscard]] constexpr std::int64_t numel() const noexcept {
    std::int64_t n = 1;
    for (int d = 0; d < rank_; ++d) n *= ext_[static_cast<std::size_t>(d)];
    return n;
  }
  /// Product of the extents before dim d.
  [[nodiscard]] constexpr std::int64_t outer(int d) const noexcept {
    std::int64_t n = 1;
    for (int i = 0; i < d; ++i) n *= ext_[static_cast<std::size_t>(i)];
    return n;
  }
  /// Product of the extents after dim d.
  [[nodiscard]] constexpr std::int64_t inner(int d) const noexcept {
    std::int64_t n = 1;
    for (int i = d + 1; i < rank_; ++i) n *= ext_[static_cast<std::size_t>(i)];
    return n;
  }
  /// This shape with dim d set to `extent`.
  [[nodiscard]] constexpr Shape with(int d, std::int64_t extent) const noexcept {
    Shape s = *this;
    s.ext_[static_cast<std::size_t>(d)] = extent;
    return s;
  }
  /// The extents, dim by dim.
  [[nodiscard]] constexpr std::span<const std::int64_t> extents() const noexcept {
    return {ext_.data(), static_cast<std::size_t>(rank_)};
  }
  /// Same rank and same extents.
  friend constexpr bool operator==(const Shape& a, const Shape& b) noexcept {
    return a.rank_ == b.rank_ && std::equal(a.ext_.begin(), a.ext_.begin() + a.rank_, b.ext_.begin());
  }

  /// "(5, 10)"; a 0-d shape prints "()".
  [[nodiscard]] std::string str() const {
    std::string s = "(";
    for (int d = 0; d < rank_; ++d) s += (d ? ", " : "") + std::to_string(ext_[static_cast<std::size_t>(d)]);
    return s + ")";
  }

private:
  std::array<std::int64_t, max_rank> ext_{};
  int rank_ = 0;
};

/// What is wrong with `s` as a tensor's shape ("" if nothing): a negative
/// extent, or an element count that does not fit 64 bits (an overflow would
/// otherwise wrap to a small count and allocate too little).
inline std::string shape_problem(const Shape& s) {
  for (int d = 0; d < s.rank(); ++d)
    if (s[d] < 0) return "extent " + std::to_string(s[d]) + " of dim " + std::to_string(d) + " is negative";
  std::int64_t n = 1;
  for (int d = 0; d < s.rank(); ++d) {
    if (s[d] != 0 && n > std::numeric_limits<std::int64_t>::max() / s[d])
      return "its element count overflows 64 bits (the extents' product exceeds 2^63 - 1)";
    n *= s[d];
  }
  return "";
}

/// A shape known at compile time: `shape_c<5, 10>`. It converts to `Shape`, and
/// the tensor factories given one check the layout against it at compile time
/// (the sharded dim exists, static lengths sum to its extent), as CuTe mixes
/// static and dynamic extents.
template <std::int64_t... E>
struct static_shape {
  static_assert(((E >= 0) && ...), SHARDEX_ERR_SHAPE_NEGATIVE_EXTENT);
  ///@{
  /// The number of dims, and the extents.
  static constexpr int rank = sizeof...(E);
  static constexpr std::array<std::int64_t, sizeof...(E)> values{E...};
  ///@}
  /// The same extents as a run-time Shape.
  constexpr operator Shape() const { return Shape{E...}; }  // NOLINT(google-explicit-constructor)
};
/// `shape_c<5, 10>`: the static_shape value to pass to a tensor factory.
template <std::int64_t... E>
inline constexpr static_shape<E...> shape_c{};

/// A row-major array seen as (outer, extent, inner) around one dim: the
/// shape every pack/unpack along a sharded dim works on.
struct DimView {
  ///@{
  /// The product of the dims before, the dim's extent, the product of the dims after.
  std::int64_t outer = 1, extent = 0, inner = 1;
  ///@}
  /// The view of `s` around dim d.
  static constexpr DimView of(const Shape& s, int d) noexcept { return {s.outer(d), s[d], s.inner(d)}; }
  /// Rows [off, off + len) of the middle dim, as a block of this array (what a copy takes).
  [[nodiscard]] StridedBlock rows(std::int64_t off, std::int64_t len) const noexcept {
    return StridedBlock::of(outer, extent, inner, off, len);
  }
  /// The whole array.
  [[nodiscard]] StridedBlock all() const noexcept { return rows(0, extent); }
};

}  // namespace shardex
