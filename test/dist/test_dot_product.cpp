// SPDX-License-Identifier: MIT
// The dot-product (adjoint) test of every transition of the table
// (transition/table.hpp), every strategy: for random x and w,
//
//   sum_r <T(x)_r, w_r> == sum_r <x_r, T*(w)_r>
//
// where an Invariant side is one shared value, counted once (not summed over
// the ranks). T* is the library's adjoint, `adjoint_t<From, To>` (the
// transition dual(To) -> dual(From) of the same table), applied to w of layout
// dual(To); its result has layout dual(From). Each transition is a linear map
// of all the ranks' local inputs, so the local inputs of R, P and S tensors are
// drawn independently on every rank; Invariant ones are the same everywhere.
//
// Then the autodiff graph: x.requires_grad(), loss = sum(T(x)), backward(loss).
// The gradient must equal the adjoint applied to ones (w = 1), and it must pass
// the dot-product test itself: sum_r <x_r, grad_r> == the objective (the sum
// over ranks of the local losses, an Invariant loss counted once).
//
// Double precision, relative tolerance 1e-12 of the sum of |terms|; random
// uneven lengths with zeros; sharded dims 0-2 of 1-3 dim tensors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <shardex.hpp>

#include "support/dist.hpp"

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_dot_product {

using namespace shardex;

namespace {

using Lens = std::vector<std::int64_t>;
using Index = std::span<const std::int64_t>;
using X = double;

constexpr Strategy gather_strategies[] = {Strategy::padded, Strategy::per_root, Strategy::v_collective,
                                          Strategy::automatic};
constexpr Strategy a2a_strategies[] = {Strategy::padded, Strategy::v_collective, Strategy::send_recv,
                                       Strategy::automatic};
constexpr Strategy reshard_strategies[] = {Strategy::v_collective, Strategy::send_recv, Strategy::automatic};
constexpr Strategy no_strategy[] = {Strategy::automatic};

constexpr double rel_tol = 1e-12;

std::uint64_t mix(std::uint64_t z) {  // splitmix64's finalizer
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::int64_t sum_of(const Lens& ls) {
  std::int64_t s = 0;
  for (auto l : ls) s += l;
  return s;
}

std::string str(const Lens& ls) { return to_string(std::span<const std::int64_t>(ls)); }

template <ShardedLayout L>
layout_mapping<L> mapping_of(const Lens& ls) {
  if constexpr (L::has_static_lengths)
    return {};
  else
    return layout_mapping<L>(ls);
}

/// A random tensor of layout L, uniform in [-1, 1): the same on every rank for
/// Invariant (one shared value), drawn per rank otherwise.
template <LayoutTag L>
Tensor<X, L> random_tensor(const Shape& g, const layout_mapping<L>& m, std::uint64_t seed) {
  const auto& comm = test::world();
  std::mt19937_64 gen(std::same_as<L, Invariant> ? mix(seed)
                                                 : mix(seed ^ mix(static_cast<std::uint64_t>(comm.rank()) + 1)));
  std::uniform_real_distribution<X> u(-1.0, 1.0);
  return Tensor<X, L>::from_function(
      comm, g, [&](Index) { return u(gen); }, m);
}

/// The pairing of a tensor of layout L with one of layout dual(L), as the sum
/// over ranks of the local inner products (an Invariant pairing counted once):
/// `value` and `scale` (the same sum of |a_i b_i|, for the tolerance) are the
/// contributions of this rank; `total` adds them over the ranks.
struct Pairing {
  double value = 0, scale = 0;
  bool shapes_match = true;
};

template <LayoutTag L>
Pairing pair_local(const Tensor<X, L>& a, const Tensor<X, dual_t<L>>& b) {
  Pairing p;
  p.shapes_match = a.local_shape() == b.local_shape() && a.shape() == b.shape();
  if (!p.shapes_match) return p;
  // An Invariant pairing is the same on every rank: rank 0 alone contributes it.
  if (std::same_as<L, Invariant> && a.rank() != 0) return p;
  for (std::int64_t i = 0; i < a.size(); ++i) {
    p.value += a.data()[i] * b.data()[i];
    p.scale += std::abs(a.data()[i] * b.data()[i]);
  }
  return p;
}

/// Sums the pairings over the ranks (one all-reduce for all of them).
template <std::size_t N>
std::array<Pairing, N> total(std::array<Pairing, N> ps) {
  std::array<double, 3 * N> v{};
  for (std::size_t k = 0; k < N; ++k) {
    v[3 * k] = ps[k].value;
    v[3 * k + 1] = ps[k].scale;
    v[3 * k + 2] = ps[k].shapes_match ? 0.0 : 1.0;
  }
  test::world().all_reduce(v.data(), static_cast<std::int64_t>(v.size()));
  for (std::size_t k = 0; k < N; ++k) ps[k] = {v[3 * k], v[3 * k + 1], v[3 * k + 2] == 0.0};
  return ps;
}

bool close(const Pairing& a, const Pairing& b) {
  const double scale = std::max({a.scale, b.scale, 1e-300});
  return std::abs(a.value - b.value) <= rel_tol * scale;
}

/// Every local element of a equals b's within the tolerance (no communication).
template <LayoutTag L>
void check_same(const Tensor<X, L>& a, const Tensor<X, L>& b, const char* what) {
  INFO(what);
  CHECK(a.shape() == b.shape());
  CHECK(a.local_shape() == b.local_shape());
  if (!(a.local_shape() == b.local_shape())) return;
  std::int64_t bad = 0;
  double worst = 0;
  for (std::int64_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(a.data()[i] - b.data()[i]);
    if (d > rel_tol * std::max(1.0, std::abs(b.data()[i]))) ++bad;
    worst = std::max(worst, d);
  }
  CHECK_MESSAGE(bad == 0, bad << " of " << a.size() << " elements differ, by up to " << worst);
}

/// The dot-product test of `From -> To` with strategy `s`, then the
/// autodiff check. Collective: every rank calls it with the same arguments.
template <LayoutTag From, LayoutTag To>
[[gnu::noinline]] void dot_test(const Shape& g, const layout_mapping<From>& mf, const layout_mapping<To>& mt,
                                Strategy s, std::uint64_t seed, const std::string& what) {
  using adjoint = adjoint_t<From, To>;
  static_assert(adjoint::exists);
  INFO(what, ": ", transition<From, To>::name, " ", layout_name<From>(), " -> ", layout_name<To>(), " (adjoint ",
       adjoint::name, " ", layout_name<dual_t<To>>(), " -> ", layout_name<dual_t<From>>(), "), global ", g.str(),
       ", strategy ", strategy_name(s));
  const auto& comm = test::world();

  // ---- the dot-product test with the table's adjoint ----
  const auto x = random_tensor<From>(g, mf, seed);
  const auto w = random_tensor<dual_t<To>>(g, dual_mapping<To>(mt), seed + 1);
  const Tensor<X, To> tx = apply_transition<To>(x, mt, s);
  const Tensor<X, dual_t<From>> tw =
      apply_transition<dual_t<From>>(w, dual_mapping<From>(mf), s) /* the entry adjoint_t<From, To> */;
  CHECK(tw.shape() == x.shape());
  CHECK(tw.local_shape() == x.local_shape());

  // ---- autodiff: loss = sum(T(x)), backward, with w = 1 ----
  auto xd = x.clone();
  xd.requires_grad();
  const auto loss = eager::sum(apply_transition<To>(xd, mt, s));
  backward(loss);
  const auto ones = Tensor<X, dual_t<To>>::ones(comm, g, dual_mapping<To>(mt));
  const Tensor<X, dual_t<From>> t_ones = apply_transition<dual_t<From>>(ones, dual_mapping<From>(mf), s);
  CHECK(xd.has_grad());
  if (xd.has_grad()) {
    static_assert(std::same_as<std::remove_cvref_t<decltype(xd.grad())>, Tensor<X, dual_t<From>>>);
    check_same(xd.grad(), t_ones, "the autodiff gradient of eager::sum(T(x)) against T*(ones)");
  }
  // The loss's layout: Partial for a sharded T(x), else T(x)'s own; an
  // Invariant loss counts once. Pairing it with the seed 1 gives the objective.
  using LossL = std::remove_cvref_t<decltype(loss)>::layout_type;
  const auto seed_one = Tensor<X, dual_t<LossL>>::ones(comm, Shape{});

  const auto sums =
      total<5>({pair_local<To>(tx, w), pair_local<From>(x, tw), pair_local<LossL>(loss, seed_one),
                xd.has_grad() ? pair_local<From>(x, xd.grad()) : Pairing{0, 0, false}, pair_local<To>(tx, ones)});
  const auto& [lhs, rhs, objective, x_dot_grad, tx_dot_ones] = sums;
  CHECK_MESSAGE(lhs.shapes_match, "T(x) and w differ in shape on some rank");
  CHECK_MESSAGE(rhs.shapes_match, "x and T*(w) differ in shape on some rank");
  CHECK_MESSAGE(close(lhs, rhs), "sum_r <T(x)_r, w_r> = " << lhs.value << " but sum_r <x_r, T*(w)_r> = " << rhs.value
                                                          << " (scale " << std::max(lhs.scale, rhs.scale) << ")");
  CHECK_MESSAGE(x_dot_grad.shapes_match, "x and its gradient differ in shape on some rank");
  CHECK_MESSAGE(close(objective, tx_dot_ones),
                "the objective " << objective.value << " is not sum_r <T(x)_r, 1> = " << tx_dot_ones.value);
  CHECK_MESSAGE(
      close(objective, x_dot_grad),
      "the objective sum_r loss_r = " << objective.value << " but sum_r <x_r, grad_r> = " << x_dot_grad.value);
}

/// The lengths cases of one configuration: three random (zeros likely), one with a
/// forced zero, one where all ranks but one hold nothing, even lengths, and all zero.
std::vector<Lens> lens_cases(std::mt19937_64& rng, int n) {
  return test::lengths_cases(rng, n, {.random = 3, .max_total = 6 * n + 6, .even = true, .empty = true});
}

Shape random_shape(std::mt19937_64& rng, int ndim, int dim, std::int64_t extent) {
  std::uniform_int_distribution<std::int64_t> e(1, 10);
  std::vector<std::int64_t> ex(static_cast<std::size_t>(ndim));
  for (auto& v : ex) v = e(rng);
  ex[static_cast<std::size_t>(dim)] = extent;
  return Shape{std::span<const std::int64_t>(ex)};
}

template <class F>
void for_each_dim(F&& f) {
  f(std::integral_constant<int, 0>{});
  f(std::integral_constant<int, 1>{});
  f(std::integral_constant<int, 2>{});
}

/// Runs body(D, ndim, lengths, shape) for sharded dims 0-2, tensor ranks
/// D+1..3 and every lengths case.
template <class F>
int for_each_sharded_config(std::mt19937_64& rng, F&& body) {
  const int n = test::world().size();
  int cases = 0;
  for_each_dim([&](auto dc) {
    for (int ndim = dc.value + 1; ndim <= 3; ++ndim)
      for (const Lens& ls : lens_cases(rng, n)) {
        body(dc, ls, random_shape(rng, ndim, dc.value, sum_of(ls)));
        ++cases;
      }
  });
  return cases;
}

/// `lengths<...>` in reverse order.
template <class Ls, class Seq = std::make_index_sequence<Ls::count>>
struct reversed;
template <class Ls, std::size_t... I>
struct reversed<Ls, std::index_sequence<I...>> {
  using type = lengths<Ls::values[Ls::count - 1 - I]...>;
};

}  // namespace

TEST_CASE("all_gather S(d) -> R and S(d) -> I (adjoints: reduce_scatter, slice), every strategy") {
  auto rng = test::shared_rng(11);
  const int cases = for_each_sharded_config(rng, [&](auto dc, const Lens& ls, const Shape& g) {
    using S = Sharded<decltype(dc)::value>;
    for (Strategy s : gather_strategies) {
      dot_test<S, Replicated>(g, mapping_of<S>(ls), {}, s, rng(), "lengths " + str(ls));
      dot_test<S, Invariant>(g, mapping_of<S>(ls), {}, s, rng(), "lengths " + str(ls));
    }
  });
  CHECK(cases >= 6);
}

TEST_CASE("reduce_scatter P -> S(d) (adjoint: all_gather into R), every strategy") {
  auto rng = test::shared_rng(22);
  const int cases = for_each_sharded_config(rng, [&](auto dc, const Lens& ls, const Shape& g) {
    using S = Sharded<decltype(dc)::value>;
    for (Strategy s : gather_strategies) dot_test<Partial, S>(g, {}, mapping_of<S>(ls), s, rng(), "lengths " + str(ls));
  });
  CHECK(cases >= 6);
}

TEST_CASE("all_reduce P -> R and P -> I, replicate I -> R, identities I, R, P") {
  auto rng = test::shared_rng(33);
  std::uniform_int_distribution<std::int64_t> e(0, 8);
  for (int ndim = 0; ndim <= 3; ++ndim)
    for (int rep = 0; rep < 2; ++rep) {
      std::vector<std::int64_t> ex(static_cast<std::size_t>(ndim));
      for (auto& v : ex) v = e(rng) + (rep == 0 ? 1 : 0);
      const Shape g{std::span<const std::int64_t>(ex)};
      dot_test<Partial, Replicated>(g, {}, {}, Strategy::automatic, rng(), "all_reduce");
      dot_test<Partial, Invariant>(g, {}, {}, Strategy::automatic, rng(), "all_reduce into I");
      dot_test<Invariant, Replicated>(g, {}, {}, Strategy::automatic, rng(), "replicate");
      dot_test<Invariant, Invariant>(g, {}, {}, Strategy::automatic, rng(), "identity");
      dot_test<Replicated, Replicated>(g, {}, {}, Strategy::automatic, rng(), "identity");
      dot_test<Partial, Partial>(g, {}, {}, Strategy::automatic, rng(), "identity");
    }
}

TEST_CASE(
    "dynamic_slice R -> S(d), I -> S(d) (adjoints: zero_pad, all_gather into I) and zero_pad S(d) -> P (adjoint: slice)") {
  auto rng = test::shared_rng(44);
  const int cases = for_each_sharded_config(rng, [&](auto dc, const Lens& ls, const Shape& g) {
    using S = Sharded<decltype(dc)::value>;
    dot_test<Replicated, S>(g, {}, mapping_of<S>(ls), Strategy::automatic, rng(), "lengths " + str(ls));
    dot_test<S, Partial>(g, mapping_of<S>(ls), {}, Strategy::automatic, rng(), "lengths " + str(ls));
    // The adjoint of I -> S is a gather: its strategy is the forward's.
    for (Strategy s : gather_strategies)
      dot_test<Invariant, S>(g, {}, mapping_of<S>(ls), s, rng(), "lengths " + str(ls));
  });
  CHECK(cases >= 6);
}

TEST_CASE("all_to_all S(c) -> S(s), every pair of dims 0-2, every strategy (adjoint: all_to_all back)") {
  const int n = test::world().size();
  auto rng = test::shared_rng(55);
  int cases = 0;
  for_each_dim([&](auto cc) {
    for_each_dim([&](auto sc) {
      constexpr int C = decltype(cc)::value, S = decltype(sc)::value;
      if constexpr (C != S) {
        for (int ndim = std::max(C, S) + 1; ndim <= 3; ++ndim) {
          const auto cs = lens_cases(rng, n);
          for (std::size_t k = 0; k < cs.size(); ++k) {
            const Lens& lc = cs[k];
            const Lens ls = lens_cases(rng, n)[(k + 1) % cs.size()];
            const Shape g = random_shape(rng, ndim, C, sum_of(lc)).with(S, sum_of(ls));
            for (Strategy s : a2a_strategies)
              dot_test<Sharded<C>, Sharded<S>>(g, mapping_of<Sharded<C>>(lc), mapping_of<Sharded<S>>(ls), s, rng(),
                                               "lengths " + str(lc) + " -> " + str(ls));
            ++cases;
          }
        }
      }
    });
  });
  CHECK(cases >= 6);
}

TEST_CASE("reshard S(d)[a] -> S(d)[b] and identity S(d)[a] -> S(d)[a], every strategy (adjoint: reshard back)") {
  const int n = test::world().size();
  auto rng = test::shared_rng(66);
  const int cases = for_each_sharded_config(rng, [&](auto dc, const Lens& a, const Shape& g) {
    using S = Sharded<decltype(dc)::value>;
    const Lens b = test::random_lengths(rng, n, sum_of(a));
    for (Strategy s : reshard_strategies)
      dot_test<S, S>(g, mapping_of<S>(a), mapping_of<S>(b), s, rng(), "lengths " + str(a) + " -> " + str(b));
    dot_test<S, S>(g, mapping_of<S>(a), mapping_of<S>(a), Strategy::automatic, rng(), "same lengths " + str(a));
  });
  CHECK(cases >= 6);
}

TEST_CASE("static lengths at the matching world size, and a 4-d tensor") {
  const auto& comm = test::world();
  const int n = comm.size();
  auto rng = test::shared_rng(77);
  const auto run = [&](auto lc) {
    using Ls = typename decltype(lc)::type;
    using S1 = Sharded<1, Ls>;
    using S0 = Sharded<0, typename reversed<Ls>::type>;
    const Shape g{S0::lengths_type::sum, Ls::sum, 3};
    const std::string what = "static " + layout_name<S1>();
    for (Strategy s : gather_strategies) {
      dot_test<S1, Replicated>(g, {}, {}, s, rng(), what);
      dot_test<S1, Invariant>(g, {}, {}, s, rng(), what);
      dot_test<Partial, S1>(g, {}, {}, s, rng(), what);
      dot_test<Invariant, S1>(g, {}, {}, s, rng(), what);
    }
    dot_test<Replicated, S1>(g, {}, {}, Strategy::automatic, rng(), what);
    dot_test<S1, Partial>(g, {}, {}, Strategy::automatic, rng(), what);
    for (Strategy s : a2a_strategies) {
      dot_test<S1, S0>(g, {}, {}, s, rng(), what);
      dot_test<S0, S1>(g, {}, {}, s, rng(), what);
    }
  };
  using std::type_identity;
  switch (n) {
    case 1:
      run(type_identity<lengths<5>>{});
      break;
    case 2:
      run(type_identity<lengths<0, 4>>{});
      break;
    case 3:
      run(type_identity<lengths<2, 0, 3>>{});
      break;
    case 4: {
      run(type_identity<lengths<1, 2, 3, 4>>{});
      // The reference's all_to_all with zeros: S(1)[0,2,0,8] -> S(0)[5,0,5,0] of (10, 10).
      using C = Sharded<1, lengths<0, 2, 0, 8>>;
      using S = Sharded<0, lengths<5, 0, 5, 0>>;
      for (Strategy s : a2a_strategies)
        dot_test<C, S>({10, 10}, {}, {}, s, rng(), "the reference's all_to_all with zeros");
      break;
    }
    default:
      MESSAGE("no static lengths for " << n << " ranks; the run-time lengths cases cover them");
  }
  // 4-d: gather along the last dim, all_to_all between dims 3 and 1.
  for (const Lens& ls : lens_cases(rng, n)) {
    const Lens l2 = test::random_lengths(rng, n, 1 + static_cast<std::int64_t>(rng() % 6));
    const Shape g{2, sum_of(l2), 3, sum_of(ls)};
    for (Strategy s : gather_strategies)
      dot_test<Sharded<3>, Replicated>(g, mapping_of<Sharded<3>>(ls), {}, s, rng(), "4-d");
    for (Strategy s : a2a_strategies)
      dot_test<Sharded<3>, Sharded<1>>(g, mapping_of<Sharded<3>>(ls), mapping_of<Sharded<1>>(l2), s, rng(), "4-d");
  }
}

}  // namespace shardex_test_dot_product
