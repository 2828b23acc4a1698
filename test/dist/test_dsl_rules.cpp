// SPDX-License-Identifier: MIT
// Every layout rule of the local operations (expr/rules.hpp) against a
// single-rank reference on random data: matmul (all seven 2-d rules),
// element-wise +, -, *, / (P / R too), unary -, scaling, + c, - c and gelu/relu/tanh/exp/
// sqrt/rsqrt/log/sigmoid/silu, add_bias,
// sum over all dims and over one dim, transpose; the one-pass fusion of an
// element-wise tree (one autodiff node whose inputs are the leaves); and the
// run-time shape errors, thrown on every rank (operands whose local parts happen
// to fit on some ranks, as lengths that differ only where a rank holds nothing,
// must fail on those ranks too).
//
// The reference never communicates: every input is `Tensor::uniform` with a
// seed shared by all ranks, so each rank computes the whole global input from
// the same seed as a Replicated tensor (a Partial input is the sum of one such
// tensor per rank, each with its own seed). A Partial result is checked by the
// sum over ranks of the local results (one all-reduce of the local data, with
// the communicator itself, not through shardex). Shapes and lengths are drawn
// from a generator seeded identically on every rank: uneven, zeros included;
// the first trial of each case has extents >= 2 (so that a misplaced element
// shows), the others may have zero extents. Double with tolerance 1e-12 everywhere; float with 1e-5
// for matmul and the element-wise rules.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numbers>
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
namespace shardex_test_dsl_rules {

using namespace shardex;
using shardex::test::world;
using Lens = std::vector<std::int64_t>;

// ---- the rules' result layouts (compile time) ------------------------------------
namespace {
template <class T, class L>
Tensor<T, L> tensor_of();  // never defined: for decltype only

template <class A, class B, class T = double>
using matmul_t = eval_t<decltype(matmul(tensor_of<T, A>(), tensor_of<T, B>()))>;
template <class A, class B>
using add_t = eval_t<decltype(tensor_of<double, A>() + tensor_of<double, B>())>;
template <class A, class B>
using mul_t = eval_t<decltype(tensor_of<double, A>() * tensor_of<double, B>())>;
template <class X, class B>
using bias_t = eval_t<decltype(add_bias(tensor_of<double, X>(), tensor_of<double, B>()))>;
template <int K, class A>
using sum_dim_t = eval_t<decltype(sum<K>(tensor_of<double, A>()))>;
template <class A>
using sum_all_t = eval_t<decltype(sum(tensor_of<double, A>()))>;
template <class A>
using transpose_t = eval_t<decltype(transpose(tensor_of<double, A>()))>;
template <class A>
using gelu_t = eval_t<decltype(gelu(tensor_of<double, A>()))>;
template <class A>
using scale_t = eval_t<decltype(tensor_of<double, A>() * 2.0)>;
template <class L, class T = double>
using Tn = Tensor<T, L>;

using R = Replicated;
using I = Invariant;
using P = Partial;
using S0 = Sharded<0>;
using S1 = Sharded<1>;
using S2 = Sharded<2>;
using S1s = Sharded<1, lengths<1, 0, 2>>;
}  // namespace

static_assert(std::same_as<matmul_t<R, R>, Tn<R>>);
static_assert(std::same_as<matmul_t<I, I>, Tn<I>>);
static_assert(std::same_as<matmul_t<P, R>, Tn<P>>);
static_assert(std::same_as<matmul_t<R, P>, Tn<P>>);
static_assert(std::same_as<matmul_t<R, S1>, Tn<S1>>);
static_assert(std::same_as<matmul_t<R, S1s, float>, Tn<S1s, float>>);
static_assert(std::same_as<matmul_t<S1, S0>, Tn<P>>);
static_assert(std::same_as<matmul_t<S0, R>, Tn<S0>>);
static_assert(std::same_as<add_t<I, I>, Tn<I>>);
static_assert(std::same_as<add_t<P, P>, Tn<P>>);
static_assert(std::same_as<add_t<S1, S1>, Tn<S1>>);
static_assert(std::same_as<mul_t<P, R>, Tn<P>>);
static_assert(std::same_as<mul_t<R, P>, Tn<P>>);
static_assert(std::same_as<mul_t<S0, S0>, Tn<S0>>);
static_assert(std::same_as<mul_t<R, R>, Tn<R>>);
static_assert(std::same_as<bias_t<R, R>, Tn<R>>);
static_assert(std::same_as<bias_t<I, I>, Tn<I>>);
static_assert(std::same_as<bias_t<S0, R>, Tn<S0>>);
static_assert(std::same_as<bias_t<S1, S0>, Tn<S1>>);
static_assert(std::same_as<sum_all_t<S2>, Tn<P>>);
static_assert(std::same_as<sum_all_t<S0>, Tn<P>>);
static_assert(std::same_as<sum_all_t<R>, Tn<R>>);
static_assert(std::same_as<sum_all_t<I>, Tn<I>>);
static_assert(std::same_as<sum_all_t<P>, Tn<P>>);
static_assert(std::same_as<sum_dim_t<0, S0>, Tn<P>>);
static_assert(std::same_as<sum_dim_t<1, S0>, Tn<S0>>);
static_assert(std::same_as<sum_dim_t<2, S0>, Tn<S0>>);
static_assert(std::same_as<sum_dim_t<0, S1>, Tn<S0>>);
static_assert(std::same_as<sum_dim_t<1, S1>, Tn<P>>);
static_assert(std::same_as<sum_dim_t<2, S1>, Tn<S1>>);
static_assert(std::same_as<sum_dim_t<0, S2>, Tn<S1>>);
static_assert(std::same_as<sum_dim_t<1, S2>, Tn<S1>>);
static_assert(std::same_as<sum_dim_t<2, S2>, Tn<P>>);
static_assert(std::same_as<sum_dim_t<1, R>, Tn<R>>);
static_assert(std::same_as<sum_dim_t<0, P>, Tn<P>>);
static_assert(std::same_as<transpose_t<S0>, Tn<S1>>);
static_assert(std::same_as<transpose_t<S1>, Tn<S0>>);
static_assert(std::same_as<transpose_t<S1s>, Tn<Sharded<0, lengths<1, 0, 2>>>>);
static_assert(std::same_as<transpose_t<R>, Tn<R>>);
static_assert(std::same_as<transpose_t<P>, Tn<P>>);
static_assert(std::same_as<gelu_t<S1>, Tn<S1>>);
static_assert(std::same_as<gelu_t<I>, Tn<I>>);
static_assert(std::same_as<scale_t<P>, Tn<P>>);
static_assert(std::same_as<scale_t<S2>, Tn<S2>>);

namespace {

// ---- the single-rank reference ------------------------------------------------------

/// A global tensor as plain doubles, row-major: the logical value of a
/// distributed tensor, computed on one rank.
struct Ref {
  Shape shape;
  std::vector<double> v;
  explicit Ref(const Shape& s) : shape(s), v(static_cast<std::size_t>(s.numel()), 0.0) {}
  double& operator[](std::int64_t i) { return v[static_cast<std::size_t>(i)]; }
  double operator[](std::int64_t i) const { return v[static_cast<std::size_t>(i)]; }
};

/// Outer x extent x inner view of dim k of shape s.
struct Split {
  std::int64_t outer = 1, extent = 1, inner = 1;
  Split(const Shape& s, int k) {
    for (int d = 0; d < s.rank(); ++d) {
      if (d < k)
        outer *= s[d];
      else if (d > k)
        inner *= s[d];
    }
    extent = s[k];
  }
};

Ref map(const Ref& a, const std::function<double(double)>& f) {
  Ref y(a.shape);
  for (std::size_t i = 0; i < a.v.size(); ++i) y.v[i] = f(a.v[i]);
  return y;
}

Ref zip(const Ref& a, const Ref& b, const std::function<double(double, double)>& f) {
  REQUIRE(a.shape == b.shape);
  Ref y(a.shape);
  for (std::size_t i = 0; i < a.v.size(); ++i) y.v[i] = f(a.v[i], b.v[i]);
  return y;
}

Ref ref_matmul(const Ref& a, const Ref& b) {
  const std::int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
  REQUIRE(b.shape[0] == k);
  Ref c(Shape{m, n});
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::int64_t l = 0; l < k; ++l) s += a[i * k + l] * b[l * n + j];
      c[i * n + j] = s;
    }
  return c;
}

