// SPDX-License-Identifier: MIT
// Adam with decoupled weight decay (autodiff/adam.hpp) and the warm-up +
// cosine schedule (autodiff/lr_schedule.hpp), at every world size:
// - a Megatron MLP's parameters (A column-, B row-parallel, a sharded bias,
//   the Invariant bias b) with random lengths, zeros among them, trained a few
//   steps with AdamW under the schedule, the biases left out of the decay:
//   the parameters equal the same model's on one rank, and a scalar
//   re-computation of torch.optim.AdamW's update on the gathered gradients;
// - the schedule's values at its corners (first warm-up step, the peak, the
//   middle of the decay, the floor) and its bad input;
// - a gradient nobody else holds is left zero by the step and kept: the next
//   backward's products add into it (the same storage), and the parameters
//   equal those of a run whose step dropped every gradient (a copy held);
// - bad hyper-parameters refused with their names.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include <shardex.hpp>
#include <shardex/autodiff/adam.hpp>
#include <shardex/autodiff/lr_schedule.hpp>

#include "support/dist.hpp"
#include "support/smooth_tensor.hpp"

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_optimizer {

using namespace shardex;

namespace {

using Lens = std::vector<std::int64_t>;
const mpi::Communicator& world() { return test::world(); }

template <class L>
Tensor<double, L> make(const mpi::Communicator& comm, const Shape& g, int salt, const Lens& ls) {
  return test::smooth_tensor<L>(comm, g, salt, ls);
}

/// The global values of a tensor, on every rank.
template <class L>
std::vector<double> global(const Tensor<double, L>& t) {
  Tensor<double, Invariant> whole = redistribute<Invariant>(t);
  return {whole.local().begin(), whole.local().end()};
}

struct Mlp {
  static constexpr std::int64_t H = 3, T = 4;
  Tensor<double, Sharded<1>> A;  // (H, F)
  Tensor<double, Sharded<0>> a;  // (F)
  Tensor<double, Sharded<0>> B;  // (F, H)
  Tensor<double, Invariant> b;   // (H)

  /// F = the sum of the lengths ls.
  Mlp(const mpi::Communicator& comm, const Lens& ls, std::int64_t F)
      : A(make<Sharded<1>>(comm, {H, F}, 1, ls)),
        a(make<Sharded<0>>(comm, {F}, 2, ls)),
        B(make<Sharded<0>>(comm, {F, H}, 3, ls)),
        b(make<Invariant>(comm, {H}, 4, {})) {
    A.requires_grad(), a.requires_grad(), B.requires_grad(), b.requires_grad();
  }
  /// Forward and backward of sum(Y * Y) / 2 for a fixed input of this step.
  void backward_once(int step) {
    const auto x = make<Invariant>(A.comm(), {T, H}, 5 + step, {});
    const auto h = gelu(add_bias(matmul(replicate(x), A), a));
    Tensor<double, Invariant> y = add_bias(all_reduce<Invariant>(matmul(h, B)), b);
    Tensor<double, Invariant> loss = sum(y * y) / 2.0;
    backward(loss);
  }
};

/// torch.optim.AdamW's single-tensor update of one parameter, as written
/// there: decay, the moments, then p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps).
struct TorchAdamW {
  std::vector<double> m, v;
  void step(std::vector<double>& p, const std::vector<double>& g, const AdamOptions& o, double lr, bool decay,
            std::int64_t t) {
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0);
    const double bc1 = 1 - std::pow(o.beta1, static_cast<double>(t)),
                 bc2 = 1 - std::pow(o.beta2, static_cast<double>(t));
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (decay) p[i] *= 1 - lr * o.weight_decay;
      m[i] = m[i] * o.beta1 + g[i] * (1 - o.beta1);
      v[i] = v[i] * o.beta2 + g[i] * g[i] * (1 - o.beta2);
      p[i] -= (lr / bc1) * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + o.eps);
    }
  }
};

double max_rel_diff(const std::vector<double>& x, const std::vector<double>& y) {
  REQUIRE(x.size() == y.size());
  double d = 0;
  for (std::size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]) / std::max(1.0, std::abs(y[i])));
  return d;
}

}  // namespace

