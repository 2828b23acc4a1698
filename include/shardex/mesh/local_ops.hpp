// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The local operations on mesh tensors: matmul, add_bias, +, -, *,
/// /, scaling, + c and - c, gelu / relu / tanh / exp / sqrt / rsqrt / log / sigmoid / silu,
/// sum and sum<k>, transpose. Each is the
/// single-axis operation of expr/ run on the local tensors, and its layout
/// rule (expr/rules.hpp) applies axis by axis: matmul of (dp: S(0), tp: R)
/// and (dp: R, tp: S(1)) is (dp: S(0), tp: S(1)). Nothing communicates.
///
/// They evaluate at once (a mesh tensor is not an expression template): the
/// element-wise ones are not fused across calls as single-axis expressions are.
///
/// Misuse is a compile error: operands of different mesh types
/// (SHARDEX_ERR_MESH_MIXED_MESHES), an Invariant operand meeting a per-rank
/// one on some axis (SHARDEX_ERR_MESH_INVARIANT_MEETS_PER_RANK: replicate<axis>
/// it first), and every single-axis rule's own error on the axis it fails.
/// At run time, operands sharded on one axis with different lengths, or on
/// two meshes of the same type, throw on every rank.

#include <boost/hana/at.hpp>
#include <boost/hana/range.hpp>
#include <boost/hana/unpack.hpp>
#include <algorithm>
#include <string>
#include <tuple>

#include "shardex/core/compile_errors.hpp"
#include "shardex/core/error.hpp"
#include "shardex/expr/elementwise.hpp"
#include "shardex/expr/matmul.hpp"
#include "shardex/expr/rules.hpp"
#include "shardex/expr/sum.hpp"
#include "shardex/expr/transpose.hpp"
#include "shardex/mesh/transitions.hpp"