Ref ref_sum_all(const Ref& a) {
  Ref y(Shape{});
  for (double e : a.v) y[0] += e;
  return y;
}

Ref ref_sum_dim(const Ref& a, int k) {
  std::vector<std::int64_t> ext;
  for (int d = 0; d < a.shape.rank(); ++d)
    if (d != k) ext.push_back(a.shape[d]);
  Ref y{Shape(std::span<const std::int64_t>(ext))};
  const Split v(a.shape, k);
  for (std::int64_t o = 0; o < v.outer; ++o)
    for (std::int64_t j = 0; j < v.extent; ++j)
      for (std::int64_t i = 0; i < v.inner; ++i) y[o * v.inner + i] += a[(o * v.extent + j) * v.inner + i];
  return y;
}

Ref ref_transpose(const Ref& a) {
  const std::int64_t m = a.shape[0], n = a.shape[1];
  Ref y(Shape{n, m});
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) y[j * m + i] = a[i * n + j];
  return y;
}

/// x + b, b broadcast along x's last dim.
Ref ref_bias(const Ref& x, const Ref& b) {
  const std::int64_t n = x.shape[x.shape.rank() - 1];
  REQUIRE(b.shape == Shape{n});
  Ref y(x.shape);
  for (std::size_t i = 0; i < x.v.size(); ++i) y.v[i] = x.v[i] + b.v[i % static_cast<std::size_t>(n)];
  return y;
}

double ref_gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

// ---- inputs --------------------------------------------------------------------------

