// SPDX-License-Identifier: MIT
// Meshes (issue #13): every transition along each axis of every mesh shape
// the world size allows (1 x n, n x 1, 2 x 2, 2 x 3, 3 x 2, ...), with the
// other axis Invariant, Partial or Sharded, on uneven lengths with zeros, in
// double (and float for the sharded case):
//
// - forward: the result holds the input's logical value, checked rank by rank
//   against the global array (a single-rank oracle): its block where an axis
//   shards, the sum over the axis (a raw MPI all-reduce, not the library's
//   transitions) where an axis is Partial;
// - backward: for y = T(x) and a random dy in y's dual layouts,
//   backward(y, dy) leaves in x.grad() the logical value of dy (checked the
//   same way), and the dot-product test <T(x), dy> == <x, T*(dy)> holds, the
//   pairing summed over the world with an Invariant axis counted once;
// - explain names the axis of every step, and chains along one axis are
//   simplified as on one axis;
// - a training step's derived backward all-reduces the data-parallel
//   gradients ("all_reduce<dp>"), and the gradients equal an unsharded run's;
// - bad meshes, lengths and operands throw on every rank.
// Values are small integers, so every sum is exact in float and double.
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <shardex.hpp>
#include <shardex/mesh.hpp>

#include "support/dist.hpp"

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_mesh {

using namespace shardex;

namespace {

using dp = axis<"dp">;
using tp = axis<"tp">;
using M = Mesh<dp, tp>;
using Lens = std::vector<std::int64_t>;
using S0 = Sharded<0>;
using S1 = Sharded<1>;
using S2 = Sharded<2>;

const mpi::Communicator& world() { return test::world(); }

/// Every (dp, tp) shape of the world.
std::vector<std::array<int, 2>> mesh_shapes() {
  std::vector<std::array<int, 2>> out;
  for (int a = 1; a <= world().size(); ++a)
    if (world().size() % a == 0) out.push_back({a, world().size() / a});
  return out;
}

/// n lengths summing to `extent`: random (zeros likely), or all equal.
Lens lengths_for(std::mt19937_64& rng, int n, std::int64_t extent, bool even) {
  return even ? Lens(static_cast<std::size_t>(n), extent / n) : test::random_lengths(rng, n, extent);
}

template <class L>
layout_mapping<L> mapping_for(std::mt19937_64& rng, int n, std::int64_t extent, bool even) {
  if constexpr (is_sharded_v<L>)
    return layout_mapping<L>(lengths_for(rng, n, extent, even));
  else
    return {};
}

/// The global shape of a test: 3 x 4 x 5 for random lengths; for even ones,
/// every extent the world size (which both axis sizes divide).
Shape shape_for(bool even) {
  const std::int64_t n = world().size();
  return even ? Shape{n, n, n} : Shape{3, 4, 5};
}

std::int64_t linear(const Shape& g, std::span<const std::int64_t> idx) {
  std::int64_t k = 0;
  for (int d = 0; d < g.rank(); ++d) k = k * g[d] + idx[static_cast<std::size_t>(d)];
  return k;
}

/// Calls f(local element index, global index) for this rank's part of x.
template <class X, class F>
void for_each_local(const X& x, F&& f) {
  const Shape& g = x.shape();
  std::vector<std::int64_t> base(static_cast<std::size_t>(g.rank()), 0);
  detail::for_each_axis<X::axis_count>([&](auto k) {
    constexpr std::size_t i = decltype(k)::value;
    using L = typename X::template layout_at<i>;
    if constexpr (is_sharded_v<L>)
      for (int r = 0; r < x.mesh().coord(i); ++r)
        base[L::dim] += x.template mapping<i>().lengths()[static_cast<std::size_t>(r)];
  });
  const Shape& ls = x.local_shape();
  std::vector<std::int64_t> idx(base.size());
  for (std::int64_t e = 0; e < ls.numel(); ++e) {
    std::int64_t rem = e;
    for (int d = ls.rank() - 1; d >= 0; --d) {
      idx[static_cast<std::size_t>(d)] = rem % ls[d] + base[static_cast<std::size_t>(d)];
      rem /= ls[d];
    }
    f(e, std::span<const std::int64_t>(idx));
  }
}

/// A small integer for (global element, coordinate, axis, salt).
std::int64_t small(std::int64_t k, int c, std::size_t axis, std::uint64_t salt) {
  return static_cast<std::int64_t>(
             (static_cast<std::uint64_t>(k) * 7 + static_cast<std::uint64_t>(c) * 3 + axis * 11 + salt) % 5) -
         2;
}

/// A mesh tensor holding the logical value `value` (row-major, global shape),
/// with every Partial axis split into summands that differ across its ranks.
template <class T, class Ls, class Mesh = M>
MeshTensor<T, Mesh, Ls> make(const Mesh& mesh, const Shape& g, typename Ls::mappings ms, const std::vector<T>& value,
                             std::uint64_t salt) {
  auto x = MeshTensor<T, Mesh, Ls>::zeros(mesh, g, std::move(ms));
  for_each_local(x, [&](std::int64_t e, std::span<const std::int64_t> idx) {
    const std::int64_t k = linear(g, idx);
    std::int64_t v = static_cast<std::int64_t>(value[static_cast<std::size_t>(k)]);
    detail::for_each_axis<Ls::count>([&](auto a) {
      constexpr std::size_t i = decltype(a)::value;
      if constexpr (std::same_as<layout_at_t<Ls, i>, Partial>) {
        const int c = mesh.coord(i), n = mesh.size(i);
        if (c == 0)
          for (int c2 = 1; c2 < n; ++c2) v -= small(k, c2, i, salt);
        else
          v = small(k, c, i, salt);
      }
    });
    x.data()[e] = static_cast<T>(v);
  });
  return x;
}

template <class T>
std::vector<T> random_value(const Shape& g, std::uint64_t seed) {
  std::vector<T> v(static_cast<std::size_t>(g.numel()));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<T>(small(static_cast<std::int64_t>(i) * 13 + 1, 0, 0, seed) * 3 + 1);
  return v;
}

/// Whether x holds `value` on this rank: its local part, summed over every
/// Partial axis with the backend's raw all-reduce, is the expected block.
template <class X>
bool holds(const X& x, const std::vector<typename X::value_type>& value) {
  using T = typename X::value_type;
  std::vector<T> local(x.local().begin(), x.local().end());
  detail::for_each_axis<X::axis_count>([&](auto a) {
    constexpr std::size_t i = decltype(a)::value;
    if constexpr (std::same_as<typename X::template layout_at<i>, Partial>)
      x.mesh().comm(i).all_reduce(local.data(), static_cast<std::int64_t>(local.size()));
  });
  bool ok = true;
  for_each_local(x, [&](std::int64_t e, std::span<const std::int64_t> idx) {
    ok = ok && local[static_cast<std::size_t>(e)] == value[static_cast<std::size_t>(linear(x.shape(), idx))];
  });
  return ok;
}

/// sum over the world of <a_r, b_r>, a rank counted only at coordinate 0 of
/// every axis where a's layout is Invariant (one shared value, counted once).
template <class A, class B>
double pairing(const A& a, const B& b) {
  bool counted = true;
  detail::for_each_axis<A::axis_count>([&](auto k) {
    constexpr std::size_t i = decltype(k)::value;
    if constexpr (std::same_as<typename A::template layout_at<i>, Invariant>)
      counted = counted && a.mesh().coord(i) == 0;
  });
  double s = 0;
  if (counted)
    for (std::int64_t e = 0; e < a.size(); ++e)
      s += static_cast<double>(a.data()[e]) * static_cast<double>(b.data()[e]);
  world().all_reduce(&s, 1);
  return s;
}

template <class L>
std::int64_t extent_for(const Shape& g) {
  if constexpr (is_sharded_v<L>)
    return g[L::dim];
  else
    return 0;
}

/// The test of one transition: y = run(x) along axis I, x of layout From
/// there and Other on the other axis, random lengths where they shard.
template <class T, std::size_t I, class From, class Other, class Run>
void check(const M& mesh, std::mt19937_64& rng, bool even, const std::string& what, Run run) {
  using Ls = std::conditional_t<I == 0, per_axis<From, Other>, per_axis<Other, From>>;
  using L0 = layout_at_t<Ls, 0>;
  using L1 = layout_at_t<Ls, 1>;
  const Shape g = shape_for(even);
  typename Ls::mappings ms(mapping_for<L0>(rng, mesh.size(0), extent_for<L0>(g), even),
                           mapping_for<L1>(rng, mesh.size(1), extent_for<L1>(g), even));
  const auto value = random_value<T>(g, rng());
  const auto dvalue = random_value<T>(g, rng());
  auto x = make<T, Ls>(mesh, g, ms, value, 1);
  x.requires_grad();
  const auto y = mesh_eval(run(x));
  using Y = std::remove_cvref_t<decltype(y)>;
  const std::string where = what + " on the " + mesh.str() + ": x " + x.describe() + ", y " + y.describe();
  CAPTURE(where);
  CHECK(y.shape() == g);
  CHECK(test::all_ranks(holds(y, value)));
  const auto dy = make<T, dual_layouts_t<typename Y::layouts>>(mesh, g, y.dual_mappings(), dvalue, 2);
  backward(y, dy);
  SHARDEX_REQUIRE_ALL(x.has_grad());
  CHECK(test::all_ranks(holds(x.grad(), dvalue)));
  CHECK(pairing(y, dy) == pairing(x, x.grad()));
}

/// Every transition of the table along axis I, the other axis Other.
template <class T, std::size_t I, class Other>
void every_transition(const M& mesh, std::mt19937_64& rng, bool even) {
  using A = std::conditional_t<I == 0, dp, tp>;
  const int n = mesh.size(I);
  const Shape g = shape_for(even);
  const Lens l0 = lengths_for(rng, n, g[0], even), l2 = lengths_for(rng, n, g[2], even);
  check<T, I, S0, Other>(mesh, rng, even, "all_gather S(0) -> R", [](const auto& x) { return all_gather<A>(x); });
  check<T, I, S2, Other>(mesh, rng, even, "all_gather S(2) -> I",
                         [](const auto& x) { return all_gather<A, Invariant>(x); });
  check<T, I, Partial, Other>(mesh, rng, even, "reduce_scatter P -> S(0)",
                              [&](const auto& x) { return reduce_scatter<A, S0>(x, l0); });
  check<T, I, Partial, Other>(mesh, rng, even, "all_reduce P -> R", [](const auto& x) { return all_reduce<A>(x); });
  check<T, I, Partial, Other>(mesh, rng, even, "all_reduce P -> I",
                              [](const auto& x) { return all_reduce<A, Invariant>(x); });
  check<T, I, Replicated, Other>(mesh, rng, even, "slice R -> S(2)",
                                 [&](const auto& x) { return slice<A, S2>(x, l2); });
  check<T, I, Invariant, Other>(mesh, rng, even, "slice I -> S(0)", [&](const auto& x) { return slice<A, S0>(x, l0); });
  check<T, I, S0, Other>(mesh, rng, even, "all_to_all S(0) -> S(2)",
                         [&](const auto& x) { return all_to_all<A, S2>(x, l2); });
  check<T, I, Invariant, Other>(mesh, rng, even, "replicate I -> R", [](const auto& x) { return replicate<A>(x); });
  check<T, I, S2, Other>(mesh, rng, even, "zero_pad S(2) -> P", [](const auto& x) { return zero_pad<A>(x); });
  check<T, I, S0, Other>(mesh, rng, even, "reshard S(0) -> S(0)",
                         [&](const auto& x) { return redistribute<A, S0>(x, l0); });
  check<T, I, Partial, Other>(mesh, rng, even, "reduce_scatter then all_gather (one all_reduce)",
                              [&](const auto& x) { return all_gather<A>(reduce_scatter<A, S2>(x, l2)); });
}

}  // namespace

TEST_CASE("every transition along each axis of every mesh shape, double, the other axis I, P or S, uneven and even") {
  for (const auto& shape : mesh_shapes()) {
    const M mesh(world(), shape);
    auto rng = test::shared_rng(13 + static_cast<std::uint64_t>(shape[0]));
    for (int round = 0; round < 3; ++round) {  // two draws of uneven lengths, then even ones
      const bool even = round == 2;
      every_transition<double, 0, Invariant>(mesh, rng, even);
      every_transition<double, 0, Partial>(mesh, rng, even);
      every_transition<double, 0, S1>(mesh, rng, even);
      every_transition<double, 1, Invariant>(mesh, rng, even);
      every_transition<double, 1, Partial>(mesh, rng, even);
      every_transition<double, 1, S1>(mesh, rng, even);
    }
  }
}

TEST_CASE("every transition along each axis of every mesh shape, float, the other axis S, uneven and even") {
  for (const auto& shape : mesh_shapes()) {
    const M mesh(world(), shape);
    auto rng = test::shared_rng(29 + static_cast<std::uint64_t>(shape[1]));
    for (bool even : {false, true}) {
      every_transition<float, 0, S1>(mesh, rng, even);
      every_transition<float, 1, S1>(mesh, rng, even);
    }
  }
}

TEST_CASE("the mesh: coordinates, sub-communicators, bad sizes throw on every rank") {
  for (const auto& shape : mesh_shapes()) {
    const M mesh(world(), shape);
    CHECK(mesh.size<dp>() == shape[0]);
    CHECK(mesh.size<tp>() == shape[1]);
    CHECK(mesh.coord<dp>() * shape[1] + mesh.coord<tp>() == world().rank());  // row-major, tp fastest
    CHECK(mesh.comm<dp>().size() == shape[0]);
    CHECK(mesh.comm<tp>().size() == shape[1]);
    CHECK(mesh.comm<dp>().rank() == mesh.coord<dp>());
    CHECK(mesh.comm<tp>().rank() == mesh.coord<tp>());
  }
  const int n = world().size();
  const std::string product = "multiply to " + std::to_string(n + 1);
  CHECK_THROWS_WITH_AS(M(world(), {n + 1, 1}), doctest::Contains(product.c_str()), invalid_argument);
  CHECK_THROWS_WITH_AS(M(world(), {0, n}), doctest::Contains("axis dp has size 0"), invalid_argument);
  // Sizes that differ across ranks: every rank throws, none hangs.
  if (n > 1)
    CHECK_THROWS_AS(M(world(), world().rank() == 0 ? std::array<int, 2>{1, n} : std::array<int, 2>{n, 1}),
                    invalid_argument);
  using Fixed = Mesh<axis<"dp">, axis<"tp", 1>>;
  if (n > 1) CHECK_THROWS_WITH_AS(Fixed(world(), {1, n}), doctest::Contains("its type says 1"), invalid_argument);
  CHECK(Fixed(world(), {n, 1}).size<axis<"tp", 1>>() == 1);
}

TEST_CASE("bad lengths and operands throw on every rank, naming the axis") {
  const M mesh(world(), {world().size(), 1});
  const int n = world().size();
  using X = MeshTensor<double, M, per_axis<S0, Invariant>>;
  Lens wrong_count(static_cast<std::size_t>(n + 1), 0);
  wrong_count[0] = 4;
  CHECK_THROWS_WITH_AS(X::zeros(mesh, {4, 3}, {wrong_count, {}}), doctest::Contains("on axis dp"), invalid_argument);
  Lens wrong_sum(static_cast<std::size_t>(n), 0);
  wrong_sum[0] = 5;
  CHECK_THROWS_WITH_AS(X::zeros(mesh, {4, 3}, {wrong_sum, {}}), doctest::Contains("sum to 5"), invalid_argument);
  if (n > 1) {
    Lens a(static_cast<std::size_t>(n), 0), b(static_cast<std::size_t>(n), 0);
    a[0] = 4;
    b[1] = 4;
    const auto x = X::zeros(mesh, {4, 3}, {a, {}});
    const auto y = X::zeros(mesh, {4, 3}, {b, {}});
    CHECK_THROWS_WITH_AS(x + y, doctest::Contains("on axis dp the operands are split with different lengths"),
                         invalid_argument);
    const M other(world(), {world().size(), 1});
    const auto z = X::zeros(other, {4, 3}, {a, {}});
    CHECK_THROWS_WITH_AS(x + z, doctest::Contains("two different meshes"), invalid_argument);
  }
}

TEST_CASE("explain names the axis; a chain along one axis is simplified as on one axis") {
  for (const auto& shape : mesh_shapes()) {
    const M mesh(world(), shape);
    auto rng = test::shared_rng(3);
    const Lens rows = test::random_lengths(rng, shape[0], 6), cols = test::random_lengths(rng, shape[1], 4);
    auto x = MeshTensor<double, M, per_axis<S0, Partial>>::zeros(mesh, {6, 4}, {rows, {}});
    const auto chain = all_gather<tp>(reduce_scatter<tp, S1>(x, cols));
    const Plan p = explain(chain);
    CAPTURE(p.str());
    CHECK(p.collective_names() == "all_reduce<tp>");
    CHECK(p.backward_collective_names() == "all_reduce<tp>");  // P -> R is its own adjoint
    REQUIRE(p.simplifications.size() == 1);
    CHECK(p.simplifications[0].rfind("along tp: reduce_scatter P(sum) -> S(1)", 0) == 0);
    const Plan q = explain(all_gather<dp>(x));
    CHECK(q.collective_names() == "all_gather<dp>");
    const auto y = mesh_eval(chain);
    CHECK(std::same_as<std::remove_cvref_t<decltype(y)>, MeshTensor<double, M, per_axis<S0, Replicated>>>);
  }
}

TEST_CASE("a one-axis mesh is the one-axis API: the same values and gradients as Tensor") {
  using One = Mesh<tp>;
  const One mesh(world(), {world().size()});
  auto rng = test::shared_rng(41);
  const Shape g{5, 3};
  const Lens ls = test::random_lengths(rng, world().size(), 5);
  const auto value = random_value<double>(g, 7);
  auto x = make<double, per_axis<S0>>(mesh, g, {ls}, value, 1);
  x.requires_grad();
  const auto y = mesh_eval(all_gather<tp>(x));
  CHECK(test::all_ranks(holds(y, value)));
  // The same through Tensor on the same communicator.
  auto t = Tensor<double, S0>::from_local(mesh.comm<tp>(), x.local_shape(),
                                          std::span<const double>(x.local().data(), x.local().size()), ls);
  const auto u = eager::all_gather(t);
  CHECK(std::equal(u.local().begin(), u.local().end(), y.local().begin(), y.local().end()));
  // Backward: dy in P (the dual of R) comes back to x summed, in S(0).
  const auto dvalue = random_value<double>(g, 8);
  const auto dy = make<double, per_axis<Partial>>(mesh, g, {{}}, dvalue, 2);
  backward(y, dy);
  CHECK(test::all_ranks(holds(x.grad(), dvalue)));
}

TEST_CASE("a three-axis mesh: a transition along the middle axis, a local operation, backward") {
  using pp = axis<"pp">;
  using M3 = Mesh<pp, dp, tp>;
  const int n = world().size();
  // The middle axis always has more than one rank (when the world does): 2 -> 1x2x1, 3 -> 1x3x1,
  // 4 -> 2x2x1, 6 -> 1x2x3.
  const int d = n % 2 == 0 ? 2 : n, rest = n / d, p = rest % 2 == 0 ? 2 : 1;
  const std::array<int, 3> shape{p, d, rest / p};
  const M3 mesh(world(), shape);
  CHECK(mesh.coord<pp>() * shape[1] * shape[2] + mesh.coord<dp>() * shape[2] + mesh.coord<tp>() == world().rank());
  auto rng = test::shared_rng(43);
  const Shape g{4, 6, 5};
  using Ls = per_axis<Sharded<2>, Partial, Sharded<0>>;
  const Lens l_pp = test::random_lengths(rng, shape[0], 5), l_tp = test::random_lengths(rng, shape[2], 4);
  const auto value = random_value<double>(g, 11), dvalue = random_value<double>(g, 12);
  auto x = make<double, Ls>(mesh, g, {l_pp, {}, l_tp}, value, 3);
  x.requires_grad();
  const auto y = mesh_eval(all_reduce<dp>(x) * 2.0);  // (pp: S(2), dp: R, tp: S(0))
  CHECK(std::same_as<std::remove_cvref_t<decltype(y)>,
                     MeshTensor<double, M3, per_axis<Sharded<2>, Replicated, Sharded<0>>>>);
  std::vector<double> twice(value);
  for (auto& v : twice) v *= 2;
  CHECK(test::all_ranks(holds(y, twice)));
  const auto dy = make<double, dual_layouts_t<typename std::remove_cvref_t<decltype(y)>::layouts>>(
      mesh, g, y.dual_mappings(), dvalue, 4);
  backward(y, dy);
  std::vector<double> dtwice(dvalue);
  for (auto& v : dtwice) v *= 2;
  CHECK(test::all_ranks(holds(x.grad(), dtwice)));
}

TEST_CASE("local operations apply their rules per axis: transpose, sum<k>, add_bias with a non-last axis split") {
  for (const auto& shape : mesh_shapes()) {
    const M mesh(world(), shape);
    auto rng = test::shared_rng(47);
    const Shape g{4, 6};
    const Lens rows = test::random_lengths(rng, shape[0], 4), cols = test::random_lengths(rng, shape[1], 6);
    const auto value = random_value<double>(g, 21);
    auto x = make<double, per_axis<S0, S1>>(mesh, g, {rows, cols}, value, 1);
    x.requires_grad();
    CAPTURE(mesh.str());
    // transpose: (dp: S(0), tp: S(1)) -> (dp: S(1), tp: S(0)), the transposed value.
    const auto t = transpose(x);
    CHECK(std::same_as<std::remove_cvref_t<decltype(t)>, MeshTensor<double, M, per_axis<S1, S0>>>);
    std::vector<double> tv(value.size());
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 6; ++j) tv[static_cast<std::size_t>(j * 4 + i)] = value[static_cast<std::size_t>(i * 6 + j)];
    CHECK(t.shape() == Shape{6, 4});
    CHECK(test::all_ranks(holds(t, tv)));
    // sum<0>: the dp-split dim summed -> (dp: P, tp: S(0)) holding the column sums.
    const auto c = sum<0>(x);
    CHECK(std::same_as<std::remove_cvref_t<decltype(c)>, MeshTensor<double, M, per_axis<Partial, S0>>>);
    std::vector<double> cv(6, 0.0);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 6; ++j) cv[static_cast<std::size_t>(j)] += value[static_cast<std::size_t>(i * 6 + j)];
    CHECK(test::all_ranks(holds(c, cv)));
    // Its adjoint broadcasts dc (dp: R, tp: S(0)) back over the rows.
    const auto dcv = random_value<double>(Shape{6}, 22);
    const auto dc = make<double, per_axis<Replicated, S0>>(mesh, Shape{6}, c.dual_mappings(), dcv, 2);
    backward(c, dc);
    std::vector<double> gx(value.size());
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 6; ++j) gx[static_cast<std::size_t>(i * 6 + j)] = dcv[static_cast<std::size_t>(j)];
    CHECK(test::all_ranks(holds(x.grad(), gx)));
    // add_bias with x split along its last dim on dp: b must be split alike on dp.
    const Lens split = test::random_lengths(rng, shape[0], 6);  // x's last dim over dp, and b alike
    const auto xl = make<double, per_axis<S1, Invariant>>(mesh, g, {split, {}}, value, 3);
    const auto bv = random_value<double>(Shape{6}, 23);
    const auto b = make<double, per_axis<S0, Invariant>>(mesh, Shape{6}, {split, {}}, bv, 4);
    const auto y = add_bias(xl, b);
    std::vector<double> yv(value);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 6; ++j) yv[static_cast<std::size_t>(i * 6 + j)] += bv[static_cast<std::size_t>(j)];
    CHECK(test::all_ranks(holds(y, yv)));
    const auto whole_b = make<double, per_axis<Invariant, Invariant>>(mesh, Shape{6}, {}, bv, 5);
    CHECK_THROWS_WITH_AS(add_bias(xl, replicate<dp>(whole_b)),
                         doctest::Contains("on axis dp x is split along its last dim"), invalid_argument);
    const auto short_b =
        make<double, per_axis<Invariant, Invariant>>(mesh, Shape{4}, {}, random_value<double>(Shape{4}, 24), 5);
    const auto xr = make<double, per_axis<S0, Invariant>>(mesh, g, {rows, {}}, value, 6);
    CHECK_THROWS_WITH_AS(add_bias(xr, replicate<dp>(short_b)), doctest::Contains("b must be 1-d of x's last extent"),
                         invalid_argument);
  }
}

