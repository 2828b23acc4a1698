// SPDX-License-Identifier: MIT
// grad_norm and clip_grad_norm (autodiff/grad_norm.hpp) at every world size:
// - a Megatron MLP's gradients (A column-, B row-parallel, the bias b
//   Invariant) with random lengths, zeros among them: the norm is the
//   unsharded model's (the same model on one rank) and the norm of the
//   gathered gradients, so the Invariant bias is counted once, not once
//   per rank;
// - clipping scales every gradient by max_norm / (norm + 1e-6) when that is
//   below one and leaves them alone otherwise; a parameter without a
//   gradient adds nothing;
// - mesh parameters on every dp x tp shape: the norm of the logical
//   gradients (to_global), each Invariant axis counted once;
// - GradSquares: the squares taken by backward as it completes each
//   gradient give grad_norm's norm (lengths with zeros among them), again
//   without a pass (norm() itself sums), after a zero_grad, and over two
//   passes accumulated; on_grad_complete runs once a pass, after the last
//   adjoint that adds to the gradient (a weight used twice);
// - bad input throws on every rank: a non-finite norm on one rank's piece,
//   max_norm <= 0, parameters on different communicators, ranks passing
//   different lists.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <numeric>
#include <string>
#include <vector>

#include <shardex.hpp>
#include <shardex/mesh.hpp>

#include "support/dist.hpp"
#include "support/smooth_tensor.hpp"

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_grad_norm {

using namespace shardex;

namespace {

using Lens = std::vector<std::int64_t>;
const mpi::Communicator& world() { return test::world(); }

struct Mlp {
  Tensor<double, Sharded<1>> A;  // (H, F)
  Tensor<double, Sharded<0>> a;  // (F)
  Tensor<double, Sharded<0>> B;  // (F, H)
  Tensor<double, Invariant> b;   // (H)

  Mlp(const mpi::Communicator& comm, std::int64_t H, std::int64_t F, const Lens& ls)
      : A(make<Sharded<1>>(comm, {H, F}, 1, ls)),
        a(make<Sharded<0>>(comm, {F}, 2, ls)),
        B(make<Sharded<0>>(comm, {F, H}, 3, ls)),
        b(make<Invariant>(comm, {H}, 4, {})) {
    A.requires_grad(), a.requires_grad(), B.requires_grad(), b.requires_grad();
  }
  template <class L>
  static Tensor<double, L> make(const mpi::Communicator& comm, const Shape& g, int salt, const Lens& ls) {
    return test::smooth_tensor<L>(comm, g, salt, ls);
  }
  /// Forward and backward of sum(Y * Y) / 2 for a fixed input.
  void backward_once(std::int64_t T) {
    const auto x = make<Invariant>(A.comm(), {T, A.shape()[0]}, 5, {});
    const auto h = gelu(add_bias(matmul(replicate(x), A), a));
    Tensor<double, Invariant> y = add_bias(all_reduce<Invariant>(matmul(h, B)), b);
    Tensor<double, Invariant> loss = sum(y * y) / 2.0;
    backward(loss);
  }
};

/// The sum of squares of a whole (host, Invariant) tensor.
double squares(const Tensor<double, Invariant>& t) {
  double s = 0;
  for (double v : t.local()) s += v * v;
  return s;
}

/// Whether every local element of `g` is `factor` times that of `before`.
template <class L>
bool scaled(const Tensor<double, L>& g, const Tensor<double, L>& before, double factor) {
  for (std::int64_t i = 0; i < g.size(); ++i)
    if (std::abs(g.data()[i] - factor * before.data()[i]) > 1e-15 * (1 + std::abs(before.data()[i]))) return false;
  return true;
}

}  // namespace

TEST_CASE("the host's sum of squares (four quarters at once, then the tail) is the sum of every element's square") {
  for (const std::int64_t n : {0, 1, 3, 4, 5, 7, 8, 11, 1001}) {
    CAPTURE(n);
    std::vector<float> x(static_cast<std::size_t>(n));
    double want = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      x[static_cast<std::size_t>(i)] = static_cast<float>(i % 13) - 6.5f + 0.125f * static_cast<float>(i % 3);
      want += double(x[static_cast<std::size_t>(i)]) * double(x[static_cast<std::size_t>(i)]);
    }
    // Every element counted once: the last ones (past 4 * (n / 4)) changed alone change the sum.
    CHECK(detail::sum_of_squares<Host>(x.data(), n) == doctest::Approx(want).epsilon(1e-15));
    if (n > 0) {
      x.back() += 1.0f;
      const double moved =
          want - double(x.back() - 1.0f) * double(x.back() - 1.0f) + double(x.back()) * double(x.back());
      CHECK(detail::sum_of_squares<Host>(x.data(), n) == doctest::Approx(moved).epsilon(1e-15));
    }
  }
}