TEST_CASE("AdamW under the warm-up + cosine schedule: the sharded model equals one rank's and torch's update") {
  const int n = world().size();
  auto rng = test::shared_rng(41);
  const AdamOptions o{.lr = 0, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.3};
  const WarmupCosine schedule{.peak = 0.05, .floor = 0.005, .warmup = 2, .total = 5};
  for (const auto& ls : test::lengths_cases(rng, n, {.max_total = 9})) {
    CAPTURE(ls);
    std::int64_t F = 0;
    for (auto l : ls) F += l;
    Mlp sharded(world(), ls, F);
    const auto one = world().split(world().rank(), 0);  // every rank: the same model on one rank
    Mlp alone(one, Lens{F}, F);
    Adam adam(o, sharded.A, no_weight_decay(sharded.a), sharded.B, no_weight_decay(sharded.b));
    Adam adam1(o, alone.A, no_weight_decay(alone.a), alone.B, no_weight_decay(alone.b));
    CHECK(adam.decays(0));
    CHECK_FALSE(adam.decays(1));
    // The reference: torch's formula on the gathered values, one vector per parameter.
    std::vector<std::vector<double>> p = {global(sharded.A), global(sharded.a), global(sharded.B), global(sharded.b)};
    std::vector<TorchAdamW> ref(4);
    const bool decays[4] = {true, false, true, false};
    for (int step = 0; step < 6; ++step) {
      CAPTURE(step);
      sharded.backward_once(step);
      alone.backward_once(step);
      const std::vector<std::vector<double>> g = {global(sharded.A.grad()), global(sharded.a.grad()),
                                                  global(sharded.B.grad()), global(sharded.b.grad())};
      const double lr = schedule(adam.steps());
      adam.set_lr(lr);
      adam1.set_lr(lr);
      adam.step(sharded.A, sharded.a, sharded.B, sharded.b);
      adam1.step(alone.A, alone.a, alone.B, alone.b);
      for (int k = 0; k < 4; ++k) ref[k].step(p[k], g[k], o, lr, decays[k], adam.steps());
      CHECK(max_rel_diff(global(sharded.A), global(alone.A)) <= 1e-12);
      CHECK(max_rel_diff(global(sharded.a), global(alone.a)) <= 1e-12);
      CHECK(max_rel_diff(global(sharded.B), global(alone.B)) <= 1e-12);
      CHECK(max_rel_diff(global(sharded.b), global(alone.b)) <= 1e-12);
      CHECK(max_rel_diff(global(sharded.A), p[0]) <= 1e-12);
      CHECK(max_rel_diff(global(sharded.a), p[1]) <= 1e-12);
      CHECK(max_rel_diff(global(sharded.B), p[2]) <= 1e-12);
      CHECK(max_rel_diff(global(sharded.b), p[3]) <= 1e-12);
      CHECK_FALSE(sharded.A.has_grad());  // step zeroes the gradients
    }
    // The moments are laid out like the parameters, lengths included.
    CHECK(std::get<0>(adam.first_moments()).mapping() == sharded.A.mapping());
    CHECK(std::get<2>(adam.second_moments()).mapping() == sharded.B.mapping());
  }
}

