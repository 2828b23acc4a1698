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

template <class...>
inline constexpr bool always_false = false;

template <class A, class B>
inline constexpr bool mixes_invariant = (std::same_as<A, Invariant>) != (std::same_as<B, Invariant>);

template <class A, class B>
inline constexpr bool same_placement = std::same_as<A, B> || (is_sharded_v<A> && is_sharded_v<B> && [] {
                                         if constexpr (is_sharded_v<A> && is_sharded_v<B>)
                                           return A::dim == B::dim;
                                         else
                                           return false;
                                       }());

// ---- a + b, a - b ------------------------------------------------------------
template <LayoutTag A, LayoutTag B>
struct add {
  static_assert(!mixes_invariant<A, B>, SHARDEX_ERR_INVARIANT_MEETS_PER_RANK);
  static_assert(mixes_invariant<A, B> || same_placement<A, B>, SHARDEX_ERR_ADD_LAYOUTS);
  using type = A;
};

// ---- a * b --------------------------------------------------------------------
template <LayoutTag A, LayoutTag B>
struct mul {
  static constexpr bool partial_times_whole = (std::same_as<A, Partial> && std::same_as<B, Replicated>) ||
                                              (std::same_as<A, Replicated> && std::same_as<B, Partial>);
  static_assert(!(std::same_as<A, Partial> && std::same_as<B, Partial>), SHARDEX_ERR_MUL_PARTIAL_PARTIAL);
  static_assert(!mixes_invariant<A, B>, SHARDEX_ERR_INVARIANT_MEETS_PER_RANK);
  static_assert(mixes_invariant<A, B> || partial_times_whole || same_placement<A, B> ||
                    (std::same_as<A, Partial> && std::same_as<B, Partial>),
                SHARDEX_ERR_MUL_LAYOUTS);
  using type = std::conditional_t<partial_times_whole, Partial, A>;
};

// ---- a / b --------------------------------------------------------------------
/// As a * b (each part of a Partial a divided by the same whole b stays a
/// part), but never by a Partial b.
template <LayoutTag A, LayoutTag B>
struct div {
  static_assert(!std::same_as<B, Partial>, SHARDEX_ERR_DIV_BY_PARTIAL);
  using type = typename std::conditional_t<std::same_as<B, Partial>, std::type_identity<A>, mul<A, B>>::type;
};

// ---- a + c (a constant) -------------------------------------------------------------
template <LayoutTag A>
struct shift {
  static_assert(!std::same_as<A, Partial>, SHARDEX_ERR_SHIFT_PARTIAL);
  using type = A;
};

// ---- non-linear unary functions ---------------------------------------------------
template <LayoutTag A>
struct nonlinear {
  static_assert(!std::same_as<A, Partial>, SHARDEX_ERR_NONLINEAR_PARTIAL);
  using type = A;
};

// ---- add_bias(x, b) -------------------------------------------------------------
template <LayoutTag X, LayoutTag B>
struct bias {
  static_assert(!std::same_as<X, Partial>, SHARDEX_ERR_BIAS_PARTIAL);
  static_assert(std::same_as<X, Partial> || !mixes_invariant<X, B>, SHARDEX_ERR_INVARIANT_MEETS_PER_RANK);
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
  using type = X;
};

// ---- matmul(a, b), 2-d ------------------------------------------------------------
template <class L, int D>
inline constexpr bool sharded_on = [] {
  if constexpr (is_sharded_v<L>)
    return L::dim == D;
  else
    return false;
}();

template <LayoutTag A, LayoutTag B>
struct matmul {
  static constexpr bool whole_whole = (std::same_as<A, Replicated> && std::same_as<B, Replicated>) ||
                                      (std::same_as<A, Invariant> && std::same_as<B, Invariant>);
  static constexpr bool linear_partial = (std::same_as<A, Partial> && std::same_as<B, Replicated>) ||
                                         (std::same_as<A, Replicated> && std::same_as<B, Partial>);
  static constexpr bool column_parallel = std::same_as<A, Replicated> && sharded_on<B, 1>;
  static constexpr bool row_parallel = sharded_on<A, 1> && sharded_on<B, 0>;
  static constexpr bool row_sharded = sharded_on<A, 0> && std::same_as<B, Replicated>;
  static constexpr bool ok = whole_whole || linear_partial || column_parallel || row_parallel || row_sharded;

  static_assert(ok || !mixes_invariant<A, B>, SHARDEX_ERR_INVARIANT_MEETS_PER_RANK);
  static_assert(ok || !(std::same_as<A, Partial> && std::same_as<B, Partial>), SHARDEX_ERR_MATMUL_PARTIAL_PARTIAL);
  static_assert(ok || !(sharded_on<A, 1> && !sharded_on<B, 0>), SHARDEX_ERR_MATMUL_A_CONTRACTION_SHARDED);
  static_assert(ok || !(sharded_on<B, 0> && !sharded_on<A, 1>), SHARDEX_ERR_MATMUL_B_CONTRACTION_SHARDED);
  static_assert(ok || mixes_invariant<A, B> || (std::same_as<A, Partial> && std::same_as<B, Partial>) ||
                    (sharded_on<A, 1> != sharded_on<B, 0>),
                SHARDEX_ERR_MATMUL_NO_RULE);

  using type = std::conditional_t<
      whole_whole, A,
      std::conditional_t<linear_partial || row_parallel, Partial,
                         std::conditional_t<column_parallel, B, std::conditional_t<row_sharded, A, Partial>>>>;
};

// ---- sums -----------------------------------------------------------------------------
template <LayoutTag A>
struct sum_all {
  using type = std::conditional_t<is_sharded_v<A>, Partial, A>;
};

template <LayoutTag A, int K>
struct sum_dim {
  using type = A;
};
template <int D, class Ls, int K>
struct sum_dim<Sharded<D, Ls>, K> {
  using type = std::conditional_t<K == D, Partial, std::conditional_t<(K < D), Sharded<D - 1, Ls>, Sharded<D, Ls>>>;
};

// ---- transpose, 2-d -------------------------------------------------------------------
template <LayoutTag A>
struct transpose {
  using type = A;
};
template <int D, class Ls>
struct transpose<Sharded<D, Ls>> {
  static_assert(D < 2, SHARDEX_ERR_TRANSPOSE_DIM);
  using type = Sharded<(D < 2 ? 1 - D : 0), Ls>;
};

}  // namespace shardex::rules