TEST_CASE("grad_norm of a Megatron MLP: the unsharded model's norm, the Invariant bias counted once") {
  const int n = world().size();
  auto rng = test::shared_rng(41);
  for (int round = 0; round < 3; ++round) {
    const std::int64_t H = 5, F = round == 0 ? n * 2 : 7;
    const Lens ls = test::random_lengths(rng, n, F);
    CAPTURE(round);
    Mlp m(world(), H, F, ls);
    m.backward_once(4);
    const double norm = grad_norm(m.A, m.a, m.B, m.b);
    // The oracle: the gathered gradients, squared and summed here.
    const double gathered = std::sqrt(squares(eager::all_gather<Invariant>(m.A.grad())) +
                                      squares(eager::all_gather<Invariant>(m.a.grad())) +
                                      squares(eager::all_gather<Invariant>(m.B.grad())) + squares(m.b.grad()));
    CHECK(test::all_ranks(std::abs(norm - gathered) <= 1e-12 * gathered));
    CHECK(test::all_ranks(std::abs(grad_norm(m.b) - std::sqrt(squares(m.b.grad()))) <= 1e-14));
    // The same model on one rank (every tensor whole).
    const auto self = world().split(world().rank(), 0);
    Mlp one(self, H, F, Lens{F});
    one.backward_once(4);
    const double unsharded = grad_norm(one.A, one.a, one.B, one.b);
    CHECK(test::all_ranks(std::abs(norm - unsharded) <= 1e-12 * unsharded));
    CHECK(test::all_ranks(norm > 0));
  }
}

TEST_CASE("clip_grad_norm scales every gradient when the norm is above max_norm, and only then") {
  const int n = world().size();
  auto rng = test::shared_rng(43);
  Mlp m(world(), 4, 6, test::random_lengths(rng, n, 6));
  m.backward_once(3);
  const auto A0 = m.A.grad().clone();
  const auto b0 = m.b.grad().clone();
  const double norm = grad_norm(m.A, m.a, m.B, m.b);
  // Above: unchanged.
  CHECK(test::all_ranks(clip_grad_norm(2 * norm, m.A, m.a, m.B, m.b) == norm));
  CHECK(test::all_ranks(scaled(m.A.grad(), A0, 1.0) && scaled(m.b.grad(), b0, 1.0)));
  // Below: scaled by max / (norm + 1e-6), so the new norm is about max.
  const double max = norm / 4;
  CHECK(test::all_ranks(clip_grad_norm(max, m.A, m.a, m.B, m.b) == norm));
  const double factor = max / (norm + 1e-6);
  CHECK(test::all_ranks(scaled(m.A.grad(), A0, factor) && scaled(m.b.grad(), b0, factor)));
  CHECK(test::all_ranks(std::abs(grad_norm(m.A, m.a, m.B, m.b) - norm * factor) <= 1e-12 * norm));
  // A parameter without a gradient adds nothing.
  const double without_a = std::sqrt(std::pow(grad_norm(m.A), 2) + std::pow(grad_norm(m.B, m.b), 2));
  m.a.zero_grad();
  CHECK(test::all_ranks(std::abs(grad_norm(m.A, m.a, m.B, m.b) - without_a) <= 1e-12 * without_a));
}