template <class T>
constexpr double tol = std::same_as<T, double> ? 1e-12 : 1e-5;

template <class L>
layout_mapping<L> mapping_of(const Lens& ls) {
  if constexpr (is_sharded_v<L>) {
    if constexpr (!L::has_static_lengths)
      return layout_mapping<L>(ls);
    else
      return {};
  } else {
    return {};
  }
}

/// A distributed input and its logical value.
template <class T, class L>
struct Input {
  Tensor<T, L> t;
  Ref ref;
};

/// The seed of rank r's part of a Partial input.
std::uint64_t part_seed(std::uint64_t seed, int r) {
  return seed * 1000003u + 7919u * static_cast<std::uint64_t>(r + 1);
}

template <class T>
void add_into(Ref& ref, const Tensor<T, Replicated>& whole) {
  for (std::int64_t i = 0; i < whole.size(); ++i) ref[i] += static_cast<double>(whole.data()[i]);
}

/// Uniform numbers in [-1, 1) with global shape s and layout L (lengths `ls` if sharded).
template <class T, class L>
Input<T, L> input(const Shape& s, std::uint64_t seed, const Lens& ls = {}) {
  const auto& comm = world();
  Ref ref(s);
  if constexpr (std::same_as<L, Partial>) {
    for (int r = 0; r < comm.size(); ++r) add_into(ref, Tensor<T, Replicated>::uniform(comm, s, part_seed(seed, r)));
    return {Tensor<T, Partial>::uniform(comm, s, part_seed(seed, comm.rank())), ref};
  } else {
    add_into(ref, Tensor<T, Replicated>::uniform(comm, s, seed));
    return {Tensor<T, L>::uniform(comm, s, seed, T(-1), T(1), mapping_of<L>(ls)), ref};
  }
}

template <class X>
Lens lengths_of(const X& t) {
  if constexpr (is_sharded_v<typename X::layout_type>)
    return Lens(t.lengths().begin(), t.lengths().end());
  else
    return {};
}

constexpr double inf = std::numeric_limits<double>::infinity();

template <class L>
constexpr int shard_dim_of() {
  if constexpr (is_sharded_v<L>)
    return L::dim;
  else
    return -1;
}

/// The largest error of `t` against the logical value `ref`, relative to
/// max(1, |ref|); infinity if the global or the local shape is wrong, or a value
/// is NaN. A Partial `t` is compared by the sum over ranks of its local parts
/// (collective: every rank calls it, with the same global shape).
template <class X>
double error_of(const X& t, const Ref& ref) {
  using T = typename X::value_type;
  using L = typename X::layout_type;
  if (t.shape() != ref.shape) return inf;
  Shape want_local = ref.shape;
  std::int64_t offset = 0;
  if constexpr (is_sharded_v<L>) {
    want_local = ref.shape.with(L::dim, t.lengths()[static_cast<std::size_t>(t.rank())]);
    offset = t.global_offset();
  }
  if (t.local_shape() != want_local) return inf;
  std::vector<T> local(t.local().begin(), t.local().end());
  if constexpr (std::same_as<L, Partial>) t.comm().all_reduce(local.data(), static_cast<std::int64_t>(local.size()));
  double worst = 0;
  const Shape& ls = t.local_shape();
  for (std::int64_t i = 0; i < t.size(); ++i) {
    // The global linear index of local element i.
    std::int64_t rem = i, g = 0, stride = 1;
    for (int d = ls.rank() - 1; d >= 0; --d) {
      std::int64_t idx = rem % ls[d];
      rem /= ls[d];
      if (is_sharded_v<L> && d == shard_dim_of<L>()) idx += offset;
      g += idx * stride;
      stride *= ref.shape[d];
    }
    const double want = ref[g];
    const double err =
        std::abs(static_cast<double>(local[static_cast<std::size_t>(i)]) - want) / std::max(1.0, std::abs(want));
    if (std::isnan(err)) return inf;
    worst = std::max(worst, err);
  }
  return worst;
}

/// CHECKs that `t` holds `ref` (each rank its part; a Partial one in sum) within T's tolerance.
#define CHECK_HOLDS(t, ref)                                                    \
  do {                                                                         \
    const double err_ = error_of((t), (ref));                                  \
    INFO(#t " vs " #ref ": " << (t).describe());                               \
    CHECK(err_ <= tol<typename std::remove_cvref_t<decltype(t)>::value_type>); \
  } while (0)

/// The largest relative error of t's local part against `ref` element by
/// element (for a Partial result: each rank's own part); infinity on a size mismatch.
template <class X>
double local_error_of(const X& t, const Ref& ref) {
  if (t.size() != ref.shape.numel()) return inf;
  double worst = 0;
  for (std::int64_t i = 0; i < t.size(); ++i) {
    const double err = std::abs(static_cast<double>(t.data()[i]) - ref[i]) / std::max(1.0, std::abs(ref[i]));
    if (std::isnan(err)) return inf;
    worst = std::max(worst, err);
  }
  return worst;
}

/// The local part of a whole-shape tensor as a Ref.
template <class X>
Ref local_ref(const X& t) {
  Ref r(t.local_shape());
  for (std::int64_t i = 0; i < t.size(); ++i) r[i] = static_cast<double>(t.data()[i]);
  return r;
}

/// Random extents, lengths and seeds, the same on every rank.
struct Dice {
  std::mt19937_64 rng;
  explicit Dice(std::uint64_t seed) : rng(test::shared_rng(seed)) {}
  std::int64_t extent(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  }
  Lens lengths(std::int64_t total) { return test::random_lengths(rng, world().size(), total); }
  std::uint64_t seed() { return rng() % 1000000007u; }
};

}  // namespace

