// SPDX-License-Identifier: MIT
// The GPU backend against the host, on the same data: every transition with
// every strategy NCCL can run, forward and backward, and every local
// operation (fused element-wise trees, matmul, sum, transpose, reshape,
// attention), forward and backward, on the Cuda device with NCCL; the host
// (Eigen, MPI) computes the expected values. World sizes 1 .. 4, uneven
// lengths with zeros, float and double.
//
// Without a usable GPU (cudaGetDeviceCount fails or finds none) or with more
// ranks on a node than GPUs (NCCL refuses two ranks on one GPU), every rank
// prints why and exits 77, Meson's SKIP.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <shardex/autodiff/adam.hpp>
#include <shardex/cuda.hpp>

#include "support/dist.hpp"

using namespace shardex;

namespace shardex::test {

/// Why this run cannot test the GPU backend (empty: it can). Every rank gets
/// the same answer, so that all skip or none does.
std::string skip_reason() { return nccl::unavailable_reason(world()); }

}  // namespace shardex::test

namespace {

using Lens = std::vector<std::int64_t>;
using S0 = Sharded<0>;
using S1 = Sharded<1>;

const mpi::Communicator& host() { return test::world(); }

const nccl::Communicator& gpu() {
  // A short watchdog: a mismatch fails in seconds, not after the default 5 minutes.
  static const nccl::Communicator comm = nccl::Communicator::create(host(), {.timeout = std::chrono::seconds(60)});
  return comm;
}

template <class T>
constexpr double tolerance = std::same_as<T, double> ? 1e-11 : 2e-5;

template <LayoutTag L>
layout_mapping<L> mapping_of(const Lens& ls) {
  if constexpr (is_sharded_v<L>)
    return layout_mapping<L>(ls);
  else
    return {};
}

/// A host tensor of layout L with values in [-1, 1): one global tensor, or
/// (per_rank, for R and P) independent values per rank.
template <class T, LayoutTag L>
Tensor<T, L> random(const Shape& g, std::uint64_t seed, const Lens& ls = {}, bool per_rank = false) {
  const std::uint64_t s = per_rank ? seed * 131 + static_cast<std::uint64_t>(host().rank()) : seed;
  return Tensor<T, L>::uniform(host(), g, s, T(-1), T(1), mapping_of<L>(ls));
}

/// max |a - b| / max(1, |b|) over the local elements, the largest over ranks.
template <class T, LayoutTag L>
double max_diff(const Tensor<T, L, Cuda>& got, const Tensor<T, L, Host>& want) {
  const Tensor<T, L, Host> g = to<Host>(got);
  double m = g.local_shape() == want.local_shape() ? 0.0 : INFINITY;
  for (std::int64_t i = 0; m < INFINITY && i < want.size(); ++i) {
    const double a = g.data()[i], b = want.data()[i];
    m = std::max(m, std::isnan(a) ? INFINITY : std::abs(a - b) / std::max(1.0, std::abs(b)));
  }
  std::int64_t scaled = -static_cast<std::int64_t>(std::min(m, 1e3) * 1e15);  // min of negatives: the max
  host().all_reduce_min(&scaled, 1);
  return -static_cast<double>(scaled) * 1e-15;
}

#define CHECK_CLOSE(got, want, T, what)                                                          \
  do {                                                                                           \
    const double d_ = max_diff(got, want);                                                       \
    INFO((what) << ": max relative difference " << d_ << " (tolerance " << tolerance<T> << ")"); \
    CHECK(d_ <= tolerance<T>);                                                                   \
  } while (0)

/// backward(y) seeded with `w` (layout dual(To)) instead of ones: the
/// gradient of <y, w> summed over ranks, which reaches every adjoint entry.
template <class T, LayoutTag L, class Dev>
void backward_with(const Tensor<T, L, Dev>& y, const Tensor<T, dual_t<L>, Dev>& w) {
  auto order = autodiff::topological_order(y.node().get());
  y.node()->grad = w;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    (*it)->propagate();
    (*it)->release();
  }
}