namespace shardex {

namespace detail {

/// The layout rule of an operation that keeps its operand's layout (x * c, -x).
template <LayoutTag A>
struct keep_layout {
  using type = A;
};
template <int K>
struct sum_dim_rule {
  template <LayoutTag A>
  using rule = rules::sum_dim<A, K>;
};

/// On axis `Axis`, the operands' layouts `L...`: an Invariant one must not
/// meet a per-rank one. A class template, so that the compiler's
/// "In instantiation of" line names the axis and the layouts.
template <class Axis, class... L>
struct invariant_meets_per_rank_on {
  static constexpr int invariant = (std::same_as<L, Invariant> + ...);
  static constexpr bool mixed = invariant != 0 && invariant != static_cast<int>(sizeof...(L));
  static_assert(!mixed, SHARDEX_ERR_MESH_INVARIANT_MEETS_PER_RANK);
};

/// On some axis of mesh M, an Invariant operand meets a non-Invariant one.
template <class M, class... Ls>
constexpr bool mixes_invariant_on_an_axis() {
  bool mixed = false;
  for_each_axis<M::axis_count>([&](auto k) {
    constexpr std::size_t i = decltype(k)::value;
    mixed = mixed || invariant_meets_per_rank_on<typename M::template axis_type<i>, layout_at_t<Ls, i>...>::mixed;
  });
  return mixed;
}

/// The lengths of axis i's result: those of the first operand sharded there.
template <class R, std::size_t I, class X, class... Xs>
layout_mapping<R> result_lengths(const X& x, const Xs&... xs) {
  if constexpr (!is_sharded_v<R>)
    return {};
  else if constexpr (is_sharded_v<typename X::template layout_at<I>>)
    return carry_lengths<R, typename X::template layout_at<I>>(x.template mapping<I>());
  else if constexpr (sizeof...(Xs) > 0)
    return result_lengths<R, I>(xs...);
  else
    return {};
}

/// The lengths of axis I of the result R: the local result's on the last
/// axis, else those of the first operand sharded on I.
template <class R, std::size_t I, class Out, class Operands>
auto result_mapping(const Out& out, const Operands& xs) {
  if constexpr (I == R::last)
    return out.mapping();
  else
    return std::apply([](const auto&... x) { return result_lengths<typename R::template layout_at<I>, I>(x...); }, xs);
}

template <class R, class Out, class Operands, std::size_t... I>
typename R::mappings_type result_mappings(const Out& out, const Operands& xs, std::index_sequence<I...>) {
  return typename R::mappings_type(result_mapping<R, I>(out, xs)...);
}

/// Operands on one mesh; operands sharded on one axis split it alike.
template <class X0, class... Xs>
void check_operands(const char* op, const X0& x0, const Xs&... xs) {
  const auto where = [&] {
    return std::string("shardex::") + op + " on world rank " + std::to_string(x0.mesh().world().rank());
  };
  x0.require_valid(op);
  (xs.require_valid(op), ...);
  if (!((xs.mesh() == x0.mesh()) && ...))
    throw invalid_argument(where() + ": the operands live on two different meshes (" + x0.describe() + "; " +
                           (std::string() + ... + (xs.describe() + "; ")) + "); make them on one Mesh object");
  for_each_axis<X0::axis_count>([&](auto k) {
    constexpr std::size_t i = decltype(k)::value;
    std::string first;
    bool differ = false;
    const auto look = [&](const auto& x) {
      if constexpr (is_sharded_v<typename std::remove_cvref_t<decltype(x)>::template layout_at<i>>) {
        const std::string ls = to_string(x.template mapping<i>().lengths());
        if (first.empty())
          first = ls;
        else
          differ = differ || ls != first;
      }
    };
    look(x0);
    (look(xs), ...);
    if (differ)
      throw invalid_argument(where() + ": on axis " + std::string(X0::mesh_type::names()[i]) +
                             " the operands are split with different lengths: " + x0.describe() + "; " +
                             (std::string() + ... + (xs.describe() + "; ")) + "redistribute<" +
                             std::string(X0::mesh_type::names()[i]) + ", ...>(x, lengths) one of them first");
  });
}

/// The global shape of a result R whose local tensor has shape `seen` (as
/// seen along the last axis): the dims other axes shard made whole.
template <class R, std::size_t I>
void make_dim_whole(Shape& s, const typename R::mappings_type& ms) {
  using L = typename R::template layout_at<I>;
  if constexpr (is_sharded_v<L>) {
    std::int64_t sum = 0;
    for (auto l : hana::at_c<I>(ms).lengths()) sum += l;
    s = s.with(L::dim, sum);
  }
}
template <class R, std::size_t... I>
Shape whole_shape(Shape seen, const typename R::mappings_type& ms, std::index_sequence<I...>) {
  (make_dim_whole<R, I>(seen, ms), ...);
  return seen;
}

/// `f` (a single-axis operation) on the local tensors of evaluated mesh
/// tensors, its result's layout `Rule` on every axis.
template <template <class...> class Rule, class F, class X0, class... Xs>
auto apply_local(const char* op, const F& f, const X0& x0, const Xs&... xs) {
  using T = typename X0::value_type;
  using M = typename X0::mesh_type;
  using Ls = per_axis_rule_t<Rule, typename X0::layouts, typename Xs::layouts...>;
  using R = MeshTensor<T, M, Ls>;
  check_operands(op, x0, xs...);
  auto out = eval(f(x0.inner(), xs.inner()...));
  const auto operands = std::tie(x0, xs...);
  auto ms = result_mappings<R>(out, operands, std::make_index_sequence<R::axis_count>());
  const Shape global = whole_shape<R>(out.shape(), ms, std::make_index_sequence<R::last>());
  auto r = R::assemble(x0.mesh(), global, std::move(ms), std::move(out));
  if (mesh_step_plan()) {
    std::string from = "(" + x0.layouts_str() + ")";
    ((from += " x (" + xs.layouts_str() + ")"), ...);
    mesh_step_plan()->steps.push_back(PlanStep::local(op, from, "(" + r.layouts_str() + ")"));
  }
  return r;
}

/// Evaluates the mesh expressions, checks the compile-time rules that are
/// the mesh's own, then applies.
template <template <class...> class Rule, class F, class... X>
auto mesh_local(const char* op, const F& f, const X&... xs) {
  using M = typename std::tuple_element_t<0, std::tuple<X...>>::mesh_type;
  constexpr bool one_mesh = (std::same_as<typename X::mesh_type, M> && ...);
  static_assert(one_mesh, SHARDEX_ERR_MESH_MIXED_MESHES);
  if constexpr (one_mesh) {
    constexpr bool mixed = mixes_invariant_on_an_axis<M, typename decltype(mesh_eval(xs))::layouts...>();
    if constexpr (!mixed) {
      // One lazy transition used twice (y * y) is evaluated once.
      if constexpr (sizeof...(X) == 2 && (is_along_axis<X>::value && ...)) {
        const auto& [a, b] = std::tie(xs...);
        if constexpr (std::same_as<decltype(a), decltype(b)>) {
          if (&a == &b) {
            const auto t = mesh_eval(a);
            return apply_local<Rule>(op, f, t, t);
          }
        }
      }
      return apply_local<Rule>(op, f, mesh_eval(xs)...);
    }
  }
}

}  // namespace detail

namespace detail {
// The single-axis operations as function objects (what apply_local runs on
// the local tensors).
struct matmul_fn {
  template <class A, class B>
  auto operator()(const A& a, const B& b) const {
    return matmul(a, b);
  }
};
struct add_bias_fn {
  template <class A, class B>
  auto operator()(const A& a, const B& b) const {
    return add_bias(a, b);
  }
};
struct add_fn {
  template <class A, class B>
  auto operator()(const A& a, const B& b) const {
    return a + b;
  }
};
struct sub_fn {
  template <class A, class B>
  auto operator()(const A& a, const B& b) const {
    return a - b;
  }
};
struct mul_fn {
  template <class A, class B>
  auto operator()(const A& a, const B& b) const {
    return a * b;
  }
};
struct neg_fn {
  template <class A>
  auto operator()(const A& a) const {
    return -a;
  }
};
struct div_fn {
  template <class A, class B>
  auto operator()(const A& a, const B& b) const {
    return a / b;
  }
};
/// The element-wise function `op` (device/elementwise_ops.hpp; with its
/// parameter, as Shift's c) of a local tensor.
template <class Op>
struct unary_fn {
  Op op{};
  template <class A>
  auto operator()(const A& a) const {
    return Elementwise<Op, A>(op, a);
  }
};
/// A non-linear element-wise function of a mesh tensor, named as its op.
template <class Op, class A>
auto mesh_nonlinear(const A& a) {
  return mesh_local<rules::nonlinear>(Op::name, unary_fn<Op>{}, a);
}
struct sum_fn {
  template <class A>
  auto operator()(const A& a) const {
    return sum(a);
  }
};
template <int K>
struct sum_dim_fn {
  template <class A>
  auto operator()(const A& a) const {
    return sum<K>(a);
  }
};
struct transpose_fn {
  template <class A>
  auto operator()(const A& a) const {
    return transpose(a);
  }
};
}  // namespace detail

template <MeshExpr A, MeshExpr B>
auto matmul(const A& a, const B& b) {
  return detail::mesh_local<rules::matmul>("matmul", detail::matmul_fn{}, a, b);
}
namespace detail {
/// add_bias's shapes, on global facts (so every rank decides alike): b is
/// 1-d of x's last extent, and on every axis but the last (whose check is the
/// one-axis add_bias's) x is split along its last dim exactly where b is.
template <class X, class B>
void check_bias(const X& x, const B& b) {
  x.require_valid("shardex::add_bias");
  b.require_valid("shardex::add_bias");
  const int last_dim = x.shape().rank() - 1;
  std::string err;
  if (b.shape().rank() != 1 || last_dim < 0 || b.shape()[0] != x.shape()[last_dim])
    err = "b must be 1-d of x's last extent";
  for_each_axis<X::last>([&](auto k) {
    constexpr std::size_t i = decltype(k)::value;
    using LX = typename X::template layout_at<i>;
    using LB = typename B::template layout_at<i>;
    bool x_last = false;
    if constexpr (is_sharded_v<LX>) x_last = LX::dim == last_dim;
    if (err.empty() && x_last != is_sharded_v<LB>)
      err = "on axis " + std::string(X::mesh_type::names()[i]) +
            (x_last ? " x is split along its last dim, so b must be Sharded<0> with the same lengths"
                    : " b is split but x is not split along its last dim");
    if constexpr (is_sharded_v<LX> && is_sharded_v<LB>)
      if (err.empty() && x_last &&
          !std::ranges::equal(x.template mapping<i>().lengths(), b.template mapping<i>().lengths()))
        err =
            "on axis " + std::string(X::mesh_type::names()[i]) + " x's last dim and b are split with different lengths";
  });
  if (!err.empty())
    throw invalid_argument("shardex::add_bias(x, b) on world rank " + std::to_string(x.mesh().world().rank()) + ": " +
                           err + " (x " + x.describe() + ", b " + b.describe() + ")");
}
}  // namespace detail

/// x + b with the 1-d b broadcast along x's last dim (rules::bias per axis).
template <MeshExpr X, MeshExpr B>
auto add_bias(const X& x, const B& b) {
  const auto xe = mesh_eval(x);
  const auto be = mesh_eval(b);
  detail::check_bias(xe, be);
  return detail::mesh_local<rules::bias>("add_bias", detail::add_bias_fn{}, xe, be);
}
template <MeshExpr A, MeshExpr B>
auto operator+(const A& a, const B& b) {
  return detail::mesh_local<rules::add>("add", detail::add_fn{}, a, b);
}
template <MeshExpr A, MeshExpr B>
auto operator-(const A& a, const B& b) {
  return detail::mesh_local<rules::add>("sub", detail::sub_fn{}, a, b);
}
template <MeshExpr A, MeshExpr B>
auto operator*(const A& a, const B& b) {
  return detail::mesh_local<rules::mul>("mul", detail::mul_fn{}, a, b);
}
template <MeshExpr A>
auto operator-(const A& a) {
  return detail::mesh_local<detail::keep_layout>("neg", detail::neg_fn{}, a);
}
template <MeshExpr A>
auto operator*(const A& a, double c) {
  return detail::mesh_local<detail::keep_layout>("scale", detail::unary_fn<ops::Scale>{ops::Scale{c}}, a);
}
template <MeshExpr A>
auto operator*(double c, const A& a) {
  return a * c;
}
/// a + c: never of a Partial axis (rules::shift).
template <MeshExpr A>
auto operator+(const A& a, double c) {
  return detail::mesh_local<rules::shift>("shift", detail::unary_fn<ops::Shift>{ops::Shift{c}}, a);
}
template <MeshExpr A>
auto operator+(double c, const A& a) {
  return a + c;
}
template <MeshExpr A>
auto operator-(const A& a, double c) {
  return a + (-c);
}
template <MeshExpr A>
auto operator-(double c, const A& a) {
  return -a + c;
}
template <MeshExpr A>
auto operator/(const A& a, double c) {
  return detail::mesh_local<detail::keep_layout>("scale", detail::unary_fn<ops::Scale>{ops::Scale{1.0 / c}}, a);
}
/// a / b, never by a Partial b (rules::div).
template <MeshExpr A, MeshExpr B>
auto operator/(const A& a, const B& b) {
  return detail::mesh_local<rules::div>("div", detail::div_fn{}, a, b);
}
template <MeshExpr A>
auto gelu(const A& a) {
  return detail::mesh_nonlinear<ops::Gelu>(a);
}
template <MeshExpr A>
auto relu(const A& a) {
  return detail::mesh_nonlinear<ops::Relu>(a);
}
template <MeshExpr A>
auto tanh(const A& a) {
  return detail::mesh_nonlinear<ops::Tanh>(a);
}
template <MeshExpr A>
auto exp(const A& a) {
  return detail::mesh_nonlinear<ops::Exp>(a);
}
template <MeshExpr A>
auto sqrt(const A& a) {
  return detail::mesh_nonlinear<ops::Sqrt>(a);
}
template <MeshExpr A>
auto rsqrt(const A& a) {
  return detail::mesh_nonlinear<ops::Rsqrt>(a);
}
template <MeshExpr A>
auto log(const A& a) {
  return detail::mesh_nonlinear<ops::Log>(a);
}
template <MeshExpr A>
auto sigmoid(const A& a) {
  return detail::mesh_nonlinear<ops::Sigmoid>(a);
}
template <MeshExpr A>
auto silu(const A& a) {
  return detail::mesh_nonlinear<ops::Silu>(a);
}
/// The sum of all elements: S(d) -> P on its axis, the others keep.
template <MeshExpr A>
auto sum(const A& a) {
  return detail::mesh_local<rules::sum_all>("sum", detail::sum_fn{}, a);
}
/// The sum over dim K.
template <int K, MeshExpr A>
auto sum(const A& a) {
  return detail::mesh_local<detail::sum_dim_rule<K>::template rule>("sum", detail::sum_dim_fn<K>{}, a);
}
/// The transpose of a 2-d tensor: S(0) <-> S(1) on every axis.
template <MeshExpr A>
auto transpose(const A& a) {
  return detail::mesh_local<rules::transpose>("transpose", detail::transpose_fn{}, a);
}

}  // namespace shardex
