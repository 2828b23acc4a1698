#pragma once
/// @file
/// @brief The layout rules of local operations, and the catalogue of the
/// compile errors they give (as Eigen's StaticAssert.h collects its messages).
///
/// A local operation runs on each rank's local part without communication;
/// its rule says what layout the result has, as sharding-propagation rules do
/// in the peers. A missing rule is a compile error that names the operation,
/// the problem and the fix; the offending layouts appear in the compiler's
/// "In instantiation of ..." line just above. Every message here is pinned by
/// a compile-fail case in test/fail/.
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

#include "shardex/layout/layouts.hpp"

namespace shardex::rules {

template <class...> inline constexpr bool always_false = false;

template <class A, class B>
inline constexpr bool mixes_invariant = (std::same_as<A, Invariant>) != (std::same_as<B, Invariant>);

template <class A, class B>
inline constexpr bool same_placement = std::same_as<A, B> || (is_sharded_v<A> && is_sharded_v<B> && [] {
  if constexpr (is_sharded_v<A> && is_sharded_v<B>) return A::dim == B::dim;
  else return false;
}());

// ---- a + b, a - b ------------------------------------------------------------
template <LayoutTag A, LayoutTag B>
struct add {
  static_assert(!mixes_invariant<A, B>,
                "shardex: an Invariant tensor meets a per-rank tensor in a local operation; wrap the Invariant operand "
                "in replicate(x), which is where its gradient's all-reduce comes from");
  static_assert(mixes_invariant<A, B> || same_placement<A, B>,
                "shardex::operator+(a, b) and operator-(a, b) require a and b to have the same layout; insert "
                "redistribute<To>(...) on one operand to bring it to the other's layout");
  using type = A;
};

// ---- a * b --------------------------------------------------------------------
template <LayoutTag A, LayoutTag B>
struct mul {
  static constexpr bool partial_times_whole = (std::same_as<A, Partial> && std::same_as<B, Replicated>) ||
                                              (std::same_as<A, Replicated> && std::same_as<B, Partial>);
  static_assert(!(std::same_as<A, Partial> && std::same_as<B, Partial>),
                "shardex::operator*(a, b) with a and b both Partial: the product of two pending sums is not the sum "
                "of the products; all_reduce one operand first");
  static_assert(!mixes_invariant<A, B>,
                "shardex: an Invariant tensor meets a per-rank tensor in a local operation; wrap the Invariant operand "
                "in replicate(x), which is where its gradient's all-reduce comes from");
  static_assert(mixes_invariant<A, B> || partial_times_whole || same_placement<A, B> ||
                    (std::same_as<A, Partial> && std::same_as<B, Partial>),
                "shardex::operator*(a, b) requires a and b to have the same layout (or one Partial and one "
                "Replicated); insert redistribute<To>(...) on one operand");
  using type = std::conditional_t<partial_times_whole, Partial, A>;
};

// ---- non-linear unary functions ---------------------------------------------------
template <LayoutTag A>
struct nonlinear {
  static_assert(!std::same_as<A, Partial>,
                "shardex: a non-linear function (gelu, relu, tanh, exp) of a Partial tensor is not the sum of the "
                "function of its parts; reduce first: all_reduce(x) or reduce_scatter<Sharded<D, ...>>(x)");
  using type = A;
};

// ---- add_bias(x, b) -------------------------------------------------------------
template <LayoutTag X, LayoutTag B>
struct bias {
  static_assert(!std::same_as<X, Partial>,
                "shardex::add_bias(x, b) with x Partial: the bias would be added once per rank to a pending sum; "
                "reduce x first (all_reduce or reduce_scatter), then add the bias");
  static_assert(std::same_as<X, Partial> || !mixes_invariant<X, B>,
                "shardex: an Invariant tensor meets a per-rank tensor in a local operation; wrap the Invariant operand "
                "in replicate(x), which is where its gradient's all-reduce comes from");
  static constexpr bool ok = (std::same_as<X, Replicated> && std::same_as<B, Replicated>) ||
                             (std::same_as<X, Invariant> && std::same_as<B, Invariant>) ||
                             (is_sharded_v<X> && (std::same_as<B, Replicated> || is_sharded_v<B>));
  static_assert(ok || std::same_as<X, Partial> || mixes_invariant<X, B>,
                "shardex::add_bias(x, b) has no rule for these layouts: use (Replicated, Replicated), (Sharded along a "
                "row dim, Replicated), or (Sharded along the last dim, Sharded<0> with the same lengths)");
  static_assert(!is_sharded_v<B> || [] {
    if constexpr (is_sharded_v<B>) return B::dim == 0;
    else return true;
  }(), "shardex::add_bias(x, b): a sharded bias is 1-d, so it must be Sharded<0, ...>");
  using type = X;
};

// ---- matmul(a, b), 2-d ------------------------------------------------------------
template <class L, int D>
inline constexpr bool sharded_on = [] {
  if constexpr (is_sharded_v<L>) return L::dim == D;
  else return false;
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

  static_assert(ok || !mixes_invariant<A, B>,
                "shardex: an Invariant tensor meets a per-rank tensor in a local operation; wrap the Invariant operand "
                "in replicate(x), which is where its gradient's all-reduce comes from");
  static_assert(ok || !(std::same_as<A, Partial> && std::same_as<B, Partial>),
                "shardex::matmul(a, b) with a and b both Partial: the product of two pending sums is not the sum of "
                "the products; all_reduce one operand first");
  static_assert(ok || !(sharded_on<A, 1> && !sharded_on<B, 0>),
                "shardex::matmul(a, b): a is sharded along its contraction dim (Sharded<1>) but b is not sharded along "
                "its rows; make b Sharded<0> with the same lengths (row-parallel: the result is Partial) or all_gather a");
  static_assert(ok || !(sharded_on<B, 0> && !sharded_on<A, 1>),
                "shardex::matmul(a, b): b is sharded along its contraction dim (Sharded<0>) but a is not sharded along "
                "its columns; make a Sharded<1> with the same lengths (row-parallel: the result is Partial) or "
                "all_gather b");
  static_assert(ok || mixes_invariant<A, B> || (std::same_as<A, Partial> && std::same_as<B, Partial>) ||
                    (sharded_on<A, 1> != sharded_on<B, 0>),
                "shardex::matmul(a, b) has no layout rule for these operands; the rules are R x R -> R, I x I -> I, "
                "P x R -> P, R x P -> P, R x S<1> -> S<1> (column-parallel), S<1> x S<0> -> P (row-parallel), "
                "S<0> x R -> S<0>; insert redistribute<To>(...) to reach one of them");

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
  static_assert(D < 2, "shardex::transpose(x) is for 2-d tensors, but x is Sharded along a dim >= 2");
  using type = Sharded<(D < 2 ? 1 - D : 0), Ls>;
};

}  // namespace shardex::rules