/// redistribute<To>(x) with strategy s on both devices: the values, then the
/// gradient of x for a random cotangent.
template <class T, LayoutTag From, LayoutTag To>
void transition_case(const Shape& g, const Lens& from, const Lens& to_lens, Strategy s, std::uint64_t seed) {
  auto xh = random<T, From>(g, seed, from, std::same_as<From, Partial>);  // a Partial's terms differ per rank
  auto xc = to<Cuda>(xh, gpu());
  xh.requires_grad();
  xc.requires_grad();
  Tensor<T, To> yh = redistribute<To>(xh, mapping_of<To>(to_lens), s);
  Tensor<T, To, Cuda> yc = redistribute<To>(xc, mapping_of<To>(to_lens), s);
  const std::string what =
      std::string(layout_name<From>()) + " -> " + layout_name<To>() + " (" + strategy_name(s) + ") global " + g.str();
  CHECK_CLOSE(yc, yh, T, what + " forward");
  const auto w = random<T, dual_t<To>>(g, seed + 7, to_lens, std::same_as<dual_t<To>, Partial>);
  backward_with(yh, w);
  backward_with(yc, to<Cuda>(w, gpu()));
  REQUIRE(xh.has_grad());
  REQUIRE(xc.has_grad());
  CHECK_CLOSE(xc.grad(), xh.grad(), T, what + " backward");
}

template <class T>
void all_transitions(std::uint64_t seed) {
  const int n = host().size();
  auto rng = test::shared_rng(seed);
  for (const Lens& ls : test::lengths_cases(rng, n, {.random = 2, .max_total = 9})) {
    std::int64_t N = 0;
    for (auto l : ls) N += l;
    const Lens other = test::random_lengths(rng, n, N);
    CAPTURE(to_string(std::span<const std::int64_t>(ls)));
    for (Strategy s : {Strategy::automatic, Strategy::padded, Strategy::per_root}) {
      transition_case<T, S0, Replicated>({N, 3}, ls, {}, s, seed + 1);  // all_gather, contiguous pieces
      transition_case<T, S1, Replicated>({2, N}, ls, {}, s, seed + 2);  // all_gather, strided pieces
      transition_case<T, S1, Invariant>({2, N}, ls, {}, s, seed + 3);
      transition_case<T, Partial, S0>({N, 3}, {}, ls, s, seed + 4);  // reduce_scatter
      transition_case<T, Partial, S1>({2, N}, {}, ls, s, seed + 5);
    }
    for (Strategy s : {Strategy::automatic, Strategy::padded, Strategy::send_recv}) {
      transition_case<T, S0, S1>({N, 3 * n}, ls, Lens(static_cast<std::size_t>(n), 3), s, seed + 6);  // all_to_all
      transition_case<T, S1, S0>(
          {N + 1, N}, ls,
          [&] {
            Lens r = ls;
            r[0] += 1;
            return r;
          }(),
          s, seed + 7);
    }
    for (Strategy s : {Strategy::automatic, Strategy::send_recv})
      transition_case<T, S0, S0>({N, 2}, ls, other, s, seed + 8);                                // reshard
    transition_case<T, Partial, Replicated>({N + 1, 2}, {}, {}, Strategy::automatic, seed + 9);  // all_reduce
    transition_case<T, Partial, Invariant>({N + 1, 2}, {}, {}, Strategy::automatic, seed + 10);
    transition_case<T, Replicated, S0>({N, 2}, {}, ls, Strategy::automatic, seed + 11);  // slice
    transition_case<T, Invariant, S1>({2, N}, {}, ls, Strategy::automatic, seed + 12);
    transition_case<T, S0, Partial>({N, 2}, ls, {}, Strategy::automatic, seed + 13);                // zero_pad
    transition_case<T, Invariant, Replicated>({N + 1, 2}, {}, {}, Strategy::automatic, seed + 14);  // replicate
    transition_case<T, S1, Partial>({2, N}, ls, {}, Strategy::automatic, seed + 15);
  }
}

