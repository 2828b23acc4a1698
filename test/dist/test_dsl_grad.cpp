// SPDX-License-Identifier: MIT
// Gradients through the typed DSL (docs/concepts/dsl.md), in double, at every
// world size, with uneven lengths (zeros included):
//
// 1. Composite expressions (a Megatron MLP block, a sequence-parallel block
//    with all_to_all and transpose, Partial parameters and Partial losses,
//    chains of transitions in the middle) against central finite differences
//    of the objective J = sum over ranks of the local losses (an Invariant loss
//    counted once). A parameter element is perturbed where its layout says the
//    element lives: a Sharded one on the rank that owns it, an Invariant one on
//    every rank (one shared value), a Replicated one on every rank (the copies
//    stay equal; compared with the sum over ranks of its Partial gradient), a
//    Partial one on one rank (compared with that element of its Replicated
//    gradient, which must be the same on every rank).
// 2. The dot-product test of every planned `redistribute<To>(x)` among
//    I, R, P, S(0), S(1) (S -> S along the same dim with other lengths is a
//    reshard): for loss = sum(T(x) * w),
//      J == sum_r <T(x)_r, w_r> == sum_r <x_r, grad_r>     (an Invariant side once),
//    the gradient equals the table's adjoint applied to w, and the forward
//    values equal the expected local part, computed without communication.
// 3. Chains of transitions: the same values and gradients as the single
//    transition they simplify to, and one autodiff node whose op is that
//    entry (so the backward runs the dual of the simplified plan).
// 4. Gradients accumulate across backward passes; zero_grad resets them.
// (1. includes a SwiGLU block and every non-linear element-wise op: silu,
// sigmoid, sqrt, rsqrt, log, and division, P / R among them.)
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <shardex.hpp>