TEST_CASE("GradSquares: the squares backward takes as it completes each gradient give grad_norm's norm") {
  const int n = world().size();
  auto rng = test::shared_rng(59);
  for (const auto& ls : test::lengths_cases(rng, n, {.max_total = 9})) {
    CAPTURE(ls);
    const std::int64_t F = std::accumulate(ls.begin(), ls.end(), std::int64_t{0});
    Mlp m(world(), 4, F, ls);
    GradSquares squares;
    squares.watch(m.A), squares.watch(m.a), squares.watch(m.B), squares.watch(m.b);
    m.backward_once(3);
    const double want = grad_norm(m.A, m.a, m.B, m.b);
    CHECK(test::all_ranks(want > 0));
    // Scaled after the pass: the squares the pass took are those of the
    // gradients it made (so norm() did not sum them itself)...
    clip_grad_norm(want / 4, m.A, m.a, m.B, m.b);
    CHECK(test::all_ranks(std::abs(squares.norm(world()) - want) <= 1e-14 * want));
    // ...and with no pass since that norm(), norm() sums the gradients itself.
    const double scaled = grad_norm(m.A, m.a, m.B, m.b);
    CHECK(test::all_ranks(scaled < want / 2));
    CHECK(test::all_ranks(std::abs(squares.norm(world()) - scaled) <= 1e-14 * want));
    // A gradient dropped after the pass took its squares adds nothing.
    m.backward_once(3);
    const double with_a = grad_norm(m.A, m.a, m.B, m.b);
    m.a.zero_grad();
    const double without_pass_a = grad_norm(m.A, m.a, m.B, m.b);
    CHECK(test::all_ranks(without_pass_a <= with_a));
    CHECK(test::all_ranks(std::abs(squares.norm(world()) - without_pass_a) <= 1e-14 * want));
    // Two passes without a zero_grad: the squares of the accumulated gradients.
    m.A.zero_grad(), m.B.zero_grad(), m.b.zero_grad();
    m.backward_once(3);
    m.backward_once(3);
    const double twice = grad_norm(m.A, m.a, m.B, m.b);
    CHECK(test::all_ranks(std::abs(twice - 2 * want) <= 1e-12 * want));
    CHECK(test::all_ranks(std::abs(squares.norm(world()) - twice) <= 1e-14 * twice));
  }
}

TEST_CASE("on_grad_complete runs once a pass, after the last adjoint adding to the gradient; parameters only") {
  auto x = test::smooth_tensor<Invariant>(world(), {2, 3}, 1, {});
  auto W = test::smooth_tensor<Invariant>(world(), {3, 3}, 2, {});
  W.requires_grad();
  int calls = 0;
  std::vector<double> seen;
  W.on_grad_complete([&](const Tensor<double, Invariant>& g) {
    ++calls;
    seen.assign(g.data(), g.data() + g.size());
  });
  Tensor<double, Invariant> y = matmul(matmul(x, W), W);  // W's gradient: two products' terms
  Tensor<double, Invariant> loss = sum(y * y);
  backward(loss);
  CHECK(calls == 1);
  CHECK(seen == std::vector<double>(W.grad().data(), W.grad().data() + W.grad().size()));
  W.zero_grad();
  backward(loss);
  CHECK(calls == 2);
  W.on_grad_complete(nullptr);  // removed
  backward(loss);
  CHECK(calls == 2);
  CHECK_THROWS_WITH_AS(y.on_grad_complete([](const Tensor<double, Invariant>&) {}),
                       doctest::Contains("is not a parameter"), error);
  // A GradSquares takes the one hook; a second watcher of it is refused.
  GradSquares first, second;
  first.watch(W);
  CHECK_THROWS_WITH_AS(second.watch(W), doctest::Contains("already has an on_grad_complete hook"), error);
  CHECK_THROWS_WITH_AS(second.watch(y), doctest::Contains("is not a parameter"), error);
}