TEST_CASE("every transition and strategy on the GPU matches the host, forward and backward (double)") {
  all_transitions<double>(11);
}

TEST_CASE("every transition and strategy on the GPU matches the host, forward and backward (float)") {
  all_transitions<float>(12);
}

/// Local math on replicated operands: y = f(inputs) on both devices, then
/// the gradient of every input for a random cotangent.
template <class T>
void local_math(std::uint64_t seed) {
  using R = Replicated;
  const std::int64_t m = 5, k = 7, n = 6;
  auto a = random<T, R>({m, k}, seed + 1), b = random<T, R>({m, k}, seed + 2), c = random<T, R>({m, k}, seed + 3);
  auto bias = random<T, R>({k}, seed + 4), w = random<T, R>({k, n}, seed + 5);
  auto ac = to<Cuda>(a, gpu()), bc = to<Cuda>(b, gpu()), cc = to<Cuda>(c, gpu()), biasc = to<Cuda>(bias, gpu()),
       wc = to<Cuda>(w, gpu());
  for (auto* t : {&a, &b, &c, &bias, &w}) t->requires_grad();
  for (auto* t : {&ac, &bc, &cc, &biasc, &wc}) t->requires_grad();

  SUBCASE("a fused element-wise tree with a broadcast bias") {
    const auto f = [](const auto& x, const auto& y, const auto& z, const auto& bb) {
      return add_bias(gelu(x * y + z) - tanh(x) * 2.0 + exp(scale(y, 0.5)) + relu(z) - (-x), bb);
    };
    // The other non-linear ops and division, fused likewise (positive where they need it).
    const auto f2 = [](const auto& x, const auto& y, const auto& z) {
      const auto e = exp(x * 0.5);
      return silu(y) * (1.0 - sigmoid(z)) + sqrt(e) - rsqrt(e) * log(e + exp(y)) + z / (e + 0.5);
    };
    {
      Tensor<T, R> yh = f2(a, b, c);
      Tensor<T, R, Cuda> yc = f2(ac, bc, cc);
      CHECK_CLOSE(yc, yh, T, "silu, sigmoid, sqrt, rsqrt, log, div forward");
      const auto g = random<T, Partial>({m, k}, seed + 7, {}, true);
      backward_with(yh, g);
      backward_with(yc, to<Cuda>(g, gpu()));
      CHECK_CLOSE(ac.grad(), a.grad(), T, "d/da (silu ... div)");
      CHECK_CLOSE(cc.grad(), c.grad(), T, "d/dc (silu ... div)");
      for (auto* t : {&a, &b, &c}) t->zero_grad();
      for (auto* t : {&ac, &bc, &cc}) t->zero_grad();
    }
    Tensor<T, R> yh = f(a, b, c, bias);
    Tensor<T, R, Cuda> yc = f(ac, bc, cc, biasc);
    CHECK_CLOSE(yc, yh, T, "fused forward");
    const auto g = random<T, Partial>({m, k}, seed + 6, {}, true);
    backward_with(yh, g);
    backward_with(yc, to<Cuda>(g, gpu()));
    CHECK_CLOSE(ac.grad(), a.grad(), T, "fused d/da");
    CHECK_CLOSE(bc.grad(), b.grad(), T, "fused d/db");
    CHECK_CLOSE(cc.grad(), c.grad(), T, "fused d/dc");
    CHECK_CLOSE(biasc.grad(), bias.grad(), T, "fused d/dbias (atomic adds)");
  }
  SUBCASE("matmul, transpose, sum over a dim and over all") {
    const auto f = [](const auto& x, const auto& y, const auto& ww) {
      Tensor<T, R, typename std::remove_cvref_t<decltype(x)>::device_type> p = matmul(x * y, ww);  // (m, n)
      Tensor<T, R, typename std::remove_cvref_t<decltype(x)>::device_type> q = transpose(p);       // (n, m)
      return matmul(q, x);                                                                         // (n, k)
    };
    Tensor<T, R> yh = f(a, b, w);
    Tensor<T, R, Cuda> yc = f(ac, bc, wc);
    CHECK_CLOSE(yc, yh, T, "matmul/transpose forward");
    Tensor<T, R> sh = sum<1>(yh);
    Tensor<T, R, Cuda> sc = sum<1>(yc);
    CHECK_CLOSE(sc, sh, T, "sum<1>");
    Tensor<T, R> th = sum(sh * sh);
    Tensor<T, R, Cuda> tc = sum(sc * sc);
    CHECK_CLOSE(tc, th, T, "sum");
    const auto g = random<T, Partial>(Shape{}, seed + 7, {}, true);
    backward_with(th, g);
    backward_with(tc, to<Cuda>(g, gpu()));
    CHECK_CLOSE(ac.grad(), a.grad(), T, "matmul d/da");
    CHECK_CLOSE(bc.grad(), b.grad(), T, "matmul d/db");
    CHECK_CLOSE(wc.grad(), w.grad(), T, "matmul d/dw");
  }
  SUBCASE("reshape and attention") {
    const std::int64_t seq = 6, heads = 2, dh = 4;
    auto q = random<T, R>({seq, heads * dh}, seed + 8), kk = random<T, R>({seq, heads, dh}, seed + 9),
         v = random<T, R>({seq, heads, dh}, seed + 10);
    auto qc = to<Cuda>(q, gpu()), kc = to<Cuda>(kk, gpu()), vc = to<Cuda>(v, gpu());
    for (auto* t : {&q, &kk, &v}) t->requires_grad();
    for (auto* t : {&qc, &kc, &vc}) t->requires_grad();
    Tensor<T, R> yh = attention(reshape(q, {seq, heads, dh}), kk, v);
    Tensor<T, R, Cuda> yc = attention(reshape(qc, {seq, heads, dh}), kc, vc);
    CHECK_CLOSE(yc, yh, T, "attention forward");
    const auto g = random<T, Partial>({seq, heads, dh}, seed + 11, {}, true);
    backward_with(yh, g);
    backward_with(yc, to<Cuda>(g, gpu()));
    CHECK_CLOSE(qc.grad(), q.grad(), T, "attention dq (through reshape)");
    CHECK_CLOSE(kc.grad(), kk.grad(), T, "attention dk");
    CHECK_CLOSE(vc.grad(), v.grad(), T, "attention dv");
  }
}

