// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The layout rules of local operations (their compile errors' texts
/// are in the catalogue, core/compile_errors.hpp).
///
/// A local operation runs on each rank's local part without communication;
/// its rule says what layout the result has, as sharding-propagation rules do
/// in the peers. A missing rule is a compile error that names the operation,
/// the problem and the fix; the offending layouts appear in the compiler's
/// "In instantiation of ..." line just above. Every message is pinned by a
/// compile-fail case in test/fail/.
///
/// | operation            | rule                                                        |
/// |----------------------|-------------------------------------------------------------|
/// | a + b, a - b         | same layout (Sharded: same dim and lengths) -> that layout  |
/// | a * b                | same layout, except P * P; also P * R -> P, R * P -> P      |
/// | gelu, relu, tanh, exp| any layout but P (non-linear)                               |
/// | -a, a * c, a / c     | any layout (linear)                                         |
/// | add_bias(x, b)       | (R, R) -> R, (I, I) -> I, (S(d), R) -> S(d) for a row dim d,|
/// |                      | (S(last), S(0)) -> S(last), never P                         |
/// | matmul(a, b), 2-d    | R R -> R, I I -> I, P R -> P, R P -> P,                     |
/// |                      | R S(1) -> S(1) (column-parallel), S(1) S(0) -> P (row-parallel),|
/// |                      | S(0) R -> S(0)                                              |
/// | sum(x) (all dims)    | S(d) -> P, others keep their layout                         |
/// | sum<k>(x)            | S(k) -> P, S(d) -> S(d-1) for k < d, others keep            |
/// | transpose(x), 2-d    | S(0) <-> S(1), others keep                                  |

#include <concepts>
#include <type_traits>

#include "shardex/core/compile_errors.hpp"
#include "shardex/layout/layouts.hpp"

namespace shardex::rules {

/// False for any types: the dependent false of a static_assert in a branch.
template <class...>
inline constexpr bool always_false = false;

/// One operand is Invariant and the other is not (a shared value meets a
/// per-rank one: refused by every binary rule).
template <class A, class B>
inline constexpr bool mixes_invariant = (std::same_as<A, Invariant>) != (std::same_as<B, Invariant>);

/// The same layout, or Sharded along the same dim (lengths are checked at run time).
template <class A, class B>
inline constexpr bool same_placement = std::same_as<A, B> || (is_sharded_v<A> && is_sharded_v<B> && [] {
                                         if constexpr (is_sharded_v<A> && is_sharded_v<B>)
                                           return A::dim == B::dim;
                                         else
                                           return false;
                                       }());

// ---- a + b, a - b ------------------------------------------------------------
/// The rule of a + b and a - b: the same layout, which the result keeps.
template <LayoutTag A, LayoutTag B>
struct add {
  static_assert(!mixes_invariant<A, B>, SHARDEX_ERR_INVARIANT_MEETS_PER_RANK);
  static_assert(mixes_invariant<A, B> || same_placement<A, B>, SHARDEX_ERR_ADD_LAYOUTS);
  /// The result's layout.
  using type = A;
};

// ---- a * b --------------------------------------------------------------------
/// The rule of a * b: the same layout, or a Partial times a Replicated one
/// (a Partial result); never Partial * Partial.
template <LayoutTag A, LayoutTag B>
struct mul {
  /// P * R or R * P: each part scaled by the same whole value stays a part.
  static constexpr bool partial_times_whole = (std::same_as<A, Partial> && std::same_as<B, Replicated>) ||
                                              (std::same_as<A, Replicated> && std::same_as<B, Partial>);
  static_assert(!(std::same_as<A, Partial> && std::same_as<B, Partial>), SHARDEX_ERR_MUL_PARTIAL_PARTIAL);
  static_assert(!mixes_invariant<A, B>, SHARDEX_ERR_INVARIANT_MEETS_PER_RANK);
  static_assert(mixes_invariant<A, B> || partial_times_whole || same_placement<A, B> ||
                    (std::same_as<A, Partial> && std::same_as<B, Partial>),
                SHARDEX_ERR_MUL_LAYOUTS);
  /// The result's layout.
  using type = std::conditional_t<partial_times_whole, Partial, A>;
};

// ---- a / b --------------------------------------------------------------------
/// As a * b (each part of a Partial a divided by the same whole b stays a
/// part), but never by a Partial b.
template <LayoutTag A, LayoutTag B>
struct div {
  static_assert(!std::same_as<B, Partial>, SHARDEX_ERR_DIV_BY_PARTIAL);
  /// The result's layout (mul's).
  using type = typename std::conditional_t<std::same_as<B, Partial>, std::type_identity<A>, mul<A, B>>::type;
};

// ---- a + c (a constant) -------------------------------------------------------------
/// The rule of a + c for a constant c: any layout but Partial, kept.
template <LayoutTag A>
struct shift {
  static_assert(!std::same_as<A, Partial>, SHARDEX_ERR_SHIFT_PARTIAL);
  /// The result's layout: A.
  using type = A;
};

// ---- non-linear unary functions ---------------------------------------------------
/// The rule of a non-linear unary function (gelu, exp, ...): any layout but
/// Partial, kept.
template <LayoutTag A>
struct nonlinear {
  static_assert(!std::same_as<A, Partial>, SHARDEX_ERR_NONLINEAR_PARTIAL);
  /// The result's layout: A.
  using type = A;
};

// ---- add_bias(x, b) -------------------------------------------------------------
/// The rule of add_bias(x, b): (R, R) -> R, (I, I) -> I, (S(d), R) -> S(d),
/// (S(d), S(0)) -> S(d); never a Partial x.
template <LayoutTag X, LayoutTag B>
struct bias {
  static_assert(!std::same_as<X, Partial>, SHARDEX_ERR_BIAS_PARTIAL);
  static_assert(std::same_as<X, Partial> || !mixes_invariant<X, B>, SHARDEX_ERR_INVARIANT_MEETS_PER_RANK);
  /// Whether (X, B) is one of the pairs above.
  static constexpr bool ok = (std::same_as<X, Replicated> && std::same_as<B, Replicated>) ||
                             (std::same_as<X, Invariant> && std::same_as<B, Invariant>) ||
                             (is_sharded_v<X> && (std::same_as<B, Replicated> || is_sharded_v<B>));
  static_assert(ok || std::same_as<X, Partial> || mixes_invariant<X, B>, SHARDEX_ERR_BIAS_NO_RULE);
  static_assert(
      !is_sharded_v<B> ||
          [] {
            if constexpr (is_sharded_v<B>)
              return B::dim == 0;
            else
              return true;
          }(),
      SHARDEX_ERR_BIAS_SHARDED_NOT_DIM0);
  /// The result's layout: x's.
  using type = X;
};

// ---- matmul(a, b), 2-d ------------------------------------------------------------
/// L is Sharded along dim D.
template <class L, int D>
inline constexpr bool sharded_on = [] {
  if constexpr (is_sharded_v<L>)
    return L::dim == D;
  else
    return false;
}();

/// The rule of a 2-d matmul(a, b), as in this file's table: whole x whole, a
/// Partial times a Replicated one, column- and row-parallel, row-sharded.
template <LayoutTag A, LayoutTag B>
struct matmul {
  /// R x R -> R, I x I -> I.
  static constexpr bool whole_whole = (std::same_as<A, Replicated> && std::same_as<B, Replicated>) ||
                                      (std::same_as<A, Invariant> && std::same_as<B, Invariant>);
  /// P x R -> P, R x P -> P.
  static constexpr bool linear_partial = (std::same_as<A, Partial> && std::same_as<B, Replicated>) ||
                                         (std::same_as<A, Replicated> && std::same_as<B, Partial>);
  /// R x S(1) -> S(1): each rank computes its columns.
  static constexpr bool column_parallel = std::same_as<A, Replicated> && sharded_on<B, 1>;
  /// S(1) x S(0) -> P: each rank contracts its slice of the inner dim.
  static constexpr bool row_parallel = sharded_on<A, 1> && sharded_on<B, 0>;
  /// S(0) x R -> S(0): each rank computes its rows.
  static constexpr bool row_sharded = sharded_on<A, 0> && std::same_as<B, Replicated>;
  /// One of the rules above applies.
  static constexpr bool ok = whole_whole || linear_partial || column_parallel || row_parallel || row_sharded;