TEST_CASE("bad input across groups throws on every rank: lengths that differ between dp groups, dy, from_global") {
  const int n = world().size();
  for (const auto& shape : mesh_shapes()) {
    const M mesh(world(), shape);
    CAPTURE(mesh.str());
    const Shape g{4, 6};
    const auto value = random_value<double>(g, 31);
    auto x = make<double, per_axis<Invariant, Partial>>(mesh, g, {}, value, 1);
    x.requires_grad();
    // Lengths of tp that differ between the dp groups: each tp group would accept its own.
    if (shape[0] > 1 && shape[1] > 1) {
      Lens a(static_cast<std::size_t>(shape[1]), 0), b(static_cast<std::size_t>(shape[1]), 0);
      a[0] = 4;
      b[1] = 4;
      CHECK_THROWS_WITH_AS(mesh_eval(reduce_scatter<tp, S0>(x, mesh.coord<dp>() == 0 ? a : b)),
                           doctest::Contains("the ranks are not making the same call"), invalid_argument);
    }
    // dy whose lengths are not y's.
    Lens l(static_cast<std::size_t>(shape[1]), 0), other(static_cast<std::size_t>(shape[1]), 0);
    l[0] = 4;
    other[static_cast<std::size_t>(shape[1] - 1)] = 4;
    const auto y = mesh_eval(reduce_scatter<tp, S0>(x, l));
    if (shape[1] > 1) {
      const auto dy = make<double, per_axis<Invariant, S0>>(mesh, g, {{}, other}, value, 2);
      CHECK_THROWS_WITH_AS(backward(y, dy), doctest::Contains("dy must have y's shape"), invalid_argument);
    }
    // A value of the wrong size on one rank.
    std::vector<double> v(value);
    if (world().rank() == n - 1) v.pop_back();
    using X = MeshTensor<double, M, per_axis<Invariant, Invariant>>;
    CHECK_THROWS_WITH_AS(X::from_global(mesh, g, v), doctest::Contains("values given for the 24 elements"),
                         invalid_argument);
  }
}