/// The layers of a language model (nn/) on the GPU against the host: a
/// vocab-parallel embedding, layer and RMS norm with sequence-parallel
/// tokens, and a vocab-parallel cross-entropy, with uneven and zero lengths.
template <class T>
void model_layers(std::uint64_t seed) {
  using R = Replicated;
  using I = Invariant;
  const int n = host().size();
  Lens ls(static_cast<std::size_t>(n), 3);
  // A rank with no rows, tokens or vocabulary columns; on one rank that would
  // leave nothing at all (and the embedding's ids no vocabulary to draw from).
  if (n > 1) ls[0] = 0;
  std::int64_t total = 0;
  for (auto l : ls) total += l;
  SUBCASE("embedding of a vocab-parallel table") {
    auto ids = Tensor<std::int64_t, I>::uniform(host(), {7}, seed, 0, total);
    auto table = random<T, S0>({total, 5}, seed + 1, ls);
    auto idsc = to<Cuda>(ids, gpu());
    auto tablec = to<Cuda>(table, gpu());
    table.requires_grad(), tablec.requires_grad();
    Tensor<T, Partial> yh = embedding(ids, table);
    Tensor<T, Partial, Cuda> yc = embedding(idsc, tablec);
    CHECK_CLOSE(yc, yh, T, "embedding forward");
    const auto g = random<T, R>({7, 5}, seed + 2);
    backward_with(yh, g);
    backward_with(yc, to<Cuda>(g, gpu()));
    CHECK_CLOSE(tablec.grad(), table.grad(), T, "embedding's table gradient");
  }
  SUBCASE("layer_norm and rms_norm, tokens sharded") {
    auto x = random<T, S0>({total, 6}, seed + 3, ls);
    auto w = random<T, R>({6}, seed + 4), b = random<T, R>({6}, seed + 5);
    auto xc = to<Cuda>(x, gpu()), wc = to<Cuda>(w, gpu()), bc = to<Cuda>(b, gpu());
    x.requires_grad(), w.requires_grad(), b.requires_grad();
    xc.requires_grad(), wc.requires_grad(), bc.requires_grad();
    Tensor<T, S0> yh = layer_norm(x, w, b) + rms_norm(x, w);
    Tensor<T, S0, Cuda> yc = layer_norm(xc, wc, bc) + rms_norm(xc, wc);
    CHECK_CLOSE(yc, yh, T, "norms forward");
    const auto g = random<T, S0>({total, 6}, seed + 6, ls);
    backward_with(yh, g);
    backward_with(yc, to<Cuda>(g, gpu()));
    CHECK_CLOSE(xc.grad(), x.grad(), T, "norms dx");
    CHECK_CLOSE(wc.grad(), w.grad(), T, "norms dw");
    CHECK_CLOSE(bc.grad(), b.grad(), T, "layer_norm db");
  }
  SUBCASE("causal attention with heads sharded and grouped KV heads, through split_heads and merge_heads") {
    const std::int64_t B = 2, S = 5, dh = 3;
    Lens cols;
    for (auto l : ls) cols.push_back(2 * l * dh);  // two query heads per KV head
    Lens kv_cols;
    for (auto l : ls) kv_cols.push_back(l * dh);
    auto q = random<T, S1>({B * S, 2 * total * dh}, seed + 9, cols);
    auto k = random<T, S1>({B * S, total * dh}, seed + 10, kv_cols),
         v = random<T, S1>({B * S, total * dh}, seed + 11, kv_cols);
    auto qc = to<Cuda>(q, gpu()), kc = to<Cuda>(k, gpu()), vc = to<Cuda>(v, gpu());
    q.requires_grad(), k.requires_grad(), v.requires_grad();
    qc.requires_grad(), kc.requires_grad(), vc.requires_grad();
    Tensor<T, S1> yh =
        merge_heads(causal_attention(split_heads(q, B, dh), split_heads(k, B, dh), split_heads(v, B, dh)));
    Tensor<T, S1, Cuda> yc =
        merge_heads(causal_attention(split_heads(qc, B, dh), split_heads(kc, B, dh), split_heads(vc, B, dh)));
    CHECK_CLOSE(yc, yh, T, "causal attention forward");
    const auto g = random<T, S1>({B * S, 2 * total * dh}, seed + 12, cols);
    backward_with(yh, g);
    backward_with(yc, to<Cuda>(g, gpu()));
    CHECK_CLOSE(qc.grad(), q.grad(), T, "causal attention dq");
    CHECK_CLOSE(kc.grad(), k.grad(), T, "causal attention dk");
    CHECK_CLOSE(vc.grad(), v.grad(), T, "causal attention dv");
  }
  SUBCASE("AdamW on the device, one fused pass per parameter") {
    auto w = random<T, S0>({total, 4}, seed + 13, ls);
    auto b = random<T, I>({4}, seed + 14);
    auto wc = to<Cuda>(w, gpu()), bc = to<Cuda>(b, gpu());
    w.requires_grad(), b.requires_grad(), wc.requires_grad(), bc.requires_grad();
    const AdamOptions o{.lr = 0.05, .beta1 = 0.8, .beta2 = 0.95, .weight_decay = 0.3};
    Adam adam(o, w, no_weight_decay(b));
    Adam adamc(o, wc, no_weight_decay(bc));
    for (int step = 0; step < 3; ++step) {
      backward_with(Tensor<T, S0>(w * w), random<T, S0>({total, 4}, seed + 15 + step, ls));
      backward_with(Tensor<T, S0, Cuda>(wc * wc), to<Cuda>(random<T, S0>({total, 4}, seed + 15 + step, ls), gpu()));
      backward(Tensor<T, I>(sum(b * b)));
      backward(Tensor<T, I, Cuda>(sum(bc * bc)));
      adam.step(w, b);
      adamc.step(wc, bc);
    }
    CHECK_CLOSE(wc, w, T, "AdamW's weight after 3 steps");
    CHECK_CLOSE(bc, b, T, "AdamW's bias after 3 steps");
    CHECK_CLOSE(std::get<0>(adamc.second_moments()), std::get<0>(adam.second_moments()), T, "the second moment");
  }
  SUBCASE("cross_entropy of vocab-parallel logits") {
    auto targets = Tensor<std::int32_t, I>::uniform(host(), {4}, seed + 7, 0, total);
    auto logits = random<T, S1>({4, total}, seed + 8, ls);
    auto tc = to<Cuda>(targets, gpu());
    auto lc = to<Cuda>(logits, gpu());
    logits.requires_grad(), lc.requires_grad();
    Tensor<T, I> lh = cross_entropy(logits, targets);
    Tensor<T, I, Cuda> lcuda = cross_entropy(lc, tc);
    CHECK_CLOSE(lcuda, lh, T, "cross_entropy loss");
    backward(lh);
    backward(lcuda);
    CHECK_CLOSE(lc.grad(), logits.grad(), T, "cross_entropy's logit gradient");
  }
}