// ---- matmul ------------------------------------------------------------------------------

TEST_CASE_TEMPLATE("matmul: the seven 2-d rules against the single-rank product", T, double, float) {
  Dice dice(101);
  for (int trial = 0; trial < 5; ++trial) {
    // The first trial has extents >= 2 (a misplaced element shows); the others may have zeros.
    const std::int64_t lo = trial == 0 ? 2 : 0;
    const std::int64_t m = dice.extent(lo, 6), k = dice.extent(lo, 6), n = dice.extent(lo, 6);
    const Lens lm = dice.lengths(m), lk = dice.lengths(k), ln = dice.lengths(n);
    const std::uint64_t sa = dice.seed(), sb = dice.seed();
    const Shape A{m, k}, B{k, n};
    CAPTURE(trial);
    CAPTURE(A);
    CAPTURE(B);
    {  // R x R -> R
      auto a = input<T, R>(A, sa);
      auto b = input<T, R>(B, sb);
      Tensor<T, R> y = matmul(a.t, b.t);
      CHECK_HOLDS(y, ref_matmul(a.ref, b.ref));
    }
    {  // I x I -> I
      auto a = input<T, I>(A, sa);
      auto b = input<T, I>(B, sb);
      Tensor<T, I> y = matmul(a.t, b.t);
      CHECK_HOLDS(y, ref_matmul(a.ref, b.ref));
    }
    {  // P x R -> P: each rank multiplies its part; the sum over ranks is (sum of parts) x b
      auto a = input<T, P>(A, sa);
      auto b = input<T, R>(B, sb);
      Tensor<T, P> y = matmul(a.t, b.t);
      CHECK(local_error_of(y, ref_matmul(local_ref(a.t), b.ref)) <= tol<T>);
      CHECK_HOLDS(y, ref_matmul(a.ref, b.ref));
    }
    {  // R x P -> P
      auto a = input<T, R>(A, sa);
      auto b = input<T, P>(B, sb);
      Tensor<T, P> y = matmul(a.t, b.t);
      CHECK(local_error_of(y, ref_matmul(a.ref, local_ref(b.t))) <= tol<T>);
      CHECK_HOLDS(y, ref_matmul(a.ref, b.ref));
    }
    {  // R x S<1> -> S<1> (column-parallel), with b's lengths
      auto a = input<T, R>(A, sa);
      auto b = input<T, S1>(B, sb, ln);
      Tensor<T, S1> y = matmul(a.t, b.t);
      CHECK(lengths_of(y) == ln);
      CHECK_HOLDS(y, ref_matmul(a.ref, b.ref));
    }
    {  // S<1> x S<0> -> P (row-parallel, equal lengths): the sum over ranks is the product
      auto a = input<T, S1>(A, sa, lk);
      auto b = input<T, S0>(B, sb, lk);
      Tensor<T, P> y = matmul(a.t, b.t);
      CHECK_HOLDS(y, ref_matmul(a.ref, b.ref));
    }
    {  // S<0> x R -> S<0>, with a's lengths
      auto a = input<T, S0>(A, sa, lm);
      auto b = input<T, R>(B, sb);
      Tensor<T, S0> y = matmul(a.t, b.t);
      CHECK(lengths_of(y) == lm);
      CHECK_HOLDS(y, ref_matmul(a.ref, b.ref));
    }
  }
}

// ---- element-wise ----------------------------------------------------------------------------