  static_assert(ok || !mixes_invariant<A, B>, SHARDEX_ERR_INVARIANT_MEETS_PER_RANK);
  static_assert(ok || !(std::same_as<A, Partial> && std::same_as<B, Partial>), SHARDEX_ERR_MATMUL_PARTIAL_PARTIAL);
  static_assert(ok || !(sharded_on<A, 1> && !sharded_on<B, 0>), SHARDEX_ERR_MATMUL_A_CONTRACTION_SHARDED);
  static_assert(ok || !(sharded_on<B, 0> && !sharded_on<A, 1>), SHARDEX_ERR_MATMUL_B_CONTRACTION_SHARDED);
  static_assert(ok || mixes_invariant<A, B> || (std::same_as<A, Partial> && std::same_as<B, Partial>) ||
                    (sharded_on<A, 1> != sharded_on<B, 0>),
                SHARDEX_ERR_MATMUL_NO_RULE);

  /// The result's layout.
  using type = std::conditional_t<
      whole_whole, A,
      std::conditional_t<linear_partial || row_parallel, Partial,
                         std::conditional_t<column_parallel, B, std::conditional_t<row_sharded, A, Partial>>>>;
};

// ---- sums -----------------------------------------------------------------------------
/// The rule of sum(x) over all dims: a Sharded x gives a Partial scalar, other layouts keep theirs.
template <LayoutTag A>
struct sum_all {
  /// The result's layout.
  using type = std::conditional_t<is_sharded_v<A>, Partial, A>;
};

/// The rule of sum<K>(x) for an unsharded x: its layout kept.
template <LayoutTag A, int K>
struct sum_dim {
  /// The result's layout: A.
  using type = A;
};
/// sum<K>(x) of a Sharded<D> x: Partial if K == D, Sharded<D - 1> if K < D, else unchanged.
template <int D, class Ls, int K>
struct sum_dim<Sharded<D, Ls>, K> {
  /// The result's layout.
  using type = std::conditional_t<K == D, Partial, std::conditional_t<(K < D), Sharded<D - 1, Ls>, Sharded<D, Ls>>>;
};

// ---- transpose, 2-d -------------------------------------------------------------------
/// The rule of a 2-d transpose(x) for an unsharded x: its layout kept.
template <LayoutTag A>
struct transpose {
  /// The result's layout: A.
  using type = A;
};
/// transpose(x) of a Sharded<D> x (D < 2): Sharded<1 - D>, the same lengths.
template <int D, class Ls>
struct transpose<Sharded<D, Ls>> {
  static_assert(D < 2, SHARDEX_ERR_TRANSPOSE_DIM);
  /// The result's layout.
  using type = Sharded<(D < 2 ? 1 - D : 0), Ls>;
};

}  // namespace shardex::rules