TEST_CASE("the model layers on the GPU match the host, forward and backward (double)") { model_layers<double>(41); }
TEST_CASE("the model layers on the GPU match the host, forward and backward (float)") { model_layers<float>(42); }

TEST_CASE("local math on the GPU matches the host, forward and backward (double)") { local_math<double>(21); }
TEST_CASE("local math on the GPU matches the host, forward and backward (float)") { local_math<float>(22); }

TEST_CASE("a sharded Megatron block on the GPU matches the host, forward and backward") {
  const int n = host().size();
  auto rng = test::shared_rng(31);
  for (const Lens& ls : test::lengths_cases(rng, n, {.random = 2, .max_total = 10, .empty = false})) {
    std::int64_t ffn = 0;
    for (auto l : ls) ffn += l;
    const std::int64_t batch = 3, hidden = 4;
    auto x = random<double, Invariant>({batch, hidden}, 1);
    auto A = random<double, S1>({hidden, ffn}, 2, ls);
    auto B = random<double, S0>({ffn, hidden}, 3, ls);
    auto a = random<double, S0>({ffn}, 4, ls);
    auto xc = to<Cuda>(x, gpu());
    auto Ac = to<Cuda>(A, gpu());
    auto Bc = to<Cuda>(B, gpu());
    auto ac = to<Cuda>(a, gpu());
    A.requires_grad(), B.requires_grad(), a.requires_grad();
    Ac.requires_grad(), Bc.requires_grad(), ac.requires_grad();
    const auto block = [](const auto& xx, const auto& AA, const auto& aa, const auto& BB) {
      return all_reduce<Invariant>(matmul(gelu(add_bias(matmul(replicate(xx), AA), aa)), BB));
    };
    Tensor<double, Invariant> yh = block(x, A, a, B);
    Tensor<double, Invariant, Cuda> yc = block(xc, Ac, ac, Bc);
    CHECK_CLOSE(yc, yh, double, "Megatron block forward");
    Tensor<double, Invariant> lh = sum(yh * yh);
    Tensor<double, Invariant, Cuda> lc = sum(yc * yc);
    backward(lh);
    backward(lc);
    CHECK_CLOSE(Ac.grad(), A.grad(), double, "dA");
    CHECK_CLOSE(ac.grad(), a.grad(), double, "da");
    CHECK_CLOSE(Bc.grad(), B.grad(), double, "dB");
    // The gradients' norm (a dot product on the device) and clipping: as on the host.
    const double nh = grad_norm(A, a, B), nc = grad_norm(Ac, ac, Bc);
    CHECK(std::abs(nc - nh) <= 1e-12 * nh);
    CHECK(std::abs(clip_grad_norm(nh / 2, Ac, ac, Bc) - nc) <= 1e-12 * nc);
    clip_grad_norm(nh / 2, A, a, B);
    CHECK_CLOSE(Ac.grad(), A.grad(), double, "dA clipped");
    CHECK(std::abs(grad_norm(Ac, ac, Bc) - grad_norm(A, a, B)) <= 1e-12 * nh);
  }
}