namespace {

constexpr double c_scale = -1.75;

/// +, -, * of two tensors of layout L, unary -, x * c, c * x, x / c, and (L not
/// Partial) gelu, relu, tanh, exp: each result has layout L (and L's lengths).
template <class T, class L>
void check_elementwise(const Shape& s, const Lens& ls, Dice& dice) {
  CAPTURE(layout_name<L>());
  auto a = input<T, L>(s, dice.seed(), ls);
  auto b = input<T, L>(s, dice.seed(), ls);
  const auto holds = [&](const Tensor<T, L>& y, const Ref& want, const char* what) {
    INFO(what);
    CHECK(lengths_of(y) == lengths_of(a.t));
    CHECK_HOLDS(y, want);
  };
  holds(a.t + b.t, zip(a.ref, b.ref, std::plus<>{}), "a + b");
  holds(a.t - b.t, zip(a.ref, b.ref, std::minus<>{}), "a - b");
  holds(-a.t, map(a.ref, std::negate<>{}), "-a");
  holds(a.t * c_scale, map(a.ref, [](double x) { return x * c_scale; }), "a * c");
  holds(c_scale * a.t, map(a.ref, [](double x) { return c_scale * x; }), "c * a");
  holds(a.t / c_scale, map(a.ref, [](double x) { return x / c_scale; }), "a / c");
  if constexpr (!std::same_as<L, Partial>) {
    holds(a.t * b.t, zip(a.ref, b.ref, std::multiplies<>{}), "a * b");
    holds(gelu(a.t), map(a.ref, ref_gelu), "gelu(a)");
    holds(relu(a.t), map(a.ref, [](double x) { return x > 0 ? x : 0.0; }), "relu(a)");
    holds(tanh(a.t), map(a.ref, [](double x) { return std::tanh(x); }), "tanh(a)");
    holds(exp(a.t), map(a.ref, [](double x) { return std::exp(x); }), "exp(a)");
    // sqrt, rsqrt and log of a positive operand (exp(a)), a / b over a non-zero one.
    const Ref pos = map(a.ref, [](double x) { return std::exp(x); });
    holds(sqrt(exp(a.t)), map(pos, [](double x) { return std::sqrt(x); }), "sqrt(exp(a))");
    holds(rsqrt(exp(a.t)), map(pos, [](double x) { return 1 / std::sqrt(x); }), "rsqrt(exp(a))");
    holds(log(exp(a.t)), a.ref, "log(exp(a))");
    holds(sigmoid(a.t * 30.0), map(a.ref, [](double x) { return 1 / (1 + std::exp(-30 * x)); }), "sigmoid(30 a)");
    holds(silu(a.t), map(a.ref, [](double x) { return x / (1 + std::exp(-x)); }), "silu(a)");
    holds(b.t / exp(a.t), zip(b.ref, pos, std::divides<>{}), "b / exp(a)");
    holds(a.t + 0.75, map(a.ref, [](double x) { return x + 0.75; }), "a + c");
    holds(0.75 + a.t, map(a.ref, [](double x) { return 0.75 + x; }), "c + a");
    holds(a.t - 0.75, map(a.ref, [](double x) { return x - 0.75; }), "a - c");
    holds(0.75 - a.t, map(a.ref, [](double x) { return 0.75 - x; }), "c - a");
  } else {
    // P * R and R * P -> P: each rank scales its part; the sum over ranks is (sum p) * r.
    auto r = input<T, R>(s, dice.seed());
    Tensor<T, P> pr = a.t * r.t;
    Tensor<T, P> rp = r.t * a.t;
    const Ref part = zip(local_ref(a.t), r.ref, std::multiplies<>{});
    CHECK(local_error_of(pr, part) <= tol<T>);
    CHECK(local_error_of(rp, part) <= tol<T>);
    CHECK_HOLDS(pr, zip(a.ref, r.ref, std::multiplies<>{}));
    CHECK_HOLDS(rp, zip(r.ref, a.ref, std::multiplies<>{}));
    // P / R -> P: each part divided by the same whole value.
    Tensor<T, P> pdr = a.t / exp(r.t);
    const Ref er = map(r.ref, [](double x) { return std::exp(x); });
    CHECK(local_error_of(pdr, zip(local_ref(a.t), er, std::divides<>{})) <= tol<T>);
    CHECK_HOLDS(pdr, zip(a.ref, er, std::divides<>{}));
  }
}

}  // namespace

TEST_CASE_TEMPLATE("element-wise operations keep equal layouts; P * R and R * P are Partial", T, double, float) {
  Dice dice(202);
  for (int trial = 0; trial < 4; ++trial) {
    const std::int64_t lo = trial == 0 ? 2 : 0;
    const Shape s{dice.extent(lo, 5), dice.extent(lo, 5)};
    const Lens l0 = dice.lengths(s[0]), l1 = dice.lengths(s[1]);
    CAPTURE(trial);
    CAPTURE(s);
    check_elementwise<T, I>(s, {}, dice);
    check_elementwise<T, R>(s, {}, dice);
    check_elementwise<T, P>(s, {}, dice);
    check_elementwise<T, S0>(s, l0, dice);
    check_elementwise<T, S1>(s, l1, dice);
  }
}

// ---- add_bias ------------------------------------------------------------------------------