TEST_CASE("bad input throws on every rank: a non-finite norm, max_norm <= 0, other communicators, other lists") {
  const int n = world().size();
  auto rng = test::shared_rng(47);
  Mlp m(world(), 4, 6, test::random_lengths(rng, n, 6));
  m.backward_once(2);
  CHECK_THROWS_WITH_AS(clip_grad_norm(0.0, m.A, m.b), doctest::Contains("max_norm must be positive"), invalid_argument);
  if (n > 1) {
    const auto self = world().split(world().rank(), 0);
    Mlp one(self, 4, 6, Lens{6});
    CHECK_THROWS_WITH_AS(grad_norm(m.A, one.b), doctest::Contains("different communicators"), invalid_argument);
    if (world().rank() == 0)
      CHECK_THROWS_WITH_AS(grad_norm(m.A, m.b), doctest::Contains("not making the same call"), invalid_argument);
    else
      CHECK_THROWS_WITH_AS(grad_norm(m.A), doctest::Contains("not making the same call"), invalid_argument);
  }
  // An inf in the last rank's piece of B (a piece of length zero holds none: take the last rank that has one).
  int last = -1;
  for (int r = 0; r < n; ++r)
    if (m.B.mapping().lengths()[static_cast<std::size_t>(r)] > 0) last = r;
  REQUIRE(last >= 0);
  if (world().rank() == last) m.B.grad().data()[0] = std::numeric_limits<double>::infinity();
  const auto A0 = m.A.grad().clone();
  CHECK_THROWS_WITH_AS(clip_grad_norm(1e-3, m.A, m.B), doctest::Contains("the gradients' norm is inf"), error);
  CHECK(test::all_ranks(scaled(m.A.grad(), A0, 1.0)));  // left as they were
}

TEST_CASE(
    "mesh parameters on every dp x tp shape: the norm of the logical gradients, each Invariant axis counted once") {
  using dp = axis<"dp">;
  using tp = axis<"tp">;
  using M = Mesh<dp, tp>;
  const int n = world().size();
  auto rng = test::shared_rng(53);
  for (int d = 1; d <= n; ++d) {
    if (n % d != 0) continue;
    const M mesh(world(), {d, n / d});
    CAPTURE(mesh.str());
    const Shape gw{3, 7}, gb{7};
    std::vector<double> w_value, dw_value, b_value, db_value;
    for (std::int64_t i = 0; i < gw.numel(); ++i)
      w_value.push_back(0.1 * double(i)), dw_value.push_back(std::cos(double(i)));
    for (std::int64_t i = 0; i < gb.numel(); ++i) b_value.push_back(1.0), db_value.push_back(0.5 + double(i));
    using LW = per_axis<Invariant, Sharded<1>>;
    using LB = per_axis<Invariant, Invariant>;
    const typename LW::mappings mw{{}, layout_mapping<Sharded<1>>(test::random_lengths(rng, n / d, 7))};
    auto W = MeshTensor<double, M, LW>::from_global(mesh, gw, w_value, mw);
    auto b = MeshTensor<double, M, LB>::from_global(mesh, gb, b_value);
    W.requires_grad(), b.requires_grad();
    const auto yw = mesh_eval(W * 2.0);
    backward(yw, MeshTensor<double, M, LW>::from_global(mesh, gw, dw_value, mw));
    const auto yb = mesh_eval(b * 3.0);
    backward(yb, MeshTensor<double, M, LB>::from_global(mesh, gb, db_value));
    SHARDEX_REQUIRE_ALL(W.has_grad() && b.has_grad());
    double expected = 0;
    for (double v : to_global(W.grad())) expected += v * v;
    for (double v : to_global(b.grad())) expected += v * v;
    expected = std::sqrt(expected);
    CHECK(test::all_ranks(std::abs(grad_norm(W, b) - expected) <= 1e-12 * expected));
    // And the oracle's own check: the gradients are 2 dW and 3 db.
    double by_hand = 0;
    for (double v : dw_value) by_hand += 4 * v * v;
    for (double v : db_value) by_hand += 9 * v * v;
    CHECK(std::abs(expected - std::sqrt(by_hand)) <= 1e-12 * expected);
    CHECK(test::all_ranks(std::abs(clip_grad_norm(expected / 2, W, b) - expected) <= 1e-12 * expected));
    CHECK(test::all_ranks(std::abs(grad_norm(W, b) - expected / 2) <= 1e-6 * expected));
  }
}

}  // namespace shardex_test_grad_norm