TEST_CASE(
    "Adam keeps a gradient nobody else holds, zeroed, for the next backward; one held elsewhere is left as it is") {
  const int n = world().size();
  auto rng = test::shared_rng(43);
  for (const auto& ls : test::lengths_cases(rng, n, {.max_total = 9})) {
    CAPTURE(ls);
    const std::int64_t F = std::accumulate(ls.begin(), ls.end(), std::int64_t{0});
    Mlp kept(world(), ls, F), dropped(world(), ls, F);
    const AdamOptions o{.lr = 0.02, .weight_decay = 0.1};
    Adam adam_kept(o, kept.A, kept.a, kept.B, kept.b), adam_dropped(o, dropped.A, dropped.a, dropped.B, dropped.b);
    for (int step = 0; step < 3; ++step) {
      CAPTURE(step);
      kept.backward_once(step);
      dropped.backward_once(step);
      CHECK(kept.A.grad_storage_alone());
      const double* storage = kept.B.grad().data();
      // A copy of each of dropped's gradients, held across its step.
      const auto held = std::make_tuple(dropped.A.grad(), dropped.a.grad(), dropped.B.grad(), dropped.b.grad());
      const auto held_values = global(std::get<2>(held));
      CHECK_FALSE(dropped.B.grad_storage_alone());
      adam_kept.step(kept.A, kept.a, kept.B, kept.b);
      adam_dropped.step(dropped.A, dropped.a, dropped.B, dropped.b);
      CHECK(global(std::get<2>(held)) == held_values);  // not zeroed under its holder
      CHECK_FALSE(kept.B.has_grad());
      REQUIRE(kept.B.node()->zeroed.has_value());  // kept, and left zero by the step
      CHECK(std::all_of(storage, storage + kept.B.node()->zeroed->size(), [](double v) { return v == 0.0; }));
      CHECK_FALSE(dropped.B.node()->zeroed.has_value());
      CHECK(global(kept.A) == global(dropped.A));  // bit for bit
      CHECK(global(kept.a) == global(dropped.a));
      CHECK(global(kept.B) == global(dropped.B));
      CHECK(global(kept.b) == global(dropped.b));
      kept.backward_once(step + 1);
      if (kept.B.grad().size() > 0) CHECK(kept.B.grad().data() == storage);  // the storage kept, added into
      dropped.backward_once(step + 1);
      kept.backward_once(step + 2);  // a second pass accumulates onto it
      dropped.backward_once(step + 2);
      CHECK(global(kept.A.grad()) == global(dropped.A.grad()));
      CHECK(global(kept.B.grad()) == global(dropped.B.grad()));
      kept.A.zero_grad(), kept.a.zero_grad(), kept.B.zero_grad(), kept.b.zero_grad();
      dropped.A.zero_grad(), dropped.a.zero_grad(), dropped.B.zero_grad(), dropped.b.zero_grad();
    }
  }
  auto w = make<Invariant>(world(), {2}, 3, {});
  CHECK_THROWS_WITH_AS(w.zero_grad_keeping_storage(), doctest::Contains("has no gradient to keep"), error);
}

TEST_CASE("weight decay alone: one step with a zero gradient shrinks decayed parameters by 1 - lr * weight_decay") {
  auto w = make<Invariant>(world(), {5}, 9, {});
  auto keep = make<Invariant>(world(), {5}, 10, {});
  const auto w0 = global(w), keep0 = global(keep);
  w.requires_grad(), keep.requires_grad();
  Tensor<double, Invariant> loss = sum(w * 0.0) + sum(keep * 0.0);
  backward(loss);
  Adam adam(AdamOptions{.lr = 0.1, .weight_decay = 0.5}, w, no_weight_decay(keep));
  adam.step(w, keep);
  const auto w1 = global(w), keep1 = global(keep);
  for (std::size_t i = 0; i < w0.size(); ++i) {
    CHECK(w1[i] == doctest::Approx(w0[i] * 0.95).epsilon(1e-14));
    CHECK(keep1[i] == keep0[i]);
  }
}