#include "support/dist.hpp"

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_dsl_grad {

using namespace shardex;

namespace {

using X = double;
using Lens = std::vector<std::int64_t>;
using Index = std::span<const std::int64_t>;
using S0 = Sharded<0>;
using S1 = Sharded<1>;

const mpi::Communicator& comm() { return test::world(); }

// ---- values ------------------------------------------------------------------------

std::uint64_t mix(std::uint64_t z) {  // splitmix64's finalizer
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// The source of values that do not depend on the rank (one global tensor).
constexpr std::uint64_t global_src = ~0ull;

/// A number in [-1, 1), a function of (seed, source, element k) only.
double val(std::uint64_t seed, std::uint64_t src, std::int64_t k) {
  const std::uint64_t z = mix(mix(seed ^ mix(src)) + static_cast<std::uint64_t>(k));
  return static_cast<double>(z >> 11) * 0x1.0p-53 * 2.0 - 1.0;
}

std::int64_t linear(const Shape& g, Index idx) {
  std::int64_t k = 0;
  for (int d = 0; d < g.rank(); ++d) k = k * g[d] + idx[static_cast<std::size_t>(d)];
  return k;
}

std::int64_t sum_of(const Lens& ls) {
  std::int64_t s = 0;
  for (auto l : ls) s += l;
  return s;
}

std::string str(const Lens& ls) { return to_string(std::span<const std::int64_t>(ls)); }

/// The sharded dim of L, or -1.
template <LayoutTag L>
constexpr int dim_of() {
  if constexpr (is_sharded_v<L>)
    return L::dim;
  else
    return -1;
}

template <LayoutTag L>
layout_mapping<L> mapping_of(const Lens& ls) {
  if constexpr (is_sharded_v<L>)
    return layout_mapping<L>(ls);
  else
    return {};
}

/// A tensor of layout L whose element at global index k is scale * val(seed, src, k):
/// src is the rank when `per_rank` (R or P copies drawn independently per rank),
/// else one global tensor of which every rank holds its part.
template <LayoutTag L>
Tensor<X, L> make(const Shape& g, std::uint64_t seed, const Lens& ls = {}, bool per_rank = false, double scale = 1.0) {
  const std::uint64_t src = per_rank ? static_cast<std::uint64_t>(comm().rank()) : global_src;
  return Tensor<X, L>::from_function(
      comm(), g, [&](Index idx) { return scale * val(seed, src, linear(g, idx)); }, mapping_of<L>(ls));
}

/// A differentiable parameter (see make).
template <LayoutTag L>
Tensor<X, L> param_tensor(const Shape& g, std::uint64_t seed, const Lens& ls = {}, bool per_rank = false,
                          double scale = 1.0) {
  auto t = make<L>(g, seed, ls, per_rank, scale);
  t.requires_grad();
  return t;
}

/// Lengths cases at n ranks: two random (zeros likely), one with a forced zero,
/// one where a single rank holds everything, and (optionally) all zero.
std::vector<Lens> lens_cases(std::mt19937_64& rng, int n, bool with_empty) {
  return test::lengths_cases(rng, n, {.random = 2, .max_total = 2 * n + 3, .even = false, .empty = with_empty});
}

// ---- type-erased views (the checks below are not templates) ------------------------

struct View {
  LayoutKind kind = LayoutKind::replicated;
  int dim = -1;  // the sharded dim, or -1
  Lens lens;
  Shape global, local;
  std::int64_t offset = 0;
  const X* data = nullptr;
  std::int64_t size = 0;
};

template <LayoutTag L>
View view(const Tensor<X, L>& t) {
  View v;
  v.kind = L::kind;
  v.global = t.shape();
  v.local = t.local_shape();
  v.offset = t.global_offset();
  v.data = t.data();
  v.size = t.size();
  if constexpr (is_sharded_v<L>) {
    v.dim = L::dim;
    v.lens.assign(t.lengths().begin(), t.lengths().end());
  }
  return v;
}

/// The global index of local element i of v.
void global_index(const View& v, std::int64_t i, std::vector<std::int64_t>& idx) {
  idx.assign(static_cast<std::size_t>(v.local.rank()), 0);
  for (int d = v.local.rank() - 1; d >= 0; --d) {
    idx[static_cast<std::size_t>(d)] = i % v.local[d];
    i /= v.local[d];
  }
  if (v.dim >= 0) idx[static_cast<std::size_t>(v.dim)] += v.offset;
}

double sum_over_ranks(double v) {
  comm().all_reduce(&v, 1);
  return v;
}

/// sum_r <a_r, b_r> (an Invariant pairing counted once) and the sum of |terms|,
/// for the tolerance. Collective. A local shape mismatch on any rank fails.
struct Dot {
  double value = 0, scale = 0;
};
Dot dot(const View& a, const View& b, const std::string& what) {
  std::array<double, 3> v{0, 0, 0};
  const bool same = a.local == b.local && a.global == b.global;
  if (!same)
    v[2] = 1;
  else if (a.kind != LayoutKind::invariant || comm().rank() == 0)
    for (std::int64_t i = 0; i < a.size; ++i) {
      v[0] += a.data[i] * b.data[i];
      v[1] += std::abs(a.data[i] * b.data[i]);
    }
  comm().all_reduce(v.data(), 3);
  CHECK_MESSAGE(v[2] == 0, what << ": the operands of a pairing differ in shape on " << v[2] << " rank(s)");
  return {v[0], v[1]};
}

bool close(double a, double b, double scale, double tol = 1e-12) {
  return std::abs(a - b) <= tol * std::max({scale, std::abs(a), std::abs(b), 1e-300});
}

/// Every local element of a equals b's (no communication).
void check_same(const View& a, const View& b, const std::string& what, double tol = 1e-12) {
  INFO(what);
  CHECK(a.global == b.global);
  CHECK(a.local == b.local);
  CHECK(a.kind == b.kind);
  if (!(a.local == b.local)) return;
  std::int64_t bad = 0;
  double worst = 0;
  for (std::int64_t i = 0; i < a.size; ++i) {
    const double d = std::abs(a.data[i] - b.data[i]);
    if (!(d <= tol * std::max(1.0, std::abs(b.data[i])))) ++bad;
    worst = std::max(worst, d);
  }
  CHECK_MESSAGE(bad == 0, bad << " of " << a.size << " local elements differ, by up to " << worst << " on rank "
                              << comm().rank());
}

/// Every local element of y equals expected(global index) (no communication).
void check_values(const View& y, const std::function<double(Index)>& expected, const std::string& what) {
  INFO(what);
  std::vector<std::int64_t> idx;
  std::int64_t bad = 0;
  double worst = 0;
  for (std::int64_t i = 0; i < y.size; ++i) {
    global_index(y, i, idx);
    const double e = expected(idx);
    const double d = std::abs(y.data[i] - e);
    if (!(d <= 1e-12 * std::max(1.0, std::abs(e)))) ++bad;
    worst = std::max(worst, d);
  }
  CHECK_MESSAGE(bad == 0, bad << " of " << y.size << " local elements are not the expected values, off by up to "
                              << worst << " on rank " << comm().rank());
}

/// J = the sum over ranks of the local losses; an Invariant loss counts once
/// (and must be the same on every rank). Collective.
double objective(const View& loss) {
  CHECK(loss.global.numel() == 1);
  const double v = loss.size == 1 ? loss.data[0] : std::numeric_limits<double>::quiet_NaN();
  const double total = sum_over_ranks(v);
  if (loss.kind != LayoutKind::invariant) return total;
  CHECK_MESSAGE(close(total, comm().size() * v, std::abs(total), 1e-14),
                "an Invariant loss differs across ranks: " << v << " here, sum over ranks " << total);
  return v;
}

template <LayoutTag L>
double objective(const Tensor<X, L>& loss) {
  return objective(view(loss));
}

// ---- finite differences -------------------------------------------------------------------

struct Param {
  std::string name;
  View v;
  X* data = nullptr;
  const X* grad = nullptr;  // the local gradient (layout dual(L), same local shape), or null
};

template <LayoutTag L>
Param param(std::string name, const Tensor<X, L>& t) {
  Param p{std::move(name), view(t), t.data(), nullptr};
  CHECK_MESSAGE(t.has_grad(), p.name << " has no gradient after backward");
  if (t.has_grad()) {
    CHECK_MESSAGE(t.grad().local_shape() == t.local_shape(), p.name << ": the gradient's local shape differs");
    CHECK_MESSAGE(t.grad().shape() == t.shape(), p.name << ": the gradient's global shape differs");
    if (t.grad().local_shape() == t.local_shape()) p.grad = t.grad().data();
  }
  return p;
}

struct FdStats {
  int checked = 0;  // elements compared
  int nonzero = 0;  // of them, with a gradient clearly away from 0
};

constexpr double fd_h = 0x1.0p-20;  // ~1e-6, exact in binary
constexpr double fd_tol = 1e-6;

/// Compares `samples` random elements of p's gradient with central differences
/// of J. Collective: every rank calls it with the same rng state.
void fd_check(const std::function<double()>& J, const Param& p, std::mt19937_64& rng, FdStats& st, int samples = 3) {
  const int n = comm().size(), me = comm().rank();
  const std::int64_t numel = p.v.global.numel();
  if (numel == 0) return;
  std::uniform_int_distribution<std::int64_t> pick_k(0, numel - 1);
  std::uniform_int_distribution<int> pick_rank(0, n - 1);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int s = 0; s < samples; ++s) {
    const std::int64_t k = pick_k(rng);
    const int partial_rank = pick_rank(rng);
    // Where the element lives: its owner and its local index there.
    std::vector<std::int64_t> idx(static_cast<std::size_t>(p.v.global.rank()));
    std::int64_t rem = k;
    for (int d = p.v.global.rank() - 1; d >= 0; --d) {
      idx[static_cast<std::size_t>(d)] = rem % p.v.global[d];
      rem /= p.v.global[d];
    }
    std::int64_t lk = k;
    bool mine = true;  // this rank perturbs the element
    int owner = -1;
    if (p.v.kind == LayoutKind::sharded) {
      const auto d = static_cast<std::size_t>(p.v.dim);
      std::int64_t off = 0;
      for (int r = 0; r < n; ++r) {
        const std::int64_t len = p.v.lens[static_cast<std::size_t>(r)];
        if (idx[d] >= off && idx[d] < off + len) {
          owner = r;
          idx[d] -= off;
          break;
        }
        off += len;
      }
      mine = me == owner;
      if (mine) lk = linear(p.v.local, idx);
    } else if (p.v.kind == LayoutKind::partial) {
      mine = me == partial_rank;
    }
    INFO(p.name, " ", p.v.global.str(), ", global element ", k, ", owner ", owner, ", partial rank ", partial_rank);

    // The analytic value, from the layout of the gradient.
    const double g = p.grad ? (mine || p.v.kind != LayoutKind::sharded ? p.grad[lk] : 0.0) : nan;
    double contrib = 0;
    switch (p.v.kind) {
      case LayoutKind::sharded:
        contrib = mine ? g : 0.0;
        break;
      case LayoutKind::replicated:
        contrib = g;
        break;  // the Partial gradient: its sum over ranks
      case LayoutKind::invariant:
        contrib = me == 0 ? g : 0.0;
        break;
      case LayoutKind::partial:
        contrib = mine ? g : 0.0;
        break;
    }
    const double analytic = sum_over_ranks(contrib);
    if (p.v.kind == LayoutKind::invariant || p.v.kind == LayoutKind::partial)
      CHECK_MESSAGE(close(g, analytic, std::abs(analytic), 1e-14),
                    "the gradient (" << (p.v.kind == LayoutKind::invariant ? "Invariant" : "Replicated")
                                     << ") differs across ranks: " << g << " here, " << analytic
                                     << " on the reference rank");

    // Central differences.
    X* e = mine ? p.data + lk : nullptr;
    const X orig = e ? *e : X(0);
    if (e) *e = orig + fd_h;
    const double jp = J();
    if (e) *e = orig - fd_h;
    const double jm = J();
    if (e) *e = orig;
    const double fd = (jp - jm) / (2 * fd_h);
    CHECK_MESSAGE(
        std::abs(fd - analytic) <= fd_tol * std::max(1.0, std::abs(analytic)),
        "gradient " << analytic << " but finite differences give " << fd << " (J+ " << jp << ", J- " << jm << ")");
    ++st.checked;
    if (std::abs(analytic) > 1e-3) ++st.nonzero;
  }
}

void fd_check_all(const std::function<double()>& J, const std::vector<Param>& ps, std::mt19937_64& rng, FdStats& st) {
  for (const Param& p : ps) fd_check(J, p, rng, st);
}

// ---- 1. composite expressions ----------------------------------------------------------------

/// A Megatron MLP block: x Invariant (b x d), A column-parallel S(1) (d x f),
/// bias a S(0) (f), B row-parallel S(0) (f x d), output bias c Invariant (d).
struct Mlp {
  Tensor<X, Invariant> x;
  Tensor<X, S1> A;
  Tensor<X, S0> a;
  Tensor<X, S0> B;
  Tensor<X, Invariant> c;
  Tensor<X, Replicated> t;  // a target, not differentiable
};

Mlp make_mlp(const Lens& lf, std::uint64_t seed) {
  const std::int64_t b = 3, d = 4, f = sum_of(lf);
  return {param_tensor<Invariant>({b, d}, seed + 1),
          param_tensor<S1>({d, f}, seed + 2, lf),
          param_tensor<S0>({f}, seed + 3, lf),
          param_tensor<S0>({f, d}, seed + 4, lf),
          param_tensor<Invariant>({d}, seed + 5, {}, false, 0.5),
          make<Replicated>({b, d}, seed + 6)};
}

/// The row-parallel product: Partial (b x d).
auto mlp_partial(const Mlp& m) { return matmul(gelu(add_bias(matmul(replicate(m.x), m.A), m.a)), m.B); }
/// all_reduce into R, bias, a Replicated loss (each rank's counts).
auto mlp_loss_r(const Mlp& m) { return sum(tanh(add_bias(all_reduce(mlp_partial(m)), replicate(m.c))) * m.t); }
/// all_reduce into I, bias, an Invariant loss (counted once).
auto mlp_loss_i(const Mlp& m) { return sum(exp(add_bias(all_reduce<Invariant>(mlp_partial(m)), m.c) * 0.5)); }

std::vector<Param> mlp_params(const Mlp& m) {
  return {param("x (I)", m.x), param("A (S1)", m.A), param("a (S0)", m.a), param("B (S0)", m.B), param("c (I)", m.c)};
}

TEST_CASE("finite differences: Megatron MLP block, Replicated and Invariant losses") {
  const int n = comm().size();
  auto rng = test::shared_rng(101);
  FdStats st;
  for (const Lens& lf : lens_cases(rng, n, true)) {
    INFO("lengths ", str(lf));
    const std::uint64_t seed = rng();
    {
      Mlp m = make_mlp(lf, seed);
      const auto loss = eval(mlp_loss_r(m));
      static_assert(std::same_as<decltype(loss)::layout_type, Replicated>);
      backward(loss);
      fd_check_all([&] { return objective(eval(mlp_loss_r(m))); }, mlp_params(m), rng, st);
    }
    {
      Mlp m = make_mlp(lf, seed);
      const auto loss = eval(mlp_loss_i(m));
      static_assert(std::same_as<decltype(loss)::layout_type, Invariant>);
      backward(loss);
      fd_check_all([&] { return objective(eval(mlp_loss_i(m))); }, mlp_params(m), rng, st);
    }
  }
  CHECK(st.checked >= 30);
  CHECK(st.nonzero >= std::max(6, st.checked / 4));
}

TEST_CASE("finite differences: a SwiGLU block (silu gate), sigmoid, sqrt, rsqrt, log, division, P / R, x + c, c - x") {
  const int n = comm().size();
  auto rng = test::shared_rng(151);
  FdStats st;
  for (const Lens& lf : lens_cases(rng, n, true)) {
    INFO("lengths ", str(lf));
    const std::int64_t t = 3, h = 4, f = sum_of(lf);
    const std::uint64_t seed = rng();
    auto x = param_tensor<Invariant>({t, h}, seed + 1);
    auto W1 = param_tensor<S1>({h, f}, seed + 2, lf);  // gate, column-parallel
    auto W3 = param_tensor<S1>({h, f}, seed + 3, lf);  // up, column-parallel
    auto W2 = param_tensor<S0>({f, h}, seed + 4, lf);  // down, row-parallel
    auto d = param_tensor<Replicated>({t, h}, seed + 5);
    const auto loss_expr = [&] {
      auto xr = replicate(x);
      auto p = matmul(silu(matmul(xr, W1)) * matmul(xr, W3), W2);  // LLaMA's MLP: P
      auto q = p / exp(d * 0.5);                                   // P / R: P
      auto y = all_reduce(q);                                      // R
      auto e = exp(y * 0.4);                                       // positive
      return sum(sqrt(e) + rsqrt(e) * (1.0 - sigmoid(y)) + log(e + exp(d)) * 0.3 - y / (e + 1.0) + log(0.5 + e - 0.25));
    };
    backward(loss_expr());
    fd_check_all(
        [&] { return objective(eval(loss_expr())); },
        {param("x (I)", x), param("W1 (S1)", W1), param("W3 (S1)", W3), param("W2 (S0)", W2), param("d (R)", d)}, rng,
        st);
  }
  CHECK(st.checked >= 30);
  CHECK(st.nonzero >= std::max(6, st.checked / 4));
}

TEST_CASE("finite differences: row-sharded matmul, tanh, all_to_all, transpose, sum<1>, all_gather, relu") {
  const int n = comm().size();
  auto rng = test::shared_rng(202);
  FdStats st;
  const auto cases = lens_cases(rng, n, true);
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const Lens& la = cases[c];
    const Lens& lb = cases[(c + 1) % cases.size()];
    INFO("lengths ", str(la), " -> ", str(lb));
    const std::int64_t m = sum_of(la), k = 3, nn = sum_of(lb);
    const std::uint64_t seed = rng();
    auto x = param_tensor<S0>({m, k}, seed + 1, la);
    auto W = param_tensor<Replicated>({k, nn}, seed + 2);
    auto s = param_tensor<S0>({nn}, seed + 3, lb);
    const auto q = make<Replicated>({nn}, seed + 4, {}, false, 0.5);
    const auto q2 = make<Replicated>({nn}, seed + 5);
    const auto loss_expr = [&] {
      auto h = tanh(matmul(x, W));                                             // S(0) m x nn
      auto z = transpose(all_to_all<S1>(h, lb));                               // S(1) m x nn, then S(0) nn x m
      auto v = sum<1>(exp(z * 0.5)) * s;                                       // S(0) nn
      return sum((relu(all_gather(v) - q) + tanh(all_gather(v) * 0.3)) * q2);  // R
    };
    backward(loss_expr());
    fd_check_all([&] { return objective(eval(loss_expr())); },
                 {param("x (S0)", x), param("W (R)", W), param("s (S0)", s)}, rng, st);
  }
  CHECK(st.checked >= 12);
  CHECK(st.nonzero >= std::max(6, st.checked / 4));
}

TEST_CASE(
    "finite differences: matmul(a, transpose(b)) read transposed in place: R x S(0)^T (a tied output layer), "
    "S(1) x S(1)^T") {
  const int n = comm().size();
  auto rng = test::shared_rng(404);
  FdStats st;
  const auto cases = lens_cases(rng, n, true);
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const Lens& lv = cases[c];
    const Lens& lk = cases[(c + 1) % cases.size()];
    INFO("lengths ", str(lv), " and ", str(lk));
    const std::int64_t t = 3, h = 4, v = sum_of(lv), kk = sum_of(lk);
    const std::uint64_t seed = rng();
    auto x = param_tensor<Invariant>({t, h}, seed + 1);
    auto table = param_tensor<S0>({v, h}, seed + 2, lv);  // (vocab rows, width), as GPT-2's wte
    auto a = param_tensor<S1>({t, kk}, seed + 3, lk);
    auto b = param_tensor<S1>({h, kk}, seed + 4, lk);
    const auto w = make<Replicated>({t, h}, seed + 5);
    const auto loss_expr = [&] {
      auto logits = matmul(replicate(x), transpose(table));  // R x S(0)^T = R x S(1): S(1) t x v
      auto p = matmul(a, transpose(b));                      // S(1) x S(1)^T = S(1) x S(0): P t x h
      return sum(exp(all_gather(logits) * 0.3)) + sum(tanh(all_reduce(p)) * w);
    };
    backward(loss_expr());
    fd_check_all([&] { return objective(eval(loss_expr())); },
                 {param("x (I)", x), param("table (S0)", table), param("a (S1)", a), param("b (S1)", b)}, rng, st);
  }
  CHECK(st.checked >= 12);
  CHECK(st.nonzero >= std::max(6, st.checked / 4));
}