TEST_CASE("add_bias: (R, R), (I, I), (S<0>, R) and (S<1>, S<0>) with the bias along the last dim") {
  Dice dice(303);
  for (int trial = 0; trial < 4; ++trial) {
    const std::int64_t lo = trial == 0 ? 2 : 0;
    const std::int64_t m = dice.extent(lo, 5), n = dice.extent(lo, 5), h = dice.extent(lo, 3);
    const Lens lm = dice.lengths(m), ln = dice.lengths(n), lh = dice.lengths(h);
    CAPTURE(trial);
    CAPTURE(m);
    CAPTURE(n);
    const Shape X{m, n}, Bs{n};
    {
      auto x = input<double, R>(X, dice.seed());
      auto b = input<double, R>(Bs, dice.seed());
      Tensor<double, R> y = add_bias(x.t, b.t);
      CHECK_HOLDS(y, ref_bias(x.ref, b.ref));
    }
    {
      auto x = input<double, I>(X, dice.seed());
      auto b = input<double, I>(Bs, dice.seed());
      Tensor<double, I> y = add_bias(x.t, b.t);
      CHECK_HOLDS(y, ref_bias(x.ref, b.ref));
    }
    {  // rows sharded, the whole bias on every rank
      auto x = input<double, S0>(X, dice.seed(), lm);
      auto b = input<double, R>(Bs, dice.seed());
      Tensor<double, S0> y = add_bias(x.t, b.t);
      CHECK(lengths_of(y) == lm);
      CHECK_HOLDS(y, ref_bias(x.ref, b.ref));
    }
    {  // a 3-d x sharded along a row dim (1), the whole bias on every rank
      auto x = input<double, S1>(Shape{2, h, n}, dice.seed(), lh);
      auto b = input<double, R>(Bs, dice.seed());
      Tensor<double, S1> y = add_bias(x.t, b.t);
      CHECK(lengths_of(y) == lh);
      CHECK_HOLDS(y, ref_bias(x.ref, b.ref));
    }
    {  // columns sharded, the bias sharded with the same lengths
      auto x = input<double, S1>(X, dice.seed(), ln);
      auto b = input<double, S0>(Bs, dice.seed(), ln);
      Tensor<double, S1> y = add_bias(x.t, b.t);
      CHECK(lengths_of(y) == ln);
      CHECK_HOLDS(y, ref_bias(x.ref, b.ref));
    }
  }
}

// ---- sums --------------------------------------------------------------------------------------

namespace {

/// sum(x) and sum<K>(x) for K = 0, 1, 2 of a 3-d x of layout L; a sharded
/// result keeps x's lengths, a Partial one sums over ranks to the reference.
template <class L>
void check_sums(const Shape& s, const Lens& ls, std::uint64_t seed) {
  CAPTURE(layout_name<L>());
  auto x = input<double, L>(s, seed, ls);
  auto all = eval(sum(x.t));
  static_assert(std::same_as<typename decltype(all)::layout_type, std::conditional_t<is_sharded_v<L>, P, L>>);
  CHECK(all.shape() == Shape{});
  CHECK_HOLDS(all, ref_sum_all(x.ref));
  const auto one = [&]<int K>() {
    CAPTURE(K);
    auto y = eval(sum<K>(x.t));
    using Y = typename decltype(y)::layout_type;
    if constexpr (is_sharded_v<L>) {
      static_assert(std::same_as<Y, std::conditional_t<K == L::dim, P, Sharded<(K < L::dim ? L::dim - 1 : L::dim)>>>);
    } else {
      static_assert(std::same_as<Y, L>);
    }
    CHECK(lengths_of(y) == (is_sharded_v<Y> ? ls : Lens{}));
    CHECK_HOLDS(y, ref_sum_dim(x.ref, K));
  };
  one.template operator()<0>();
  one.template operator()<1>();
  one.template operator()<2>();
}

}  // namespace

TEST_CASE("sum(x) and sum<K>(x) of 3-d tensors of every layout, sharded along each dim") {
  Dice dice(404);
  for (int trial = 0; trial < 4; ++trial) {
    const std::int64_t lo = trial == 0 ? 2 : 0;
    const Shape s{dice.extent(lo, 4), dice.extent(lo, 4), dice.extent(lo, 4)};
    CAPTURE(trial);
    CAPTURE(s);
    check_sums<I>(s, {}, dice.seed());
    check_sums<R>(s, {}, dice.seed());
    check_sums<P>(s, {}, dice.seed());
    check_sums<S0>(s, dice.lengths(s[0]), dice.seed());
    check_sums<S1>(s, dice.lengths(s[1]), dice.seed());
    check_sums<S2>(s, dice.lengths(s[2]), dice.seed());
  }
}

// ---- transpose ------------------------------------------------------------------------------------

TEST_CASE("transpose: S<0> <-> S<1> with the same lengths; R, I and P stay") {
  Dice dice(505);
  for (int trial = 0; trial < 4; ++trial) {
    const std::int64_t lo = trial == 0 ? 2 : 0;
    const Shape s{dice.extent(lo, 5), dice.extent(lo, 5)};
    const Lens l0 = dice.lengths(s[0]), l1 = dice.lengths(s[1]);
    CAPTURE(trial);
    CAPTURE(s);
    {
      auto x = input<double, S0>(s, dice.seed(), l0);
      Tensor<double, S1> y = transpose(x.t);
      CHECK(lengths_of(y) == l0);
      CHECK_HOLDS(y, ref_transpose(x.ref));
    }
    {
      auto x = input<double, S1>(s, dice.seed(), l1);
      Tensor<double, S0> y = transpose(x.t);
      CHECK(lengths_of(y) == l1);
      CHECK_HOLDS(y, ref_transpose(x.ref));
    }
    {
      auto x = input<double, R>(s, dice.seed());
      Tensor<double, R> y = transpose(x.t);
      CHECK_HOLDS(y, ref_transpose(x.ref));
    }
    {
      auto x = input<double, I>(s, dice.seed());
      Tensor<double, I> y = transpose(x.t);
      CHECK_HOLDS(y, ref_transpose(x.ref));
    }
    {
      auto x = input<double, P>(s, dice.seed());
      Tensor<double, P> y = transpose(x.t);
      CHECK(local_error_of(y, ref_transpose(local_ref(x.t))) <= tol<double>);
      CHECK_HOLDS(y, ref_transpose(x.ref));
    }
  }
}