TEST_CASE("explain_step lists the adjoints the reverse pass ran, and none without backward") {
  const int n = world().size();
  const M mesh(world(), {n, 1});
  const auto value = random_value<double>(Shape{3, 2}, 41);
  auto w = make<double, per_axis<Invariant, Invariant>>(mesh, Shape{3, 2}, {}, value, 1);
  w.requires_grad();
  const auto x = make<double, per_axis<S0, Invariant>>(mesh, Shape{n, 3}, {Lens(static_cast<std::size_t>(n), 1), {}},
                                                       random_value<double>(Shape{n, 3}, 42), 2);
  const Plan forward_only = explain_step([&] { (void)mesh_eval(replicate<dp>(w)); });
  CHECK(forward_only.backward.empty());
  CHECK(forward_only.steps.size() == 1);
  const Plan step = explain_step([&] {
    auto unused = mesh_eval(replicate<dp>(w) * 2.0);  // not on the loss' path: its adjoint never runs
    backward(all_reduce<dp, Invariant>(sum(matmul(x, replicate<dp>(w)))));
    (void)unused;
  });
  CAPTURE(step.str());
  CHECK(step.backward_collective_names() == "all_reduce<dp>");
  CHECK(step.backward.size() == 2);  // replicate<dp> (the loss' all_reduce's adjoint), all_reduce<dp> (w's)
}