TEST_CASE(
    "finite differences: a Partial parameter through reduce_scatter, a simplified chain, sum<0>, an Invariant loss") {
  const int n = comm().size();
  auto rng = test::shared_rng(303);
  FdStats st;
  const auto cases = lens_cases(rng, n, true);
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const Lens& la = cases[c];
    const Lens& lb = cases[(c + 1) % cases.size()];
    INFO("lengths ", str(la), " -> ", str(lb));
    const std::int64_t m = sum_of(la), nn = sum_of(lb);
    const std::uint64_t seed = rng();
    auto p = param_tensor<Partial>({m, nn}, seed + 1, {}, true, 0.7);  // each rank its own part
    auto e = param_tensor<S0>({m, nn}, seed + 2, la);
    const auto loss_expr = [&] {
      auto g = gelu(reduce_scatter<S0>(p, la)) * e;                   // S(0)
      auto r = redistribute<S1>(all_gather(g), lb);                   // S(0) -> R -> S(1): one all_to_all
      return sum(exp(all_gather<Invariant>(tanh(sum<0>(r))) * 0.7));  // S(0) nn, I nn, I
    };
    const auto loss = eval(loss_expr());
    static_assert(std::same_as<decltype(loss)::layout_type, Invariant>);
    backward(loss);
    fd_check_all([&] { return objective(eval(loss_expr())); }, {param("p (P)", p), param("e (S0)", e)}, rng, st);
  }
  CHECK(st.checked >= 6);
  CHECK(st.nonzero >= std::max(6, st.checked / 4));
}