// ---- fusion ------------------------------------------------------------------------------------------

namespace {

/// How many of `node`'s inputs are `want`.
int count_input(const autodiff::Node& node, const autodiff::Node* want) {
  return static_cast<int>(std::ranges::count_if(node.inputs, [&](const auto& in) { return in.get() == want; }));
}

/// gelu(a * b + c) * 2 evaluates to one node (the root op, "scale") whose
/// inputs are the three leaves, and the right values.
template <class L>
void check_fused_tree(const Shape& s, const Lens& ls, Dice& dice) {
  CAPTURE(layout_name<L>());
  auto a = input<double, L>(s, dice.seed(), ls);
  auto b = input<double, L>(s, dice.seed(), ls);
  auto c = input<double, L>(s, dice.seed(), ls);
  a.t.requires_grad();
  b.t.requires_grad();
  c.t.requires_grad();
  Tensor<double, L> y = gelu(a.t * b.t + c.t) * 2.0;
  const Ref ab = zip(a.ref, b.ref, std::multiplies<>{});
  CHECK_HOLDS(y, map(zip(ab, c.ref, std::plus<>{}), [](double u) { return 2.0 * ref_gelu(u); }));
  CHECK(y.node() != nullptr);
  if (y.node()) {
    const auto& node = *y.node();
    CHECK(std::string(node.op) == "scale");
    CHECK(node.inputs.size() == 3);
    CHECK(count_input(node, a.t.node().get()) == 1);
    CHECK(count_input(node, b.t.node().get()) == 1);
    CHECK(count_input(node, c.t.node().get()) == 1);
  }
  // A leaf used three times is one input.
  Tensor<double, L> z = exp(a.t) * a.t - a.t;
  CHECK_HOLDS(z, map(a.ref, [](double u) { return std::exp(u) * u - u; }));
  CHECK(z.node() != nullptr);
  if (z.node()) {
    CHECK(std::string(z.node()->op) == "sub");
    CHECK(z.node()->inputs.size() == 1);
    CHECK(count_input(*z.node(), a.t.node().get()) == 1);
  }
}

}  // namespace

TEST_CASE("fusion: an element-wise tree is one pass and one autodiff node over its leaves") {
  Dice dice(606);
  const Shape s{dice.extent(2, 5), dice.extent(2, 5)};
  const Lens l1 = dice.lengths(s[1]);
  check_fused_tree<R>(s, {}, dice);
  check_fused_tree<S1>(s, l1, dice);

  {  // a transition as a leaf: gelu(all_reduce(p)) + r
    auto p = input<double, P>(s, dice.seed());
    auto r = input<double, R>(s, dice.seed());
    p.t.requires_grad();
    r.t.requires_grad();
    Tensor<double, R> y = gelu(all_reduce(p.t)) + r.t;
    CHECK_HOLDS(y, zip(map(p.ref, ref_gelu), r.ref, std::plus<>{}));
    CHECK(y.node() != nullptr);
    if (y.node()) {
      const auto& node = *y.node();
      CHECK(std::string(node.op) == "add");
      CHECK(node.inputs.size() == 2);
      CHECK(count_input(node, r.t.node().get()) == 1);
      // The other input is the all-reduce, whose input is p.
      int reduce_of_p = 0;
      for (const auto& in : node.inputs)
        if (in && in.get() != r.t.node().get()) reduce_of_p += count_input(*in, p.t.node().get());
      CHECK(reduce_of_p == 1);
    }
  }
}

// ---- run-time shape errors ------------------------------------------------------------------------

/// CHECKs that `expr` throws shardex::invalid_argument whose message contains
/// each of the fragments (on this rank; every rank runs the same check).
#define CHECK_THROWS_NAMING(expr, ...)                                              \
  for (const std::string frag_ : {__VA_ARGS__}) {                                   \
    CHECK_THROWS_WITH_AS(expr, doctest::Contains(frag_.c_str()), invalid_argument); \
  }