TEST_CASE_TEMPLATE(
    "Host::adam_update (vectorized, in blocks of four lines): grad_scale s on gradient g is the step on s g, each "
    "element adam_update_at's",
    T, float, double) {
  // One element; not a multiple of a vector's lanes; one block of four lines
  // (of floats); many blocks, a part block and the prefetches' last lines.
  for (const std::int64_t n : {1, 37, 64, 1031}) {
    CAPTURE(n);
    std::vector<T> p(n), m(n), v(n), g(n), sg(n);
    for (std::int64_t i = 0; i < n; ++i) {
      p[i] = T(std::sin(double(i))), m[i] = T(0.01 * std::cos(double(i))), v[i] = T(0.001 * (1 + i % 3));
      g[i] = T(std::cos(0.7 * double(i))), sg[i] = T(0.5) * g[i];  // 0.5: exact in binary
    }
    const auto p0 = p;
    auto p2 = p, m2 = m, v2 = v, p3 = p, m3 = m, v3 = v;
    const optim::AdamStep plain{1e-3, 0.9, 0.95, 1e-8, 0.1, 0.05, 1 - 1e-4};
    optim::AdamStep scaled = plain;
    scaled.grad_scale = 0.5;
    auto p4 = p, m4 = m, v4 = v, sg4 = sg;
    Host::adam_update(p.data(), m.data(), v.data(), g.data(), n, scaled);
    Host::adam_update(p2.data(), m2.data(), v2.data(), sg.data(), n, plain);
    optim::AdamStep clearing = plain;
    clearing.clear_grad = true;  // the same step, and zeros left in the gradient
    Host::adam_update(p4.data(), m4.data(), v4.data(), sg4.data(), n, clearing);
    CHECK(p4 == p2);
    CHECK(m4 == m2);
    CHECK(v4 == v2);
    CHECK(sg4 == std::vector<T>(n, T(0)));
    const optim::AdamTerms<T> terms(plain);
    for (std::int64_t i = 0; i < n; ++i) optim::adam_update_at(p3.data(), m3.data(), v3.data(), sg.data(), i, terms);
    CHECK(p == p2);
    CHECK(m == m2);
    CHECK(v == v2);
    // The element function in this file's build (its compiler may fuse a
    // multiply and an add the library's build does not, or the reverse).
    const double tol = std::same_as<T, double> ? 1e-14 : 1e-6;
    for (std::int64_t i = 0; i < n; ++i) {
      CAPTURE(i);
      CHECK(double(p2[i]) == doctest::Approx(double(p3[i])).epsilon(tol));
      CHECK(double(m2[i]) == doctest::Approx(double(m3[i])).epsilon(tol));
      CHECK(double(v2[i]) == doctest::Approx(double(v3[i])).epsilon(tol));
      CHECK(p2[i] != p0[i]);  // the step moved every parameter
    }
  }
}

TEST_CASE("WarmupCosine: linear warm-up to the peak, half a cosine down to the floor, then the floor") {
  const WarmupCosine s{.peak = 1.0, .floor = 0.1, .warmup = 4, .total = 14};
  CHECK(s(0) == doctest::Approx(0.25));
  CHECK(s(3) == doctest::Approx(1.0));
  CHECK(s(4) == doctest::Approx(1.0));     // the decay starts at the peak
  CHECK(s(9) == doctest::Approx(0.55));    // halfway: floor + (peak - floor) / 2
  CHECK(s(14) == doctest::Approx(0.1));    // the floor at total
  CHECK(s(1000) == doctest::Approx(0.1));  // and after
  CHECK(s(6) > s(7));                      // falling
  CHECK(WarmupCosine{.peak = 2, .warmup = 0, .total = 1}(0) == doctest::Approx(2.0));  // no warm-up
  CHECK_THROWS_WITH_AS(static_cast<void>(s(-1)), doctest::Contains("needs step >= 0"), invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(WarmupCosine{.peak = 1, .warmup = 5, .total = 4}(0)),
                       doctest::Contains("warmup <= total"), invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(WarmupCosine{.peak = 0.1, .floor = 0.2, .total = 4}(0)),
                       doctest::Contains("floor <= peak"), invalid_argument);
}

TEST_CASE("Adam refuses bad hyper-parameters, naming them") {
  auto w = make<Invariant>(world(), {2}, 3, {});
  CHECK_THROWS_WITH_AS(Adam(AdamOptions{.lr = -1}, w), doctest::Contains("the learning rate must be finite"),
                       invalid_argument);
  CHECK_THROWS_WITH_AS(Adam(AdamOptions{.beta1 = 1.0}, w), doctest::Contains("beta1 must be in [0, 1)"),
                       invalid_argument);
  CHECK_THROWS_WITH_AS(Adam(AdamOptions{.beta2 = -0.1}, w), doctest::Contains("beta2 must be in [0, 1)"),
                       invalid_argument);
  CHECK_THROWS_WITH_AS(Adam(AdamOptions{.eps = 0}, w), doctest::Contains("eps must be finite and > 0"),
                       invalid_argument);
  CHECK_THROWS_WITH_AS(Adam(AdamOptions{.weight_decay = NAN}, w), doctest::Contains("weight_decay must be finite"),
                       invalid_argument);
  Adam adam(AdamOptions{}, w);
  CHECK_THROWS_WITH_AS(adam.set_lr(INFINITY), doctest::Contains("set_lr"), invalid_argument);
}

}  // namespace shardex_test_optimizer