TEST_CASE("a chain across two axes: all_gather<dp>(all_gather<tp>(z))") {
  for (const auto& shape : mesh_shapes()) {
    const M mesh(world(), shape);
    auto rng = test::shared_rng(53);
    const Shape g{4, 6};
    const auto value = random_value<double>(g, 51);
    auto z = make<double, per_axis<S0, S1>>(
        mesh, g, {test::random_lengths(rng, shape[0], 4), test::random_lengths(rng, shape[1], 6)}, value, 1);
    const MeshTensor<double, M, per_axis<Replicated, Replicated>> r = all_gather<dp>(all_gather<tp>(z));
    CHECK(test::all_ranks(holds(r, value)));
    CHECK(to_global(z) == value);
  }
}

namespace {

/// One step of a two-layer model on the mesh: the batch split over dp, the
/// ffn dim over tp, the parameters Invariant on dp (used through
/// replicate<dp>); returns the loss, Invariant on both axes.
template <class W1, class W2>
auto model_loss(const M& mesh, const W1& w1, const W2& w2, const Lens& batch, const std::vector<double>& xv) {
  using XL = per_axis<S0, Invariant>;
  const auto x = MeshTensor<double, M, XL>::from_global(mesh, {6, 4}, xv, {batch, {}});
  auto h = gelu(matmul(replicate<tp>(x), replicate<dp>(w1)));        // (dp: S(0), tp: S(1))
  auto y = all_reduce<tp, Invariant>(matmul(h, replicate<dp>(w2)));  // (dp: S(0), tp: I)
  return all_reduce<dp, Invariant>(sum(y * y) / 12.0);               // (dp: I, tp: I)
}

}  // namespace