TEST_CASE("run-time shape errors are invalid_argument on every rank, naming the operation and the shapes") {
  const auto& comm = world();
  const int n = comm.size();
  // Everything on rank 0 / everything on the last rank: with 3 ranks or more
  // the ranks in between hold nothing either way, so only a check of the
  // global shapes and lengths (not of the local shapes) catches it there.
  const auto on_rank = [&](int who, std::int64_t total) {
    Lens ls(static_cast<std::size_t>(n), 0);
    ls[static_cast<std::size_t>(who)] = total;
    return ls;
  };

  SUBCASE("element-wise operands with different global shapes") {
    auto a = input<double, R>(Shape{2, 3}, 1).t;
    auto b = input<double, R>(Shape{2, 4}, 2).t;
    CHECK_THROWS_NAMING((void)eval(a + b), "shardex::add", "(2, 3)", "(2, 4)");
    CHECK_THROWS_NAMING((void)eval(gelu(a) - b), "shardex::sub", "(2, 3)", "(2, 4)");
    // Sharded rows: 3 on rank 0 against 3 on rank 0 and 1 more on the last rank.
    Lens lb = on_rank(0, 3);
    lb.back() += 1;
    auto c = input<double, S0>(Shape{3, 2}, 3, on_rank(0, 3)).t;
    auto d = input<double, S0>(Shape{4, 2}, 4, lb).t;
    CHECK_THROWS_NAMING((void)eval(c * d), "shardex::mul", "(3, 2)", "(4, 2)");
  }

  SUBCASE("element-wise sharded operands with the same global shape but different lengths") {
    if (n > 1) {
      auto a = input<double, S1>(Shape{2, 3}, 5, on_rank(0, 3)).t;
      auto b = input<double, S1>(Shape{2, 3}, 6, on_rank(n - 1, 3)).t;
      CHECK_THROWS_NAMING((void)eval(a + b), "shardex::add", "(2, 3)", "lengths");
    }
  }

  SUBCASE("matmul with mismatched contraction dims") {
    auto a = input<double, R>(Shape{2, 3}, 7).t;
    auto b = input<double, R>(Shape{4, 2}, 8).t;
    CHECK_THROWS_NAMING((void)eval(matmul(a, b)), "shardex::matmul", "contraction", "(2, 3)", "(4, 2)");
    if (n > 1) {  // row-parallel: the same k, split with different lengths
      auto c = input<double, S1>(Shape{2, 3}, 9, on_rank(0, 3)).t;
      auto d = input<double, S0>(Shape{3, 2}, 10, on_rank(n - 1, 3)).t;
      CHECK_THROWS_NAMING((void)eval(matmul(c, d)), "shardex::matmul", "contraction", "lengths");
    }
  }

  SUBCASE("add_bias with a bias of the wrong length") {
    auto x = input<double, R>(Shape{2, 3}, 11).t;
    auto b = input<double, R>(Shape{4}, 12).t;
    CHECK_THROWS_NAMING((void)eval(add_bias(x, b)), "shardex::add_bias", "(2, 3)", "(4)");
    auto b2 = input<double, R>(Shape{1, 3}, 13).t;
    CHECK_THROWS_NAMING((void)eval(add_bias(x, b2)), "shardex::add_bias", "(2, 3)", "(1, 3)", "1-d");
    if (n > 1) {  // a sharded bias split with other lengths than x's columns
      auto xs = input<double, S1>(Shape{2, 3}, 14, on_rank(0, 3)).t;
      auto bs = input<double, S0>(Shape{3}, 15, on_rank(n - 1, 3)).t;
      CHECK_THROWS_NAMING((void)eval(add_bias(xs, bs)), "shardex::add_bias", "(2, 3)", "lengths");
    }
    // Rows sharded: the bias runs along the whole last dim, so a sharded bias is
    // wrong even where its local part happens to have the right size.
    auto xr = input<double, S0>(Shape{3, 3}, 16, on_rank(0, 3)).t;
    auto br = input<double, S0>(Shape{3}, 17, on_rank(0, 3)).t;
    CHECK_THROWS_NAMING((void)eval(add_bias(xr, br)), "shardex::add_bias", "(3, 3)", "not sharded along its last dim");
  }

  SUBCASE("transpose of a 3-d tensor") {
    auto x = input<double, R>(Shape{2, 3, 4}, 16).t;
    CHECK_THROWS_NAMING((void)eval(transpose(x)), "shardex::transpose", "2-d", "(2, 3, 4)");
    auto xs = input<double, S0>(Shape{2, 3, 4}, 17, on_rank(n - 1, 2)).t;
    CHECK_THROWS_NAMING((void)eval(transpose(xs)), "shardex::transpose", "2-d", "(2, 3, 4)");
  }

  SUBCASE("sum<K> with K out of range") {
    auto x = input<double, R>(Shape{2, 3, 4}, 18).t;
    CHECK_THROWS_NAMING((void)eval(sum<3>(x)), "shardex::sum<3>", "(2, 3, 4)");
    auto xs = input<double, S1>(Shape{2, 3}, 19, on_rank(0, 3)).t;
    CHECK_THROWS_NAMING((void)eval(sum<2>(xs)), "shardex::sum<2>", "(2, 3)");
  }
}

}  // namespace shardex_test_dsl_rules
