// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief How much checking a collective does before it moves data.
///
/// - `CheckLevel::communicating` (default): before each collective the ranks
///   agree, with one small all-reduce, that every rank's input is valid and that
///   all ranks are making the same call (operation, dtype, shapes, lengths).
///   A bad input on one rank then makes *every* rank throw the same message,
///   and mismatched calls are reported instead of hanging.
/// - `CheckLevel::local`: only the checks a rank can do alone. Saves one
///   latency-bound all-reduce per collective; a bad input on one rank then
///   throws there while its peers may wait in the collective.

namespace shardex {

/// How much a collective checks before it moves data (the two levels above).
enum class CheckLevel { local, communicating };

namespace detail {
inline CheckLevel& check_level_ref() noexcept {
  static CheckLevel level = CheckLevel::communicating;
  return level;
}
}  // namespace detail

/// The current level, for the whole process (CheckLevel::communicating by default).
inline CheckLevel check_level() noexcept { return detail::check_level_ref(); }
/// Sets the level for the whole process; set it on every rank alike, since
/// the checks at CheckLevel::communicating are collective.
inline void set_check_level(CheckLevel level) noexcept { detail::check_level_ref() = level; }

}  // namespace shardex