TEST_CASE("a training step: the data-parallel all-reduce is derived, and the gradients are the unsharded ones") {
  std::vector<double> xv(24), w1v(4 * 8), w2v(8 * 4);
  for (std::size_t i = 0; i < xv.size(); ++i)
    xv[i] = 0.1 * static_cast<double>(small(static_cast<std::int64_t>(i), 0, 0, 3));
  for (std::size_t i = 0; i < w1v.size(); ++i)
    w1v[i] = 0.2 * static_cast<double>(small(static_cast<std::int64_t>(i), 1, 0, 5));
  for (std::size_t i = 0; i < w2v.size(); ++i)
    w2v[i] = 0.3 * static_cast<double>(small(static_cast<std::int64_t>(i), 2, 0, 7));
  // The whole model on a 1 x 1 mesh of this rank alone.
  const M one(world().split(world().rank(), 0), {1, 1});
  auto v1 = MeshTensor<double, M, per_axis<Invariant, S1>>::from_global(one, {4, 8}, w1v, {{}, {8}});
  auto v2 = MeshTensor<double, M, per_axis<Invariant, S0>>::from_global(one, {8, 4}, w2v, {{}, {8}});
  v1.requires_grad(), v2.requires_grad();
  const auto whole_loss = model_loss(one, v1, v2, {6}, xv);
  backward(whole_loss);
  for (const auto& shape : mesh_shapes()) {
    const M mesh(world(), shape);
    auto rng = test::shared_rng(5);
    const Lens batch = test::random_lengths(rng, shape[0], 6), ffn = test::random_lengths(rng, shape[1], 8);
    auto w1 = MeshTensor<double, M, per_axis<Invariant, S1>>::from_global(mesh, {4, 8}, w1v, {{}, ffn});
    auto w2 = MeshTensor<double, M, per_axis<Invariant, S0>>::from_global(mesh, {8, 4}, w2v, {{}, ffn});
    w1.requires_grad(), w2.requires_grad();
    MeshTensor<double, M, per_axis<Invariant, Invariant>> loss;
    const Plan p = explain_step([&] {
      loss = model_loss(mesh, w1, w2, batch, xv);
      backward(loss);
    });
    CAPTURE(mesh.str());
    CAPTURE(p.str());
    // Forward: replicate<tp> x, replicate<dp> w1 and w2 (no data moves), the tp
    // all-reduce (y, used twice in y * y, evaluated once) and the loss' dp
    // all-reduce. Backward, derived: the replicates of the all-reduces (no data
    // moves), then the dp all-reduces of w2's and w1's gradients (DDP's). x
    // needs no gradient, so replicate<tp>(x) has no adjoint to run.
    CHECK(p.collective_names() == "all_reduce<tp> all_reduce<dp>");
    CHECK(p.backward_collective_names() == "all_reduce<dp> all_reduce<dp>");
    CHECK(p.backward.size() == 4);
    int dp_reduces = 0;
    for (const auto& s : p.backward) dp_reduces += s.op == "all_reduce<dp>";
    CHECK(dp_reduces == 2);
    CHECK(to_global(loss)[0] == doctest::Approx(to_global(whole_loss)[0]).epsilon(1e-12));
    const auto g1 = to_global(w1.grad()), e1 = to_global(v1.grad());
    const auto g2 = to_global(w2.grad()), e2 = to_global(v2.grad());
    for (std::size_t i = 0; i < g1.size(); ++i) CHECK(g1[i] == doctest::Approx(e1[i]).epsilon(1e-12));
    for (std::size_t i = 0; i < g2.size(); ++i) CHECK(g2[i] == doctest::Approx(e2[i]).epsilon(1e-12));
  }
}

