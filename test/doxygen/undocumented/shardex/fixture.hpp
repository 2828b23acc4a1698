// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The docs_api test's fixture: one public function without a comment
/// among documented names; the check must refuse it, and nothing else.

namespace shardex {

/// Documented: the check must not mention it.
inline int documented_function(int x) { return x + 1; }

inline int undocumented_function(int x) { return x - 1; }

namespace detail {
// Excluded by the Doxyfile (EXCLUDE_SYMBOLS): no comment needed.
inline int helper(int x) { return x; }
}  // namespace detail

}  // namespace shardex
