// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Shard lengths, static or dynamic, behind one API (as `std::extents`
/// mixes static and dynamic extents).
///
/// - `lengths<1, 2, 3, 4>`: a compile-time list. Its count, sum, max and
///   offsets are constant expressions, so shapes can be checked by the compiler.
/// - `dynamic_lengths`: the list is given at run time when a tensor is made
///   (from a load balancer, say) and stored in the tensor's layout mapping.
///
/// Zero is a legal length everywhere: a rank may hold nothing.

#include <algorithm>
#include <array>
#include <concepts>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <utility>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "shardex/core/compile_errors.hpp"

namespace shardex {

/// A compile-time list of shard lengths, one per rank.
template <std::int64_t... Ls>
struct lengths {
  static_assert(sizeof...(Ls) > 0, SHARDEX_ERR_LENGTHS_EMPTY);
  static_assert(((Ls >= 0) && ...), SHARDEX_ERR_LENGTHS_NEGATIVE);

  /// The lengths, rank by rank.
  static constexpr std::array<std::int64_t, sizeof...(Ls)> values{Ls...};
  /// The number of ranks the list is for.
  static constexpr std::size_t count = sizeof...(Ls);
  /// The global extent of the sharded dim.
  static constexpr std::int64_t sum = (Ls + ... + 0);
  /// The longest shard (the padding of a padded collective).
  static constexpr std::int64_t max = std::max({Ls...});
  /// offsets[r] = lengths[0] + ... + lengths[r-1]; offsets[count] = sum.
  static constexpr std::array<std::int64_t, sizeof...(Ls) + 1> offsets = [] {
    std::array<std::int64_t, sizeof...(Ls) + 1> o{};
    for (std::size_t r = 0; r < count; ++r) o[r + 1] = o[r] + values[r];
    return o;
  }();
  /// All ranks hold the same length.
  static constexpr bool is_even = ((Ls == values[0]) && ...);
};

/// Tag: the lengths are given at run time and kept in the layout mapping.
struct dynamic_lengths {};

namespace detail {
template <class T>
struct is_static_lengths : std::false_type {};
template <std::int64_t... Ls>
struct is_static_lengths<lengths<Ls...>> : std::true_type {};
}  // namespace detail

/// Models: `lengths<...>`, `dynamic_lengths`.
template <class L>
concept LengthsSpec = detail::is_static_lengths<L>::value || std::same_as<L, dynamic_lengths>;

/// True for `lengths<...>`, false for `dynamic_lengths`.
template <class L>
inline constexpr bool is_static_lengths_v = detail::is_static_lengths<L>::value;

/// Offsets of a run-time lengths list: offsets[r] = sum of lengths before r.
inline std::vector<std::int64_t> offsets_of(std::span<const std::int64_t> ls) {
  std::vector<std::int64_t> o(ls.size() + 1, 0);
  std::partial_sum(ls.begin(), ls.end(), o.begin() + 1);
  return o;
}

/// The longest of a run-time lengths list (0 for an empty one).
inline std::int64_t max_of(std::span<const std::int64_t> ls) {
  return ls.empty() ? 0 : *std::max_element(ls.begin(), ls.end());
}

/// "[1,2,3,4]"
inline std::string to_string(std::span<const std::int64_t> ls) {
  std::string s = "[";
  for (std::size_t i = 0; i < ls.size(); ++i) s += (i ? "," : "") + std::to_string(ls[i]);
  return s + "]";
}

}  // namespace shardex

namespace shardex {

/// Lengths proportional to `weights` (relative device speeds, say) summing to
/// `total`: each rank gets floor(total * w / sum w), and the remainder goes one
/// by one to the largest fractional parts (ties to the lower rank). A weight of
/// zero gives a length of zero. Deterministic, so every rank computes the same.
inline std::vector<std::int64_t> proportional_lengths(std::int64_t total, std::span<const double> weights) {
  double wsum = 0;
  for (double w : weights) {
    if (!(w >= 0)) throw std::invalid_argument("shardex::proportional_lengths: weights must be >= 0");
    wsum += w;
  }
  if (weights.empty() || wsum <= 0)
    throw std::invalid_argument("shardex::proportional_lengths: the weights sum to zero");
  std::vector<std::int64_t> ls(weights.size());
  std::vector<std::pair<double, std::size_t>> frac(weights.size());
  std::int64_t given = 0;
  for (std::size_t r = 0; r < weights.size(); ++r) {
    const double exact = static_cast<double>(total) * weights[r] / wsum;
    ls[r] = static_cast<std::int64_t>(exact);
    given += ls[r];
    frac[r] = {exact - static_cast<double>(ls[r]), r};
  }
  std::stable_sort(frac.begin(), frac.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (std::size_t k = 0; given < total; k = (k + 1) % frac.size())
    if (weights[frac[k].second] > 0) ++ls[frac[k].second], ++given;
  return ls;
}

}  // namespace shardex