namespace {

/// LLaMA's MLP on the mesh: silu(x W1) * (x W3) then W2, W1 and W3 column-,
/// W2 row-parallel over tp, the batch over dp; a loss through sqrt, sigmoid,
/// log and division (per-axis rules of the element-wise ops beyond gelu).
template <class WC, class WR>
auto swiglu_loss(const M& mesh, const WC& w1, const WC& w3, const WR& w2, const Lens& batch,
                 const std::vector<double>& xv) {
  using XL = per_axis<S0, Invariant>;
  const auto x = MeshTensor<double, M, XL>::from_global(mesh, {6, 4}, xv, {batch, {}});
  auto h = silu(matmul(replicate<tp>(x), replicate<dp>(w1))) *
           matmul(replicate<tp>(x), replicate<dp>(w3));              // (dp: S(0), tp: S(1))
  auto y = all_reduce<tp, Invariant>(matmul(h, replicate<dp>(w2)));  // (dp: S(0), tp: I)
  auto e = exp(y * 0.5);
  return all_reduce<dp, Invariant>(sum(sqrt(e) * (1.0 - sigmoid(y)) + log(e + 1.0) / e) / 12.0);  // (dp: I, tp: I)
}

}  // namespace

TEST_CASE(
    "a SwiGLU training step on every mesh shape: silu, sigmoid, sqrt, log, division per axis, the unsharded gradients") {
  std::vector<double> xv(24), w1v(4 * 8), w3v(4 * 8), w2v(8 * 4);
  for (std::size_t i = 0; i < xv.size(); ++i)
    xv[i] = 0.1 * static_cast<double>(small(static_cast<std::int64_t>(i), 0, 0, 3));
  for (std::size_t i = 0; i < w1v.size(); ++i)
    w1v[i] = 0.2 * static_cast<double>(small(static_cast<std::int64_t>(i), 1, 0, 5));
  for (std::size_t i = 0; i < w3v.size(); ++i)
    w3v[i] = 0.15 * static_cast<double>(small(static_cast<std::int64_t>(i), 3, 0, 4));
  for (std::size_t i = 0; i < w2v.size(); ++i)
    w2v[i] = 0.3 * static_cast<double>(small(static_cast<std::int64_t>(i), 2, 0, 7));
  using WC = MeshTensor<double, M, per_axis<Invariant, S1>>;
  using WR = MeshTensor<double, M, per_axis<Invariant, S0>>;
  const M one(world().split(world().rank(), 0), {1, 1});
  auto v1 = WC::from_global(one, {4, 8}, w1v, {{}, {8}}), v3 = WC::from_global(one, {4, 8}, w3v, {{}, {8}});
  auto v2 = WR::from_global(one, {8, 4}, w2v, {{}, {8}});
  v1.requires_grad(), v3.requires_grad(), v2.requires_grad();
  const auto whole_loss = swiglu_loss(one, v1, v3, v2, {6}, xv);
  backward(whole_loss);
  for (const auto& shape : mesh_shapes()) {
    const M mesh(world(), shape);
    CAPTURE(mesh.str());
    auto rng = test::shared_rng(9);
    const Lens batch = test::random_lengths(rng, shape[0], 6), ffn = test::random_lengths(rng, shape[1], 8);
    auto w1 = WC::from_global(mesh, {4, 8}, w1v, {{}, ffn}), w3 = WC::from_global(mesh, {4, 8}, w3v, {{}, ffn});
    auto w2 = WR::from_global(mesh, {8, 4}, w2v, {{}, ffn});
    w1.requires_grad(), w3.requires_grad(), w2.requires_grad();
    const auto loss = swiglu_loss(mesh, w1, w3, w2, batch, xv);
    backward(loss);
    CHECK(to_global(loss)[0] == doctest::Approx(to_global(whole_loss)[0]).epsilon(1e-12));
    for (const auto& [g, e] :
         {std::pair{to_global(w1.grad()), to_global(v1.grad())}, std::pair{to_global(w3.grad()), to_global(v3.grad())},
          std::pair{to_global(w2.grad()), to_global(v2.grad())}}) {
      REQUIRE(g.size() == e.size());
      bool same = true;
      for (std::size_t i = 0; i < g.size(); ++i) same = same && std::abs(g[i] - e[i]) <= 1e-12 * (1 + std::abs(e[i]));
      CHECK(test::all_ranks(same));
    }
  }
}

}  // namespace shardex_test_mesh