TEST_CASE("finite differences: a Partial loss: matmul(P, R), P * R, zero_pad, P + P") {
  const int n = comm().size();
  auto rng = test::shared_rng(404);
  FdStats st;
  for (const Lens& la : lens_cases(rng, n, true)) {
    INFO("lengths ", str(la));
    const std::int64_t m = sum_of(la), k = 3, nn = 4;
    const std::uint64_t seed = rng();
    auto p = param_tensor<Partial>({m, k}, seed + 1, {}, true);
    auto W = param_tensor<Replicated>({k, nn}, seed + 2);
    auto r = param_tensor<Replicated>({m, nn}, seed + 3);
    auto s = param_tensor<S0>({m, nn}, seed + 4, la);
    const auto loss_expr = [&] { return sum(matmul(p, W) * r + zero_pad(tanh(s)) * r); };
    const auto loss = eval(loss_expr());
    static_assert(std::same_as<decltype(loss)::layout_type, Partial>);
    backward(loss);
    fd_check_all([&] { return objective(eval(loss_expr())); },
                 {param("p (P)", p), param("W (R)", W), param("r (R)", r), param("s (S0)", s)}, rng, st);
  }
  CHECK(st.checked >= 12);
  CHECK(st.nonzero >= std::max(6, st.checked / 4));
}