TEST_CASE("the NCCL communicator: ranks, device, and v_collective refused at run time too") {
  CHECK(gpu().rank() == host().rank());
  CHECK(gpu().size() == host().size());
  CHECK(gpu().device() >= 0);
  CHECK_FALSE(nccl::Communicator::has_v_collectives);
  auto x = to<Cuda>(random<float, S0>({host().size(), 2}, 5, Lens(static_cast<std::size_t>(host().size()), 1)), gpu());
  // The planner resolves strategies for the backend: without v collectives, even
  // lengths take the padded (plain) all-gather.
  const auto plan = explain(all_gather(x));
  REQUIRE(plan.steps.size() == 1);
  CHECK(plan.steps[0].strategy == "padded");
  const auto gather_v = [&] { return Tensor<float, Replicated, Cuda>(all_gather(x, Strategy::v_collective)); };
  CHECK_THROWS_WITH_AS(gather_v(), doctest::Contains("v_collective needs a backend with v collectives"),
                       invalid_argument);
}

TEST_CASE_TEMPLATE("the NCCL max all-reduce matches the host's, in place and out of place", T, float, double) {
  const int me = host().rank();
  constexpr std::int64_t count = 5;
  std::vector<T> mine(count), want(count, T(0));
  for (std::int64_t i = 0; i < count; ++i)
    mine[static_cast<std::size_t>(i)] = static_cast<T>((i * 7 + me * 3) % 11) - T(5);
  host().all_reduce_max(mine.data(), want.data(), count);
  auto send = Cuda::allocate<T>(count), recv = Cuda::allocate<T>(count);
  Cuda::upload(send.get(), mine.data(), count);
  BackendCallRecorder rec;
  gpu().all_reduce_max(send.get(), recv.get(), count);
  std::vector<T> got(count, T(99));
  Cuda::download(got.data(), recv.get(), count);
  CHECK(got == want);
  gpu().all_reduce_max(send.get(), count);
  Cuda::download(got.data(), send.get(), count);
  CHECK(got == want);
  REQUIRE(rec.calls().size() == 2);
  CHECK(std::string(rec.calls()[0].primitive) == "all_reduce_max");
  gpu().all_reduce_max(send.get(), 0);  // nothing to move: returns on every rank, the buffer as it was
  Cuda::download(got.data(), send.get(), count);
  CHECK(got == want);
  CHECK(rec.calls().size() == 2);  // and calls nothing
}

}  // namespace

