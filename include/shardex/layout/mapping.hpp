// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `layout_mapping<L>`: the run-time part of a layout, as mdspan's
/// `layout_left::mapping` holds only what is not static. For every layout but
/// `Sharded<D, dynamic_lengths>` it is empty (and costs nothing inside a tensor,
/// through `[[no_unique_address]]`); for that one it holds the lengths list.

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "shardex/core/compile_errors.hpp"
#include "shardex/core/error.hpp"
#include "shardex/core/shape.hpp"
#include "shardex/layout/layouts.hpp"

namespace shardex {

/// Empty mapping of the unsharded layouts (I, R, P).
template <LayoutTag L>
struct layout_mapping {
  /// Always equal: there is nothing to compare.
  friend bool operator==(const layout_mapping&, const layout_mapping&) = default;
};

/// Static lengths: nothing stored.
template <int D, std::int64_t... Ls>
struct layout_mapping<Sharded<D, lengths<Ls...>>> {
  /// The `lengths<Ls...>` of the layout.
  using lengths_type = shardex::lengths<Ls...>;
  /// The lengths, rank by rank, from the type.
  static constexpr std::span<const std::int64_t> lengths() noexcept { return lengths_type::values; }
  /// Always equal: the lengths are in the type.
  friend bool operator==(const layout_mapping&, const layout_mapping&) = default;
};

/// Dynamic lengths: the list is stored. It converts from a list of lengths,
/// so that one signature takes static lengths (`{}`) and dynamic ones
/// (`{3, 0, 5, 2}` or a vector): `reduce_scatter<To>(x, lengths)`.
template <int D>
struct layout_mapping<Sharded<D, dynamic_lengths>> {
  layout_mapping() = default;
  /// From a lengths list, one per rank (checked where a tensor is made or a
  /// transition planned: check_mapping).
  layout_mapping(std::vector<std::int64_t> ls) : lengths_(std::move(ls)) {}  // NOLINT(google-explicit-constructor)
  /// From a braced list: `{3, 0, 5, 2}`.
  layout_mapping(std::initializer_list<std::int64_t> ls) : lengths_(ls) {}  // NOLINT(google-explicit-constructor)
  /// The lengths, rank by rank.
  [[nodiscard]] std::span<const std::int64_t> lengths() const noexcept { return lengths_; }
  /// Equal when the lengths lists are.
  friend bool operator==(const layout_mapping&, const layout_mapping&) = default;

private:
  std::vector<std::int64_t> lengths_;
};

/// What is wrong with a sharded mapping for a world size and a global shape,
/// or an empty string. Every rank sees the same lengths, world size and global
/// shape, so every rank finds the same problem.
template <ShardedLayout L>
std::string mapping_problem(const layout_mapping<L>& m, const Shape& global, int world_size) {
  const auto ls = m.lengths();
  if (static_cast<int>(ls.size()) != world_size)
    return "the lengths list has " + std::to_string(ls.size()) + " entries but the communicator has " +
           std::to_string(world_size) + " ranks; give one length per rank";
  for (std::size_t r = 0; r < ls.size(); ++r)
    if (ls[r] < 0) return "length of rank " + std::to_string(r) + " is negative";
  if (L::dim >= global.rank())
    return "sharded dim " + std::to_string(L::dim) + " is out of range for a " + std::to_string(global.rank()) +
           "-d tensor";
  std::int64_t sum = 0;
  for (auto l : ls) sum += l;
  if (sum != global[L::dim])
    return "the lengths sum to " + std::to_string(sum) + " but the global extent of dim " + std::to_string(L::dim) +
           " is " + std::to_string(global[L::dim]);
  return {};
}

/// Throws `invalid_argument` naming `op`, the rank, the layout, the lengths
/// and the global shape if `mapping_problem` finds one.
template <ShardedLayout L>
void check_mapping(const layout_mapping<L>& m, const Shape& global, int world_size, int rank, const char* op) {
  const std::string problem = mapping_problem<L>(m, global, world_size);
  if (!problem.empty())
    throw invalid_argument(std::string(op) + " on rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
                           " with layout " + layout_name<L>() + ", lengths " + to_string(m.lengths()) +
                           ", global shape " + global.str() + ": " + problem);
}

/// The default target of a transition: the mapping of a layout whose lengths
/// are in its type (or that has none). A target with dynamic lengths has no
/// default: leaving them out is a compile error, not an empty list at run time.
template <LayoutTag L>
layout_mapping<L> lengths_from_type() {
  static_assert(
      !is_sharded_v<L> ||
          [] {
            if constexpr (is_sharded_v<L>)
              return L::has_static_lengths;
            else
              return true;
          }(),
      SHARDEX_ERR_DYNAMIC_LENGTHS_MISSING);
  return {};
}

/// The mapping of dual(L), from the mapping of L (the lengths carry over).
template <LayoutTag L>
layout_mapping<dual_t<L>> dual_mapping(const layout_mapping<L>& m) {
  if constexpr (is_sharded_v<L>)
    return m;
  else
    return {};
}

/// The one printer of a layout with the lengths a mapping carries (run-time
/// lengths too): "S(0)[3,0,5,2]", "R", "P(sum)", "I". `layout_name<L>()`
/// prints the type alone ("S(0)[dyn]").
template <LayoutTag L>
std::string layout_name(const layout_mapping<L>& m) {
  if constexpr (is_sharded_v<L>)
    return "S(" + std::to_string(L::dim) + ")" + to_string(m.lengths());
  else
    return layout_name<L>();
}

/// The shape rank r holds of a tensor with global shape `global` and layout L.
template <LayoutTag L>
Shape local_shape(const Shape& global, const layout_mapping<L>& m, int rank) {
  if constexpr (is_sharded_v<L>)
    return global.with(L::dim, m.lengths()[static_cast<std::size_t>(rank)]);
  else
    return global;
}

}  // namespace shardex

namespace shardex {

/// The mapping of layout `To` carrying the lengths of `m` (a sharded layout
/// whose dim changed, e.g. after a transpose or a sum over an earlier dim).
template <ShardedLayout To, ShardedLayout From>
layout_mapping<To> carry_lengths(const layout_mapping<From>& m) {
  if constexpr (To::has_static_lengths)
    return {};
  else
    return layout_mapping<To>(std::vector<std::int64_t>(m.lengths().begin(), m.lengths().end()));
}

}  // namespace shardex