TEST_CASE(
    "finite differences: slice of an Invariant, transpose of S(1), sum over the sharded dim, a chain that is one all_reduce") {
  const int n = comm().size();
  auto rng = test::shared_rng(505);
  FdStats st;
  const auto cases = lens_cases(rng, n, true);
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const Lens& la = cases[c];
    const Lens& lb = cases[(c + 1) % cases.size()];
    INFO("lengths ", str(la), ", ", str(lb));
    const std::int64_t m = sum_of(la), nn = sum_of(lb);
    const std::uint64_t seed = rng();
    auto x = param_tensor<Invariant>({m, nn}, seed + 1);
    auto bb = param_tensor<Replicated>({m}, seed + 2);
    const auto loss_expr = [&] {
      auto xs = slice<S1>(replicate(x), lb);                          // I -> R -> S(1): one slice
      auto pp = sum<0>(transpose(exp(xs * 0.3) * xs));                // S(0) nn x m summed over dim 0: P m
      auto z = add_bias(all_gather(reduce_scatter<S0>(pp, la)), bb);  // one all_reduce, R m
      return sum(relu(z) * z);
    };
    backward(loss_expr());
    fd_check_all([&] { return objective(eval(loss_expr())); }, {param("x (I)", x), param("bb (R)", bb)}, rng, st);
  }
  CHECK(st.checked >= 6);
  CHECK(st.nonzero >= std::max(6, st.checked / 4));
}

// ---- 2. every planned redistribute path --------------------------------------------------------

template <class... Ls>
struct type_list {};
using Layouts = type_list<Invariant, Replicated, Partial, S0, S1>;

template <class F, class... Ls>
void for_each_layout(type_list<Ls...>, F&& f) {
  (f(std::type_identity<Ls>{}), ...);
}

constexpr bool per_rank_kind(LayoutKind k) { return k == LayoutKind::replicated || k == LayoutKind::partial; }

/// The value the planned From -> To puts at global index idx on this rank, for an
/// input made by make<From>(g, seed, lf, per_rank_kind(From)).
double expected_value(LayoutKind from, int from_dim, const Lens& lf, LayoutKind to, std::uint64_t seed, const Shape& g,
                      Index idx) {
  const std::int64_t k = linear(g, idx);
  const int me = comm().rank();
  if (from == LayoutKind::partial && to != LayoutKind::partial) {  // the sum of the parts
    double s = 0;
    for (int r = 0; r < comm().size(); ++r) s += val(seed, static_cast<std::uint64_t>(r), k);
    return s;
  }
  if (from == LayoutKind::sharded && to == LayoutKind::partial) {  // zero_pad: this rank's slice, zeros elsewhere
    std::int64_t off = 0;
    for (int r = 0; r < me; ++r) off += lf[static_cast<std::size_t>(r)];
    const std::int64_t i = idx[static_cast<std::size_t>(from_dim)];
    return i >= off && i < off + lf[static_cast<std::size_t>(me)] ? val(seed, global_src, k) : 0.0;
  }
  return val(seed, per_rank_kind(from) ? static_cast<std::uint64_t>(me) : global_src, k);
}

struct RouteStats {
  int runs = 0;
  int nonzero = 0;  // runs where the objective was clearly away from 0
};