namespace {

TEST_CASE("a call no peer matches ends in an abort with a message, not a hang") {
  // A receive from this rank with no send: NCCL waits for it forever. The
  // watchdog of a communicator with a short timeout must abort it and throw.
  const auto comm = nccl::Communicator::create(host(), {.timeout = std::chrono::seconds(3)});
  auto buf = Cuda::allocate<float>(4);
  const auto t0 = std::chrono::steady_clock::now();
  {
    auto g = comm.group();
    g.recv(buf.get(), 4, comm.rank());
    CHECK_THROWS_AS(g.end(), backend_error);
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO("waited " << waited << " s");
  CHECK(waited < 60);
  CHECK(comm.aborted());
  CHECK_THROWS_WITH_AS(comm.all_reduce(buf.get(), 4), doctest::Contains("aborted earlier"), backend_error);
  // The other communicator is untouched.
  auto y = to<Cuda>(random<double, S0>({host().size(), 2}, 6, Lens(static_cast<std::size_t>(host().size()), 1)), gpu());
  Tensor<double, Replicated> yh = all_gather(to<Host>(y));
  Tensor<double, Replicated, Cuda> yc = all_gather(y);
  CHECK_CLOSE(yc, yh, double, "all_gather after another communicator's abort");
}

}  // namespace
