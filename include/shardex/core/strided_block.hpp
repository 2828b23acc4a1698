// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `StridedBlock`: one piece of a tensor's local storage as a backend
/// sees it, `rows` runs of `run` elements, `stride` elements apart, from
/// element `offset`. The lowering plans describe strided shards with it, so
/// that a backend with derived datatypes (MPI) moves them in place.

#include <cstdint>

namespace shardex {

/// `rows` runs of `run` elements, `stride` elements apart, from element `offset`.
struct StridedBlock {
  ///@{
  /// The first element; the number of runs; the elements per run; the distance
  /// between the starts of two runs (all in elements).
  std::int64_t offset = 0, rows = 0, run = 0, stride = 0;
  ///@}
  /// The elements of the piece (its elements travel row by row).
  [[nodiscard]] std::int64_t count() const noexcept { return rows * run; }
  /// Block `[off, off + len)` of the middle dim of an (outer, extent, inner) array.
  static StridedBlock of(std::int64_t outer, std::int64_t extent, std::int64_t inner, std::int64_t off,
                         std::int64_t len) {
    return {off * inner, len == 0 ? 0 : outer, len * inner, extent * inner};
  }
  /// `count` contiguous elements from element `offset`.
  static StridedBlock contiguous(std::int64_t offset, std::int64_t count) {
    return {offset, count == 0 ? 0 : 1, count, count};
  }
};

}  // namespace shardex