/// One planned path: forward values, the autodiff node, explain, the
/// dot-product test of the gradient, and the gradient against the table's
/// adjoint applied to w. Collective.
template <LayoutTag From, LayoutTag To>
[[gnu::noinline]] void route_case(const Shape& g, const Lens& lf, const Lens& lt, std::uint64_t seed, RouteStats& st) {
  using Route = detail::route<From, To>;
  static_assert(Route::exists);
  const std::string what = "redistribute<" + layout_name<To>() + ">(x) of x " + layout_name<From>() + " " + g.str() +
                           (is_sharded_v<From> ? " lengths " + str(lf) : std::string()) +
                           (is_sharded_v<To> ? " -> lengths " + str(lt) : std::string());
  INFO(what);
  auto x = param_tensor<From>(g, seed, lf, per_rank_kind(From::kind));
  const auto expr = redistribute<To>(x, mapping_of<To>(lt));

  // explain: the direct entry, or nothing (identity).
  const Plan plan = explain(expr);
  std::string ops;
  for (const auto& s : plan.steps) ops += (ops.empty() ? "" : " ") + s.op;
  const bool moves_nothing = Route::vanishes || (is_sharded_v<From> && dim_of<From>() == dim_of<To>() && lf == lt) ||
                             std::string_view(transition<From, To>::name) == "identity";
  CHECK_MESSAGE(ops == (moves_nothing ? std::string() : std::string(transition<From, To>::name)),
                "explain: " << plan.str());

  // Forward values, without communication.
  const Tensor<X, To> y = expr;
  check_values(
      view(y), [&](Index idx) { return expected_value(From::kind, dim_of<From>(), lf, To::kind, seed, g, idx); },
      "forward values");

  // One autodiff node, the direct entry's, whose input is x.
  if constexpr (Route::vanishes) {
    CHECK(y.node() == x.node());
  } else {
    static_assert(Route::direct);
    REQUIRE(test::all_ranks(y.node() != nullptr));
    CHECK(std::string(y.node()->op) == transition<From, To>::name);
    CHECK(y.node()->inputs.size() == 1);
    if (y.node()->inputs.size() == 1) CHECK(y.node()->inputs[0].get() == x.node().get());
  }

  // loss = sum(T(x) * w): w of layout To (Replicated for a Partial T(x)).
  using W = std::conditional_t<std::same_as<To, Partial>, Replicated, To>;
  const auto w = make<W>(g, seed + 1, lt, per_rank_kind(W::kind));
  const auto loss = eval(sum(y * w));
  backward(loss);
  const double J = objective(loss);
  REQUIRE(test::all_ranks(x.has_grad()));
  const Dot tw = dot(view(y), view(w), what + ": <T(x), w>");
  const Dot xg = dot(view(x), view(x.grad()), what + ": <x, grad>");
  CHECK_MESSAGE(close(J, tw.value, tw.scale), "J = " << J << " but sum_r <T(x)_r, w_r> = " << tw.value);
  CHECK_MESSAGE(
      close(xg.value, tw.value, std::max(tw.scale, xg.scale)),
      "the dot-product test: sum_r <T(x)_r, w_r> = " << tw.value << " but sum_r <x_r, grad_r> = " << xg.value);

  // The gradient is the table's adjoint applied to w (read as the gradient of T(x)).
  using adjoint = adjoint_t<From, To>;
  static_assert(adjoint::exists);
  const auto gw = w.template reinterpret_as<dual_t<To>>(dual_mapping<To>(mapping_of<To>(lt)));
  const Tensor<X, dual_t<From>> expected =
      apply_transition<dual_t<From>>(gw, dual_mapping<From>(mapping_of<From>(lf)), Strategy::automatic);
  check_same(view(x.grad()), view(expected),
             "the gradient against " + std::string(adjoint::name) + " " + layout_name<dual_t<To>>() + " -> " +
                 layout_name<dual_t<From>>() + " of w");
  ++st.runs;
  if (std::abs(J) > 1e-3) ++st.nonzero;
}

using RouteFn = void (*)(const Shape&, const Lens&, const Lens&, std::uint64_t, RouteStats&);

/// Runs one path over shapes and lengths: whole -> whole over shapes of rank
/// 0-3 (zero extents included); with a sharded side, 2-d and 3-d shapes and
/// every lengths case; S(d) -> S(d) with other lengths (a reshard) and with
/// the same (nothing moves). Collective.
void drive_route(RouteFn f, bool from_sharded, int from_dim, bool to_sharded, int to_dim, std::mt19937_64& rng,
                 RouteStats& st) {
  const int n = comm().size();
  if (!from_sharded && !to_sharded) {
    for (const Shape& g : {Shape{}, Shape{5}, Shape{2, 3}, Shape{2, 0, 3}, Shape{3, 1, 2}}) f(g, {}, {}, rng(), st);
    return;
  }
  std::uniform_int_distribution<std::int64_t> ext(1, 4);
  const auto cases = lens_cases(rng, n, true);
  for (std::size_t c = 0; c < cases.size(); ++c)
    for (int ndim = 2; ndim <= 3; ++ndim) {
      std::vector<std::int64_t> ex(static_cast<std::size_t>(ndim));
      for (auto& e : ex) e = ext(rng);
      const bool same_dim = from_sharded && to_sharded && from_dim == to_dim;
      const Lens lf = from_sharded ? cases[c] : Lens{};
      const Lens lt = !to_sharded    ? Lens{}
                      : same_dim     ? test::random_lengths(rng, n, sum_of(lf))
                      : from_sharded ? cases[(c + 1) % cases.size()]
                                     : cases[c];
      if (from_sharded) ex[static_cast<std::size_t>(from_dim)] = sum_of(lf);
      if (to_sharded) ex[static_cast<std::size_t>(to_dim)] = sum_of(lt);
      const Shape g{std::span<const std::int64_t>(ex)};
      f(g, lf, lt, rng(), st);
      if (same_dim) f(g, lf, lf, rng(), st);
    }
}

TEST_CASE("every planned redistribute path among I, R, P, S(0), S(1): values, one node, dot-product test, adjoint") {
  auto rng = test::shared_rng(606);
  RouteStats st;
  int pairs = 0;
  std::string missing;
  for_each_layout(Layouts{}, [&](auto from) {
    for_each_layout(Layouts{}, [&](auto to) {
      using From = typename decltype(from)::type;
      using To = typename decltype(to)::type;
      if constexpr (detail::route<From, To>::exists) {
        drive_route(&route_case<From, To>, is_sharded_v<From>, dim_of<From>(), is_sharded_v<To>, dim_of<To>(), rng, st);
        ++pairs;
      } else {
        missing += (missing.empty() ? "" : " ") + layout_name<From>() + "->" + layout_name<To>();
      }
    });
  });
  // The paths the contract excludes (docs/concepts/transitions.md), and no
  // other: R has none to I or P, I none to P.
  CHECK(missing == "I->P(sum) R->I R->P(sum)");
  CHECK(pairs == 22);
  CHECK(st.runs >= 22 * 5);
  CHECK(st.nonzero >= st.runs / 2);
}

// ---- 3. chains of transitions ----------------------------------------------------------------

/// The weight of a loss sum(y * w) for y of layout L: L itself, Replicated for Partial.
template <LayoutTag L>
auto weight(const Tensor<X, L>& y, std::uint64_t seed) {
  using W = std::conditional_t<std::same_as<L, Partial>, Replicated, L>;
  Lens ls;
  if constexpr (is_sharded_v<L>) ls.assign(y.lengths().begin(), y.lengths().end());
  return make<W>(y.shape(), seed, ls, per_rank_kind(W::kind));
}

/// `chain` (built from x) against `direct` (the single transition it should
/// simplify to, or x itself): the plan (`ops`, its steps' names), the values,
/// the autodiff graph (`op`: the op of y's node, `depth` nodes down to x; none
/// at all, y's node is x's, when op is null), and x's gradient of
/// sum(y * w), which must pass the dot-product test. Collective.
template <LayoutTag PL, class Chain, class Direct>
void chain_case(const std::string& what, const Tensor<X, PL>& x, const Chain& chain, const Direct& direct,
                const std::string& ops, const char* op, int depth, std::uint64_t seed) {
  INFO(what);
  const Plan pc = explain(chain), pd = explain(direct);
  std::string ran;
  for (const auto& s : pc.steps) ran += (ran.empty() ? "" : " ") + s.op;
  CHECK_MESSAGE(ran == ops, "explain(chain):\n" << pc.str());
  CHECK_MESSAGE(pc.collective_names() == pd.collective_names(), "explain(chain):\n"
                                                                    << pc.str() << "explain(direct):\n"
                                                                    << pd.str());

  const auto yc = eval(chain);
  const auto yd = eval(direct);
  static_assert(std::same_as<decltype(yc), decltype(yd)>);
  check_same(view(yc), view(yd), "chain and direct values");

  if (op == nullptr) {
    const autodiff::Node* yn = yc.node().get();
    CHECK_MESSAGE(yn == x.node().get(), "an identity chain added autodiff nodes");
  } else {
    const autodiff::Node* node = yc.node().get();
    REQUIRE(test::all_ranks(node != nullptr));
    CHECK(std::string(node->op) == op);
    for (int d = 0; d < depth && node; ++d) {
      CHECK(node->inputs.size() == 1);
      node = node->inputs.size() == 1 ? node->inputs[0].get() : nullptr;
    }
    CHECK_MESSAGE(node == x.node().get(), "x is not " << depth << " node(s) below the chain's result");
  }

  const auto w = weight(yc, seed);
  x.zero_grad();
  const auto lc = eval(sum(yc * w));
  backward(lc);
  REQUIRE(test::all_ranks(x.has_grad()));
  const auto gc = x.grad().clone();
  x.zero_grad();
  backward(sum(yd * w));
  REQUIRE(test::all_ranks(x.has_grad()));
  check_same(view(gc), view(x.grad()), "the chain's gradient against the direct transition's");
  const double J = objective(lc);
  const Dot xg = dot(view(x), view(gc), what + ": <x, grad>");
  CHECK_MESSAGE(close(J, xg.value, xg.scale),
                "the dot-product test of the chain: J = " << J << " but sum_r <x_r, grad_r> = " << xg.value);
  CHECK_MESSAGE(xg.scale > 0, "a vacuous case: x or its gradient is zero");
}

TEST_CASE("chains of transitions: the values, gradients and one node of the transition they simplify to") {
  const int n = comm().size();
  auto rng = test::shared_rng(707);
  const auto cases = lens_cases(rng, n, false);  // nonempty: each case must move something
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const Lens& la = cases[c];
    const Lens lb = cases[(c + 1) % cases.size()];
    const Lens la2 = test::random_lengths(rng, n, sum_of(la));  // the same total, other lengths
    INFO("lengths ", str(la), ", ", str(lb), ", ", str(la2));
    const std::int64_t m = sum_of(la), nn = sum_of(lb);
    const Shape g{m, nn};
    const std::uint64_t seed = rng();
    auto p = param_tensor<Partial>(g, seed + 1, {}, true);
    auto r = param_tensor<Replicated>(g, seed + 2, {}, true);  // the copies differ: a linear map of every rank's input
    auto i = param_tensor<Invariant>(g, seed + 3);
    auto s = param_tensor<S0>(g, seed + 4, la);

    chain_case("all_gather(reduce_scatter(p)) is all_reduce(p)", p, all_gather(reduce_scatter<S0>(p, la)),
               all_reduce(p), "all_reduce", "all_reduce", 1, seed + 10);
    chain_case("slice(all_reduce(p)) is reduce_scatter(p)", p, slice<S0>(all_reduce(p), la), reduce_scatter<S0>(p, la),
               "reduce_scatter", "reduce_scatter", 1, seed + 11);
    chain_case("replicate(all_reduce<I>(p)) is all_reduce(p)", p, replicate(all_reduce<Invariant>(p)), all_reduce(p),
               "all_reduce", "all_reduce", 1, seed + 12);
    chain_case("redistribute<S1>(all_gather(reduce_scatter<S0>(p))) is reduce_scatter<S1>(p)", p,
               redistribute<S1>(all_gather(reduce_scatter<S0>(p, la)), lb), reduce_scatter<S1>(p, lb), "reduce_scatter",
               "reduce_scatter", 1, seed + 13);
    chain_case("all_gather<I>(slice(i)) is i", i, all_gather<Invariant>(slice<S1>(i, lb)), i, "", nullptr, 0,
               seed + 14);
    chain_case("slice(replicate(i)) is slice(i)", i, slice<S0>(replicate(i), la), slice<S0>(i, la), "slice", "slice", 1,
               seed + 15);
    chain_case("slice(all_gather(s)), the same lengths, moves nothing", s, slice<S0>(all_gather(s), la), s, "",
               "reshard", 1, seed + 16);
    chain_case("slice(all_gather(s)), other lengths, is one reshard", s, slice<S0>(all_gather(s), la2),
               redistribute<S0>(s, la2), la2 == la ? "" : "reshard", "reshard", 1, seed + 17);
    chain_case("slice<S1>(all_gather(s)) is all_to_all<S1>(s)", s, slice<S1>(all_gather(s), lb), all_to_all<S1>(s, lb),
               "all_to_all", "all_to_all", 1, seed + 18);
    chain_case("all_reduce(zero_pad(s)) is all_gather(s)", s, all_reduce(zero_pad(s)), all_gather(s), "all_gather",
               "all_gather", 1, seed + 19);
    chain_case("reduce_scatter<S1>(zero_pad(s)) is all_to_all<S1>(s)", s, reduce_scatter<S1>(zero_pad(s), lb),
               all_to_all<S1>(s, lb), "all_to_all", "all_to_all", 1, seed + 20);

    // The chains with no route from their source (R -> S -> P, R -> S -> I,
    // I -> S -> P) run the simplified chain below their last step, then that step.
    {
      const Tensor<X, S0> sl = slice<S0>(r, la);
      chain_case("zero_pad(slice(r)) runs slice then zero_pad", r, zero_pad(slice<S0>(r, la)), zero_pad(sl),
                 "slice zero_pad", "zero_pad", 2, seed + 21);
      chain_case("all_gather<I>(slice(r)) runs slice then all_gather", r, all_gather<Invariant>(slice<S0>(r, la)),
                 all_gather<Invariant>(sl), "slice all_gather", "all_gather", 2, seed + 22);
    }
    {
      const Tensor<X, S1> sl = slice<S1>(all_gather(slice<S1>(i, lb)), lb);
      chain_case("zero_pad(slice(all_gather(slice(i)))) runs one slice then zero_pad", i,
                 zero_pad(slice<S1>(all_gather(slice<S1>(i, lb)), lb)), zero_pad(sl), "slice zero_pad", "zero_pad", 2,
                 seed + 23);
    }
  }
  {
    // The identity chain on a Replicated tensor: y is r itself.
    auto r = param_tensor<Replicated>({3, 2}, 99, {}, true);
    chain_case("all_gather(slice(r)) is r", r, all_gather(slice<S0>(r, test::random_lengths(rng, n, 3))), r, "",
               nullptr, 0, 98);
  }
}

// ---- 4. accumulation -----------------------------------------------------------------------------

/// Copies of every MLP gradient (local parts).
struct MlpGrads {
  Tensor<X, Invariant> x, c;
  Tensor<X, S1> A;
  Tensor<X, S0> a, B;
};
MlpGrads grads_of(const Mlp& m) {
  return {m.x.grad().clone(), m.c.grad().clone(), m.A.grad().clone(), m.a.grad().clone(), m.B.grad().clone()};
}
void zero_grads(const Mlp& m) {
  m.x.zero_grad();
  m.A.zero_grad();
  m.a.zero_grad();
  m.B.zero_grad();
  m.c.zero_grad();
}
bool all_have_grads(const Mlp& m) {
  return test::all_ranks(m.x.has_grad() && m.A.has_grad() && m.a.has_grad() && m.B.has_grad() && m.c.has_grad());
}
/// got == alpha * g1 + beta * g2 (g2 optional), element by element.
template <LayoutTag L>
void check_combo(const Tensor<X, L>& got, const Tensor<X, L>& g1, double alpha, const Tensor<X, L>* g2, double beta,
                 const std::string& what) {
  auto want = g1.clone();
  for (std::int64_t i = 0; i < want.size(); ++i)
    want.data()[i] = alpha * g1.data()[i] + (g2 ? beta * g2->data()[i] : 0.0);
  check_same(view(got), view(want), what);
}
void check_grads(const Mlp& m, const MlpGrads& g1, double alpha, const MlpGrads* g2, double beta,
                 const std::string& what) {
  check_combo(m.x.grad(), g1.x, alpha, g2 ? &g2->x : nullptr, beta, what + ": x");
  check_combo(m.A.grad(), g1.A, alpha, g2 ? &g2->A : nullptr, beta, what + ": A");
  check_combo(m.a.grad(), g1.a, alpha, g2 ? &g2->a : nullptr, beta, what + ": a");
  check_combo(m.B.grad(), g1.B, alpha, g2 ? &g2->B : nullptr, beta, what + ": B");
  check_combo(m.c.grad(), g1.c, alpha, g2 ? &g2->c : nullptr, beta, what + ": c");
}

TEST_CASE("gradients accumulate across backward passes through a DSL expression; zero_grad resets them") {
  const int n = comm().size();
  auto rng = test::shared_rng(808);
  for (const Lens& lf : lens_cases(rng, n, false)) {
    INFO("lengths ", str(lf));
    Mlp m = make_mlp(lf, rng());
    CHECK_FALSE(m.A.has_grad());

    backward(mlp_loss_r(m));  // step 1
    REQUIRE(all_have_grads(m));
    const MlpGrads g1 = grads_of(m);
    double norm = 0;
    for (std::int64_t i = 0; i < g1.x.size(); ++i) norm += std::abs(g1.x.data()[i]);
    CHECK_MESSAGE(norm > 1e-6, "a vacuous case: the gradient of x is zero");

    backward(mlp_loss_r(m));  // step 2, a new graph: the gradients add
    check_grads(m, g1, 2.0, nullptr, 0.0, "two backward passes of the same loss");

    const auto loss = eval(mlp_loss_r(m));  // one graph, run twice
    backward(loss);
    backward(loss);
    check_grads(m, g1, 4.0, nullptr, 0.0, "two more passes over one graph");

    zero_grads(m);
    CHECK_FALSE(m.x.has_grad());
    CHECK_FALSE(m.A.has_grad());
    CHECK_THROWS_AS((void)m.B.grad(), shardex::error);
    backward(mlp_loss_r(m));
    REQUIRE(all_have_grads(m));
    check_grads(m, g1, 1.0, nullptr, 0.0, "after zero_grad");

    // Another loss adds its own gradient.
    zero_grads(m);
    backward(mlp_loss_i(m));
    REQUIRE(all_have_grads(m));
    const MlpGrads g2 = grads_of(m);
    backward(mlp_loss_r(m));
    check_grads(m, g2, 1.0, &g1, 1.0, "the Invariant loss, then the Replicated one");
  }
}

}  // namespace

}  // namespace shardex_test_dsl_grad
