// SPDX-License-Identifier: MIT
// The layers of a language model (issue #25) at every world size, with even,
// uneven and zero lengths, against plain loops over the whole tensors on each
// rank (the one-rank result): embedding (vocab-parallel, hidden-sharded and
// whole tables, Sharded ids) with the table's gradient, and cross-entropy
// (vocab-parallel and whole logits, an ignore index, mean and sum) with the
// logits' gradient, both also against finite differences; out-of-range ids
// and targets are an error on every rank; explain names the collectives; the
// device's element functions equal the host's vectorized row passes.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <shardex.hpp>

#include "support/dist.hpp"
#include "support/smooth_tensor.hpp"

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_layers {

using namespace shardex;

namespace {

using Lens = std::vector<std::int64_t>;
const mpi::Communicator& world() { return test::world(); }

/// The vocabulary splits of a test: random ones with zeros, one rank holding
/// everything, even ones; never all zero (an empty vocabulary has no valid id).
std::vector<Lens> vocab_splits(std::uint64_t seed) {
  auto rng = test::shared_rng(seed);
  return test::lengths_cases(rng, world().size(), {.random = 3, .max_total = 13, .even = true, .empty = false});
}

std::int64_t total(const Lens& ls) {
  std::int64_t s = 0;
  for (auto l : ls) s += l;
  return s;
}

/// Token ids in [0, vocab) with repeats, the same on every rank; `ignored`
/// positions get -100 (cross-entropy's default ignore index).
std::vector<std::int64_t> token_ids(std::int64_t tokens, std::int64_t vocab, std::uint64_t seed,
                                    std::vector<std::int64_t> ignored = {}) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(tokens));
  for (auto& id : ids) id = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(vocab));
  for (auto i : ignored) ids[static_cast<std::size_t>(i)] = -100;
  return ids;
}

/// The whole (vocab, hidden) table of smooth_tensor(salt), as the one rank sees it.
double table_at(std::int64_t v, std::int64_t h, int salt) {
  const std::int64_t idx[2] = {v, h};
  return test::smooth_value(idx, salt);
}

/// The cross-entropy of the whole logits (smooth_tensor(salt) scaled by 4) on
/// one rank, in plain loops: the loss (mean or sum over counted tokens) and
/// its gradient (tokens x vocab).
struct ReferenceCrossEntropy {
  double loss = 0;
  std::vector<double> grad;
  ReferenceCrossEntropy(std::int64_t tokens, std::int64_t vocab, const std::vector<std::int64_t>& targets, int salt,
                        bool mean) {
    grad.assign(static_cast<std::size_t>(tokens * vocab), 0.0);
    std::int64_t counted = 0;
    for (auto t : targets) counted += t != -100 ? 1 : 0;
    for (std::int64_t t = 0; t < tokens; ++t) {
      if (targets[static_cast<std::size_t>(t)] == -100) continue;
      double m = -INFINITY, s = 0;
      for (std::int64_t v = 0; v < vocab; ++v) m = std::max(m, 4 * table_at(t, v, salt));
      for (std::int64_t v = 0; v < vocab; ++v) s += std::exp(4 * table_at(t, v, salt) - m);
      const double scale = mean ? 1.0 / static_cast<double>(counted) : 1.0;
      loss += (std::log(s) + m - 4 * table_at(t, targets[static_cast<std::size_t>(t)], salt)) * scale;
      for (std::int64_t v = 0; v < vocab; ++v)
        grad[static_cast<std::size_t>(t * vocab + v)] =
            (std::exp(4 * table_at(t, v, salt) - m) / s - (v == targets[static_cast<std::size_t>(t)] ? 1.0 : 0.0)) *
            scale;
    }
  }
};

/// |a - b| within rel of the larger magnitude (or of 1 near zero).
bool close(double a, double b, double rel) {
  return std::abs(a - b) <= rel * std::max({1.0, std::abs(a), std::abs(b)});
}

}  // namespace

TEST_CASE("token ids: int32 and int64 tensors in whole and sharded layouts, from host data") {
  const int n = world().size(), r = world().rank();
  auto ids = Tensor<std::int64_t, Invariant>::uniform(world(), {40}, 9, 0, 7);
  CHECK(ids.describe().find("Tensor<int64, I>") == 0);
  bool in_range = true;
  for (auto v : ids.local()) in_range = in_range && v >= 0 && v < 7;
  CHECK(in_range);
  // An empty range has no id to draw: an error on every rank, not lo; an empty tensor needs none.
  CHECK_THROWS_WITH_AS((Tensor<std::int64_t, Invariant>::uniform(world(), {3}, 9, 5, 5)),
                       doctest::Contains("[5, 5) is an empty range for 3 elements"), shardex::invalid_argument);
  CHECK(Tensor<std::int32_t, Invariant>::uniform(world(), {0}, 9, 0, 0).shape()[0] == 0);
  Lens ls(static_cast<std::size_t>(n), 2);
  ls[0] = 0;
  const std::vector<std::int32_t> mine(static_cast<std::size_t>(ls[static_cast<std::size_t>(r)]), r + 1);
  auto sharded = Tensor<std::int32_t, Sharded<0>>::from_local(world(), {ls[static_cast<std::size_t>(r)]}, mine,
                                                              layout_mapping<Sharded<0>>(ls));
  CHECK(sharded.shape()[0] == total(ls));
  CHECK(sharded.describe().find("Tensor<int32, S(0)") == 0);
  CHECK(format_local(sharded) == (r == 0 ? "[]" : "[" + std::to_string(r + 1) + ", " + std::to_string(r + 1) + "]"));
}

TEST_CASE_TEMPLATE(
    "embedding of a vocab-parallel table: Partial, all-reduced to the whole lookup; the table's "
    "gradient is the scatter-add of its rows",
    T, float, double) {
  const double tol = std::same_as<T, double> ? 1e-12 : 1e-5;
  const std::int64_t H = 5, tokens = 9;
  for (const Lens& ls : vocab_splits(11)) {
    CAPTURE(to_string(ls));
    const std::int64_t V = total(ls);
    const auto host_ids = token_ids(tokens, V, 3);
    const auto ids = Tensor<std::int64_t, Invariant>::from_local(world(), {tokens}, host_ids);
    auto table = Tensor<T, Sharded<0>>::from_function(
        world(), {V, H}, [](std::span<const std::int64_t> i) { return table_at(i[0], i[1], 1); },
        layout_mapping<Sharded<0>>(ls));
    table.requires_grad();
    const auto w = Tensor<T, Invariant>::from_function(
        world(), {tokens, H}, [](std::span<const std::int64_t> i) { return table_at(i[0], i[1], 2); });
    Tensor<T, Invariant> y = all_reduce<Invariant>(embedding(ids, table));
    bool same = true;
    for (std::int64_t t = 0; t < tokens; ++t)
      for (std::int64_t h = 0; h < H; ++h) same = same && close(y(t, h), table_at(host_ids[t], h, 1), tol);
    CHECK(same);
    Tensor<T, Invariant> loss = sum(y * w);
    backward(loss);
    // d loss / d table[v, h] = the sum of w[t, h] over the tokens t with id v.
    const std::int64_t first = table.global_offset();
    bool grads = true;
    for (std::int64_t v = 0; v < table.local_shape()[0]; ++v)
      for (std::int64_t h = 0; h < H; ++h) {
        double expect = 0;
        for (std::int64_t t = 0; t < tokens; ++t) expect += host_ids[t] == first + v ? table_at(t, h, 2) : 0.0;
        grads = grads && close(table.grad()(v, h), expect, tol);
      }
    CHECK(grads);
  }
}

TEST_CASE("embedding of a hidden-sharded table (Sharded<1>) and of a whole table with Sharded<0> ids") {
  const int r = world().rank();
  for (const Lens& ls : vocab_splits(12)) {
    CAPTURE(to_string(ls));
    const std::int64_t H = total(ls), V = 6, tokens = 7;
    const auto host_ids = token_ids(tokens, V, 5);
    const auto ids = Tensor<std::int64_t, Replicated>::from_local(world(), {tokens}, host_ids);
    auto table = Tensor<double, Sharded<1>>::from_function(
        world(), {V, H}, [](std::span<const std::int64_t> i) { return table_at(i[0], i[1], 1); },
        layout_mapping<Sharded<1>>(ls));
    table.requires_grad();
    Tensor<double, Sharded<1>> y = embedding(ids, table);
    CHECK(y.lengths()[static_cast<std::size_t>(r)] == ls[static_cast<std::size_t>(r)]);
    const std::int64_t c0 = y.global_offset();
    bool same = true;
    for (std::int64_t t = 0; t < tokens; ++t)
      for (std::int64_t c = 0; c < y.local_shape()[1]; ++c) same = same && y(t, c) == table_at(host_ids[t], c0 + c, 1);
    CHECK(same);
    Tensor<double, Invariant> loss = sum(all_gather<Invariant>(y) * 3.0);
    backward(loss);
    bool grads = true;  // 3 times the number of tokens with id v
    for (std::int64_t v = 0; v < V; ++v) {
      double count = 0;
      for (auto id : host_ids) count += id == v ? 1 : 0;
      for (std::int64_t c = 0; c < table.local_shape()[1]; ++c) grads = grads && table.grad()(v, c) == 3 * count;
    }
    CHECK(grads);

    // A Replicated table with the tokens split: each rank looks up its own tokens.
    const std::int64_t T2 = total(ls);
    const auto all_ids = token_ids(T2, V, 8);
    const std::int64_t off = [&] {
      std::int64_t o = 0;
      for (int q = 0; q < r; ++q) o += ls[static_cast<std::size_t>(q)];
      return o;
    }();
    const std::vector<std::int64_t> my_ids(all_ids.begin() + off,
                                           all_ids.begin() + off + ls[static_cast<std::size_t>(r)]);
    const auto sids = Tensor<std::int64_t, Sharded<0>>::from_local(world(), {ls[static_cast<std::size_t>(r)]}, my_ids,
                                                                   layout_mapping<Sharded<0>>(ls));
    const auto whole = Tensor<double, Replicated>::from_function(
        world(), {V, 4}, [](std::span<const std::int64_t> i) { return table_at(i[0], i[1], 4); });
    Tensor<double, Sharded<0>> z = embedding(sids, whole);
    bool rows = true;
    for (std::int64_t t = 0; t < z.local_shape()[0]; ++t)
      for (std::int64_t c = 0; c < 4; ++c)
        rows = rows && z(t, c) == table_at(my_ids[static_cast<std::size_t>(t)], c, 4);
    CHECK(rows);
  }
}

TEST_CASE("embedding: an id outside the vocabulary is an error on every rank, naming the id and the size") {
  const int n = world().size(), r = world().rank();
  Lens ls(static_cast<std::size_t>(n), 2);
  std::vector<std::int64_t> mine(2, 1);
  if (r == n - 1) mine[1] = 6;  // vocab is 6: ids 0 .. 5
  const auto sids = Tensor<std::int64_t, Sharded<0>>::from_local(world(), {2}, mine, layout_mapping<Sharded<0>>(ls));
  const auto table = Tensor<double, Replicated>::zeros(world(), {6, 3});
  std::string what;
  try {
    Tensor<double, Sharded<0>> z = embedding(sids, table);
  } catch (const invalid_argument& e) {
    what = e.what();
  }
  CHECK(what.find("shardex::embedding(ids, table) on rank " + std::to_string(n - 1)) != std::string::npos);
  CHECK(what.find("ids[" + std::to_string(2 * n - 1) + "] = 6 is outside the vocabulary of 6 entries") !=
        std::string::npos);
  // Whole ids: a negative id, seen by every rank.
  const auto ids = Tensor<std::int64_t, Invariant>::from_local(world(), {3}, std::vector<std::int64_t>{0, -3, 1});
  const auto itable = Tensor<double, Invariant>::zeros(world(), {6, 3});
  CHECK_THROWS_WITH_AS((Tensor<double, Invariant>(embedding(ids, itable))),
                       doctest::Contains("ids[1] = -3 is outside the vocabulary of 6 entries"), invalid_argument);
}

TEST_CASE_TEMPLATE("cross_entropy of vocab-parallel logits equals the whole computation, loss and gradient", T, float,
                   double) {
  const double tol = std::same_as<T, double> ? 1e-12 : 2e-5;
  const std::int64_t tokens = 6;
  for (const Lens& ls : vocab_splits(13)) {
    for (bool mean : {true, false}) {
      CAPTURE(to_string(ls));
      CAPTURE(mean);
      const std::int64_t V = total(ls);
      const auto host_targets = token_ids(tokens, V, 21, {2});
      const auto targets = Tensor<std::int32_t, Invariant>::from_function(
          world(), {tokens}, [&](std::span<const std::int64_t> i) { return host_targets[i[0]]; });
      auto logits = Tensor<T, Sharded<1>>::from_function(
          world(), {tokens, V}, [](std::span<const std::int64_t> i) { return 4 * table_at(i[0], i[1], 7); },
          layout_mapping<Sharded<1>>(ls));
      logits.requires_grad();
      const CrossEntropyOptions o{.reduction = mean ? LossReduction::mean : LossReduction::sum};
      Tensor<T, Invariant> loss = cross_entropy(logits, targets, o);
      const ReferenceCrossEntropy ref(tokens, V, host_targets, 7, mean);
      CHECK(close(loss.local()[0], ref.loss, tol));
      backward(loss);
      const std::int64_t c0 = logits.global_offset();
      bool grads = true;
      for (std::int64_t t = 0; t < tokens; ++t)
        for (std::int64_t c = 0; c < logits.local_shape()[1]; ++c)
          grads = grads && close(logits.grad()(t, c), ref.grad[static_cast<std::size_t>(t * V + c0 + c)], tol);
      CHECK(grads);
    }
  }
}

TEST_CASE("cross_entropy: whole logits agree with vocab-parallel ones, and finite differences with the gradient") {
  const std::int64_t tokens = 5, V = 9;
  const auto host_targets = token_ids(tokens, V, 4, {0});
  const auto targets = Tensor<std::int64_t, Invariant>::from_local(world(), {tokens}, host_targets);
  const auto loss_of = [&](double bump, std::int64_t at) {
    const auto x = Tensor<double, Invariant>::from_function(world(), {tokens, V}, [&](std::span<const std::int64_t> i) {
      return 4 * table_at(i[0], i[1], 7) + (i[0] * V + i[1] == at ? bump : 0.0);
    });
    return Tensor<double, Invariant>(cross_entropy(x, targets)).local()[0];
  };
  auto x = Tensor<double, Invariant>::from_function(
      world(), {tokens, V}, [](std::span<const std::int64_t> i) { return 4 * table_at(i[0], i[1], 7); });
  x.requires_grad();
  Tensor<double, Invariant> loss = cross_entropy(x, targets);
  CHECK(close(loss.local()[0], ReferenceCrossEntropy(tokens, V, host_targets, 7, true).loss, 1e-12));
  backward(loss);
  const double h = 1e-5;
  for (std::int64_t at : {std::int64_t{3}, V + 1, 2 * V + 4, 4 * V + 8, std::int64_t{1}}) {
    CAPTURE(at);
    const double fd = (loss_of(h, at) - loss_of(-h, at)) / (2 * h);
    CHECK(close(x.grad().local()[static_cast<std::size_t>(at)], fd, 1e-7));
  }
  CHECK(x.grad()(0, 3) == 0.0);  // token 0 is ignored
}

TEST_CASE("cross_entropy: a target outside the vocabulary is an error on every rank; explain names the collectives") {
  const int n = world().size();
  Lens ls(static_cast<std::size_t>(n), 3);
  const auto logits = Tensor<double, Sharded<1>>::zeros(world(), {2, 3 * n}, layout_mapping<Sharded<1>>(ls));
  const auto bad = Tensor<std::int64_t, Invariant>::from_local(world(), {2}, std::vector<std::int64_t>{0, 3 * n});
  std::string what;
  try {
    Tensor<double, Invariant> loss = cross_entropy(logits, bad);
  } catch (const invalid_argument& e) {
    what = e.what();
  }
  CHECK(what.find("targets[1] = " + std::to_string(3 * n) + " is outside the vocabulary of " + std::to_string(3 * n) +
                  " entries (valid: 0 .. " + std::to_string(3 * n - 1) + ") and not the ignore index -100") !=
        std::string::npos);
  const auto good = Tensor<std::int64_t, Invariant>::from_local(world(), {2}, std::vector<std::int64_t>{0, 1});
  const Plan p = explain(cross_entropy(logits, good));
  REQUIRE(p.steps.size() == 1);
  CHECK(p.steps[0].op == "cross_entropy");
  CHECK(p.steps[0].communicates);
  CHECK(p.steps[0].strategy == "all_reduce MAX + all_reduce SUM");
  CHECK(p.steps[0].bytes == 3 * 2 * 8);
  // Whole logits: no collective.
  const auto whole = Tensor<double, Replicated>::zeros(world(), {2, 3});
  CHECK_FALSE(explain(cross_entropy(whole, good)).steps[0].communicates);
}

namespace {

/// layer_norm (or rms_norm) of one row in plain loops.
std::vector<double> reference_norm_row(const std::vector<double>& x, const std::vector<double>& w,
                                       const std::vector<double>& b, double eps, bool rms) {
  const double n = static_cast<double>(x.size());
  double m = 0, v = 0;
  if (!rms)
    for (double e : x) m += e / n;
  for (double e : x) v += (e - m) * (e - m) / n;
  std::vector<double> y;
  for (std::size_t c = 0; c < x.size(); ++c) y.push_back((x[c] - m) / std::sqrt(v + eps) * w[c] + (rms ? 0 : b[c]));
  return y;
}

/// The tokens' offset of this rank for lengths ls.
std::int64_t offset_of(const Lens& ls, int rank) {
  std::int64_t o = 0;
  for (int q = 0; q < rank; ++q) o += ls[static_cast<std::size_t>(q)];
  return o;
}

}  // namespace

TEST_CASE_TEMPLATE(
    "layer_norm and rms_norm under sequence parallelism equal the unsharded norm; the weight's "
    "gradient is all-reduced by its replicate",
    T, float, double) {
  const double tol = std::same_as<T, double> ? 1e-12 : 2e-5;
  const int r = world().rank();
  const std::int64_t H = 6;
  for (const Lens& ls : vocab_splits(14)) {
    for (bool rms : {false, true}) {
      CAPTURE(to_string(ls));
      CAPTURE(rms);
      const std::int64_t tokens = total(ls);
      const auto fx = [](std::span<const std::int64_t> i) { return 3 * table_at(i[0], i[1], 31) + 0.1 * i[0]; };
      const auto fw = [](std::span<const std::int64_t> i) { return 1 + table_at(0, i[0], 32); };
      const auto fb = [](std::span<const std::int64_t> i) { return table_at(1, i[0], 33); };
      const auto fg = [](std::span<const std::int64_t> i) { return table_at(i[0], i[1], 34); };
      // Sequence parallel: x's tokens split, the Invariant parameters replicated.
      auto x = Tensor<T, Sharded<0>>::from_function(world(), {tokens, H}, fx, layout_mapping<Sharded<0>>(ls));
      auto w = Tensor<T, Invariant>::from_function(world(), {H}, fw);
      auto b = Tensor<T, Invariant>::from_function(world(), {H}, fb);
      x.requires_grad(), w.requires_grad(), b.requires_grad();
      const auto g = Tensor<T, Sharded<0>>::from_function(world(), {tokens, H}, fg, layout_mapping<Sharded<0>>(ls));
      Tensor<T, Sharded<0>> y = rms ? Tensor<T, Sharded<0>>(rms_norm(x, replicate(w), 1e-5))
                                    : Tensor<T, Sharded<0>>(layer_norm(x, replicate(w), replicate(b), 1e-5));
      Tensor<T, Partial> loss = sum(y * g);
      backward(loss);
      // The same on one rank's whole tensors (Invariant everywhere).
      auto xi = Tensor<T, Invariant>::from_function(world(), {tokens, H}, fx);
      auto wi = Tensor<T, Invariant>::from_function(world(), {H}, fw);
      auto bi = Tensor<T, Invariant>::from_function(world(), {H}, fb);
      xi.requires_grad(), wi.requires_grad(), bi.requires_grad();
      const auto gi = Tensor<T, Invariant>::from_function(world(), {tokens, H}, fg);
      Tensor<T, Invariant> yi =
          rms ? Tensor<T, Invariant>(rms_norm(xi, wi, 1e-5)) : Tensor<T, Invariant>(layer_norm(xi, wi, bi, 1e-5));
      Tensor<T, Invariant> lossi = sum(yi * gi);
      backward(lossi);
      const std::int64_t off = offset_of(ls, r);
      bool ys = true, dxs = true;
      for (std::int64_t t = 0; t < y.local_shape()[0]; ++t) {
        std::vector<double> row, wv, bv;
        for (std::int64_t c = 0; c < H; ++c) {
          const std::int64_t i[2] = {off + t, c}, k[1] = {c};
          row.push_back(fx(i)), wv.push_back(fw(k)), bv.push_back(fb(k));
        }
        const auto ref = reference_norm_row(row, wv, bv, 1e-5, rms);
        for (std::int64_t c = 0; c < H; ++c) {
          ys = ys && close(y(t, c), ref[static_cast<std::size_t>(c)], tol) && close(yi(off + t, c), y(t, c), tol);
          dxs = dxs && close(x.grad()(t, c), xi.grad()(off + t, c), tol);
        }
      }
      CHECK(ys);
      CHECK(dxs);
      bool dws = true;
      for (std::int64_t c = 0; c < H; ++c) {
        dws = dws && close(w.grad()(c), wi.grad()(c), tol);
        if (!rms) dws = dws && close(b.grad()(c), bi.grad()(c), tol);
      }
      CHECK(dws);
    }
  }
}

// With `residual`, the loss is sum((h + norm(h) * g) * g), h = x + x: a pre-LN block's pattern,
// where the norm's backward adds x's gradient into h's, which holds the skip path's already and
// alone (nn/norm.hpp, accumulate_product with beta 1).
TEST_CASE("layer_norm and rms_norm: finite differences agree with every gradient, alone and beside a residual") {
  const std::int64_t tokens = 3, H = 5;
  for (const auto& norm_and_residual : {std::pair{false, false}, {true, false}, {false, true}, {true, true}}) {
    const bool rms = norm_and_residual.first, residual = norm_and_residual.second;  // (CAPTURE takes no bindings)
    CAPTURE(rms);
    CAPTURE(residual);
    // The loss sum(norm(x, w, b) * g) with one element of x, w or b bumped.
    const auto loss_of = [&](int which, std::int64_t at, double bump) {
      const auto with = [&](int k, auto f) {
        return [=](std::span<const std::int64_t> i) {
          const std::int64_t flat = i.size() == 2 ? i[0] * H + i[1] : i[0];
          return f(i) + (k == which && flat == at ? bump : 0.0);
        };
      };
      const auto x = Tensor<double, Invariant>::from_function(
          world(), {tokens, H}, with(0, [](std::span<const std::int64_t> i) { return 2 * table_at(i[0], i[1], 41); }));
      const auto w = Tensor<double, Invariant>::from_function(
          world(), {H}, with(1, [](std::span<const std::int64_t> i) { return 1 + table_at(0, i[0], 42); }));
      const auto b = Tensor<double, Invariant>::from_function(
          world(), {H}, with(2, [](std::span<const std::int64_t> i) { return table_at(0, i[0], 43); }));
      const auto g = Tensor<double, Invariant>::from_function(
          world(), {tokens, H}, [](std::span<const std::int64_t> i) { return table_at(i[0], i[1], 44); });
      auto xs = x, ws = w, bs = b;
      xs.requires_grad(), ws.requires_grad(), bs.requires_grad();
      const Tensor<double, Invariant> h = residual ? Tensor<double, Invariant>(xs + xs) : xs;
      Tensor<double, Invariant> n = rms ? Tensor<double, Invariant>(rms_norm(h, ws, 1e-5))
                                        : Tensor<double, Invariant>(layer_norm(h, ws, bs, 1e-5));
      Tensor<double, Invariant> y = residual ? Tensor<double, Invariant>(h + n * g) : n;
      Tensor<double, Invariant> loss = sum(y * g);
      backward(loss);
      return std::make_tuple(loss.local()[0], xs.grad().clone(), ws.grad().clone(),
                             rms ? ws.grad().clone() : bs.grad().clone());
    };
    const auto [l0, dx, dw, db] = loss_of(-1, 0, 0.0);
    (void)l0;
    const double h = 1e-6;
    for (int which : {0, 1, 2}) {
      if (rms && which == 2) continue;
      for (std::int64_t at : {std::int64_t{0}, std::int64_t{3}, std::int64_t{4}}) {
        CAPTURE(which);
        CAPTURE(at);
        const double fd = (std::get<0>(loss_of(which, at, h)) - std::get<0>(loss_of(which, at, -h))) / (2 * h);
        const auto& grad = which == 0 ? dx : which == 1 ? dw : db;
        CHECK(close(grad.local()[static_cast<std::size_t>(at)], fd, 1e-7));
      }
    }
  }
}

TEST_CASE_TEMPLATE(
    "layer_norm and rms_norm: any subset of x, weight and bias asking for gradients gets those of all three "
    "(the fused pass without a bias gradient, db == nullptr; the weight-only and bias-only passes)",
    T, float, double) {
  const double tol = std::same_as<T, double> ? 1e-13 : 1e-6;
  const std::int64_t tokens = 4, H = 7;
  for (bool rms : {false, true}) {
    // The gradients of sum(norm(x, w, b) * g) when x, w, b ask for them as `mask`'s bits 0, 1, 2 say.
    const auto grads = [&](int mask) {
      auto x = Tensor<T, Invariant>::from_function(
          world(), {tokens, H}, [](std::span<const std::int64_t> i) { return 2 * table_at(i[0], i[1], 45); });
      auto w = Tensor<T, Invariant>::from_function(
          world(), {H}, [](std::span<const std::int64_t> i) { return 1 + table_at(0, i[0], 46); });
      auto b = Tensor<T, Invariant>::from_function(
          world(), {H}, [](std::span<const std::int64_t> i) { return table_at(0, i[0], 47); });
      const auto g = Tensor<T, Invariant>::from_function(
          world(), {tokens, H}, [](std::span<const std::int64_t> i) { return table_at(i[0], i[1], 48); });
      if (mask & 1) x.requires_grad();
      if (mask & 2) w.requires_grad();
      if (mask & 4) b.requires_grad();
      Tensor<T, Invariant> y =
          rms ? Tensor<T, Invariant>(rms_norm(x, w, 1e-5)) : Tensor<T, Invariant>(layer_norm(x, w, b, 1e-5));
      backward(Tensor<T, Invariant>(sum(y * g)));
      const auto copy = [](const Tensor<T, Invariant>& t, bool asked) {
        return asked ? std::vector<T>(t.grad().local().begin(), t.grad().local().end()) : std::vector<T>{};
      };
      return std::array<std::vector<T>, 3>{copy(x, mask & 1), copy(w, mask & 2), copy(b, !rms && (mask & 4))};
    };
    const auto all = grads(7);
    for (int mask = 1; mask < 7; ++mask) {
      if (rms && mask == 4) continue;  // rms_norm has no bias
      CAPTURE(rms);
      CAPTURE(mask);
      const auto some = grads(mask);
      for (int k = 0; k < 3; ++k) {
        CAPTURE(k);
        if (some[static_cast<std::size_t>(k)].empty()) continue;
        const auto& want = all[static_cast<std::size_t>(k)];
        const auto& got = some[static_cast<std::size_t>(k)];
        REQUIRE(got.size() == want.size());
        bool same = true;
        for (std::size_t i = 0; i < got.size(); ++i) same = same && close(double(got[i]), double(want[i]), tol);
        CHECK(same);
      }
    }
  }
}

namespace {

/// A (batch, seq, heads, dh) value of salt, the same for every layout.
double qkv_at(std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d, int salt) {
  const std::int64_t idx[4] = {b, s, h, d};
  return 2 * test::smooth_value(idx, salt);
}

/// Replicated causal attention of q (hq heads), k, v (hk heads), (b, s, heads, dh) from qkv_at, with
/// element `at` of q (which 0), k (1) or v (2) moved by `bump`: the loss sum(y * g), the three
/// gradients and y.
auto attention_with_bump(std::int64_t B, std::int64_t S, std::int64_t Hq, std::int64_t Hk, std::int64_t dh, int which,
                         std::int64_t at, double bump) {
  const auto make = [&](std::int64_t heads, int salt, int k) {
    return Tensor<double, Replicated>::from_function(world(), {B, S, heads, dh}, [=](std::span<const std::int64_t> i) {
      const std::int64_t flat = ((i[0] * S + i[1]) * heads + i[2]) * dh + i[3];
      return qkv_at(i[0], i[1], i[2], i[3], salt) + (k == which && flat == at ? bump : 0.0);
    });
  };
  auto q = make(Hq, 51, 0), k = make(Hk, 52, 1), v = make(Hk, 53, 2);
  for (auto* t : {&q, &k, &v}) t->requires_grad();
  Tensor<double, Replicated> y = causal_attention(q, k, v);
  const auto g = Tensor<double, Replicated>::from_function(
      world(), {B, S, Hq, dh}, [](std::span<const std::int64_t> i) { return qkv_at(i[0], i[1], i[2], i[3], 54); });
  Tensor<double, Replicated> loss = sum(y * g);
  backward(loss);
  return std::make_tuple(loss.local()[0], q.grad().clone(), k.grad().clone(), v.grad().clone(), y.clone());
}

/// Causal attention of the whole q (hq heads), k, v (hk heads) in plain loops:
/// out[b, i, h, :] = sum over j <= i of softmax_j(q_i . k_j / sqrt(dh)) v_j.
double reference_attention(std::int64_t b, std::int64_t i, std::int64_t h, std::int64_t d, std::int64_t dh,
                           std::int64_t group) {
  const std::int64_t kv = h / group;
  std::vector<double> s;
  double m = -INFINITY;
  for (std::int64_t j = 0; j <= i; ++j) {
    double dot = 0;
    for (std::int64_t c = 0; c < dh; ++c) dot += qkv_at(b, i, h, c, 51) * qkv_at(b, j, kv, c, 52);
    s.push_back(dot / std::sqrt(static_cast<double>(dh)));
    m = std::max(m, s.back());
  }
  double z = 0, o = 0;
  for (std::int64_t j = 0; j <= i; ++j) z += std::exp(s[static_cast<std::size_t>(j)] - m);
  for (std::int64_t j = 0; j <= i; ++j) o += std::exp(s[static_cast<std::size_t>(j)] - m) / z * qkv_at(b, j, kv, d, 53);
  return o;
}

/// The gradients of attention_with_bump's loss sum(y * g) (no bump) in plain loops, each element of
/// q, k and v: with P_i the softmax of row i over keys j <= i and dP_ij = g_i . v_j, dS_ij =
/// P_ij (dP_ij - sum_j' P_ij' dP_ij') / sqrt(dh); dq_i = sum_j dS_ij k_j, dk_j = sum_(h, i >= j) dS_ij
/// q_i, dv_j = sum_(h, i >= j) P_ij g_i. Flat (b, s, heads, dh) arrays.
std::array<std::vector<double>, 3> reference_attention_grads(std::int64_t B, std::int64_t S, std::int64_t Hq,
                                                             std::int64_t Hk, std::int64_t dh) {
  const std::int64_t group = Hq / Hk;
  std::array<std::vector<double>, 3> grads{std::vector<double>(static_cast<std::size_t>(B * S * Hq * dh), 0.0),
                                           std::vector<double>(static_cast<std::size_t>(B * S * Hk * dh), 0.0),
                                           std::vector<double>(static_cast<std::size_t>(B * S * Hk * dh), 0.0)};
  const auto at = [&](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t heads) {
    return static_cast<std::size_t>(((b * S + s) * heads + h) * dh);
  };
  const double scale = 1 / std::sqrt(static_cast<double>(dh));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < Hq; ++h)
      for (std::int64_t i = 0; i < S; ++i) {
        const std::int64_t kv = h / group;
        std::vector<double> p, dp;
        double m = -INFINITY, z = 0, r = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          double dot = 0, gv = 0;
          for (std::int64_t c = 0; c < dh; ++c) {
            dot += qkv_at(b, i, h, c, 51) * qkv_at(b, j, kv, c, 52);
            gv += qkv_at(b, i, h, c, 54) * qkv_at(b, j, kv, c, 53);
          }
          p.push_back(dot * scale);
          dp.push_back(gv);
          m = std::max(m, p.back());
        }
        for (auto& x : p) z += (x = std::exp(x - m));
        for (std::size_t j = 0; j < p.size(); ++j) r += (p[j] /= z) * dp[j];
        for (std::int64_t j = 0; j <= i; ++j) {
          const auto uj = static_cast<std::size_t>(j);
          const double ds = p[uj] * (dp[uj] - r) * scale;
          for (std::int64_t c = 0; c < dh; ++c) {
            const auto uc = static_cast<std::size_t>(c);
            grads[0][at(b, i, h, Hq) + uc] += ds * qkv_at(b, j, kv, c, 52);
            grads[1][at(b, j, kv, Hk) + uc] += ds * qkv_at(b, i, h, c, 51);
            grads[2][at(b, j, kv, Hk) + uc] += p[uj] * qkv_at(b, i, h, c, 54);
          }
        }
      }
  return grads;
}

/// Whether every element of a gradient equals the reference's to `rel` (relative, or absolute near 0).
template <class G>
bool equals_reference(const G& grad, const std::vector<double>& want, double rel) {
  const auto got = grad.local();
  bool ok = got.size() == want.size();
  for (std::size_t i = 0; ok && i < got.size(); ++i) ok = close(got[i], want[i], rel);
  return ok;
}

}  // namespace

TEST_CASE_TEMPLATE(
    "causal_attention with the heads sharded in any lengths (zeros too) and grouped KV heads equals "
    "the whole computation, forward and backward",
    T, float, double) {
  const double tol = std::same_as<T, double> ? 1e-12 : 2e-5;
  const int n = world().size();
  const std::int64_t B = 2, S = 5, dh = 3;
  auto rng = test::shared_rng(61);
  for (const Lens& kv_lens : test::lengths_cases(rng, n, {.random = 2, .max_total = 5, .even = true, .empty = false})) {
    for (std::int64_t group : {std::int64_t{1}, std::int64_t{2}}) {
      CAPTURE(to_string(kv_lens));
      CAPTURE(group);
      const std::int64_t Hk = total(kv_lens), Hq = group * Hk;
      Lens q_lens;
      for (auto l : kv_lens) q_lens.push_back(group * l);
      const auto make = [&](std::int64_t heads, int salt, const Lens& ls) {
        return Tensor<T, Sharded<2>>::from_function(
            world(), {B, S, heads, dh},
            [salt](std::span<const std::int64_t> i) { return qkv_at(i[0], i[1], i[2], i[3], salt); },
            layout_mapping<Sharded<2>>(ls));
      };
      const auto whole = [&](std::int64_t heads, int salt) {
        return Tensor<T, Invariant>::from_function(world(), {B, S, heads, dh}, [salt](std::span<const std::int64_t> i) {
          return qkv_at(i[0], i[1], i[2], i[3], salt);
        });
      };
      auto q = make(Hq, 51, q_lens), k = make(Hk, 52, kv_lens), v = make(Hk, 53, kv_lens);
      auto qi = whole(Hq, 51), ki = whole(Hk, 52), vi = whole(Hk, 53);
      for (auto* t : {&q, &k, &v}) t->requires_grad();
      for (auto* t : {&qi, &ki, &vi}) t->requires_grad();
      Tensor<T, Sharded<2>> y = causal_attention(q, k, v);
      Tensor<T, Invariant> yi = causal_attention(qi, ki, vi);
      const std::int64_t h0 = y.global_offset();
      bool fwd = true;
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t i = 0; i < S; ++i)
          for (std::int64_t h = 0; h < y.local_shape()[2]; ++h)
            for (std::int64_t d = 0; d < dh; ++d)
              fwd = fwd && close(y(b, i, h, d), reference_attention(b, i, h0 + h, d, dh, group), tol) &&
                    close(yi(b, i, h0 + h, d), y(b, i, h, d), tol);
      CHECK(fwd);
      const auto fg = [](std::span<const std::int64_t> i) { return qkv_at(i[0], i[1], i[2], i[3], 54); };
      Tensor<T, Partial> loss = sum(
          y * Tensor<T, Sharded<2>>::from_function(world(), {B, S, Hq, dh}, fg, layout_mapping<Sharded<2>>(q_lens)));
      backward(loss);
      Tensor<T, Invariant> lossi = sum(yi * Tensor<T, Invariant>::from_function(world(), {B, S, Hq, dh}, fg));
      backward(lossi);
      const auto same_grads = [&](const auto& sharded, const auto& one) {
        const std::int64_t off = sharded.global_offset();
        bool ok = true;
        for (std::int64_t b = 0; b < B; ++b)
          for (std::int64_t i = 0; i < S; ++i)
            for (std::int64_t h = 0; h < sharded.local_shape()[2]; ++h)
              for (std::int64_t d = 0; d < dh; ++d)
                ok = ok && close(sharded.grad()(b, i, h, d), one.grad()(b, i, off + h, d), tol);
        return ok;
      };
      CHECK(same_grads(q, qi));
      CHECK(same_grads(k, ki));
      CHECK(same_grads(v, vi));
    }
  }
}

TEST_CASE(
    "causal_attention: finite differences agree with the gradients; a later token never changes an earlier "
    "output; KV lengths that split a group are refused") {
  const std::int64_t B = 2, S = 4, Hq = 4, Hk = 2, dh = 2;
  const auto run = [&](int which, std::int64_t at, double bump) {
    return attention_with_bump(B, S, Hq, Hk, dh, which, at, bump);
  };
  const auto [l0, dq, dk, dv, y0] = run(-1, 0, 0.0);
  (void)l0;
  const double h = 1e-6;
  for (int which : {0, 1, 2}) {
    for (std::int64_t at : {std::int64_t{1}, std::int64_t{9}, std::int64_t{22}}) {
      CAPTURE(which);
      CAPTURE(at);
      const double fd = (std::get<0>(run(which, at, h)) - std::get<0>(run(which, at, -h))) / (2 * h);
      const auto& grad = which == 0 ? dq : which == 1 ? dk : dv;
      CHECK(close(grad.local()[static_cast<std::size_t>(at)], fd, 1e-7));
    }
  }
  // Bumping v at the last position of sequence 0 leaves every earlier output of that sequence as it was.
  const std::int64_t last_v = ((0 * S + (S - 1)) * Hk + 1) * dh;
  const auto y1 = std::get<4>(run(2, last_v, 0.5));
  bool causal = true, changed = false;
  for (std::int64_t i = 0; i < S; ++i)
    for (std::int64_t hh = 0; hh < Hq; ++hh)
      for (std::int64_t d = 0; d < dh; ++d) {
        const bool same = y1(0, i, hh, d) == y0(0, i, hh, d);
        if (i < S - 1) causal = causal && same;
        if (i == S - 1 && !same) changed = true;
        causal = causal && y1(1, i, hh, d) == y0(1, i, hh, d);  // the other sequence: untouched
      }
  CHECK(causal);
  CHECK(changed);
  // With the heads sharded, a rank must hold whole KV groups.
  const int n = world().size();
  if (n > 1) {
    Lens kv(static_cast<std::size_t>(n), 1), ql(static_cast<std::size_t>(n), 2);
    ql[0] = 1, ql[1] = 3;  // 2 query heads per KV head: rank 0 would split a group
    const auto q = Tensor<double, Sharded<2>>::zeros(world(), {1, 2, 2 * n, 2}, layout_mapping<Sharded<2>>(ql));
    const auto kk = Tensor<double, Sharded<2>>::zeros(world(), {1, 2, n, 2}, layout_mapping<Sharded<2>>(kv));
    CHECK_THROWS_WITH_AS((Tensor<double, Sharded<2>>(causal_attention(q, kk, kk))),
                         doctest::Contains("each rank holds whole KV groups"), invalid_argument);
  }
}

TEST_CASE(
    "causal_attention over several blocks of query rows (seq 150: 64 + 64 + 22) equals the definition; finite "
    "differences agree with the gradients in every block; a key changes only the outputs from its row on") {
  constexpr std::int64_t rows_per_block = detail::CausalShapes::rows_per_block;
  const std::int64_t B = 1, S = 2 * rows_per_block + 22, Hq = 2, Hk = 1, dh = 3;
  const auto run = [&](int which, std::int64_t at, double bump) {
    return attention_with_bump(B, S, Hq, Hk, dh, which, at, bump);
  };
  const auto [l0, dq, dk, dv, y0] = run(-1, 0, 0.0);
  (void)l0;
  // Every element of the three gradients (dk and dv are written by the last block first, beta 0, and
  // added to by the others) against plain loops.
  const auto want = reference_attention_grads(B, S, Hq, Hk, dh);
  CHECK(equals_reference(dq, want[0], 1e-11));
  CHECK(equals_reference(dk, want[1], 1e-11));
  CHECK(equals_reference(dv, want[2], 1e-11));
  bool fwd = true;
  for (std::int64_t i = 0; i < S; ++i)
    for (std::int64_t h = 0; h < Hq; ++h)
      for (std::int64_t d = 0; d < dh; ++d)
        fwd = fwd && close(y0(0, i, h, d), reference_attention(0, i, h, d, dh, 2), 1e-12);
  CHECK(fwd);
  const double eps = 1e-6;
  // Rows 5, 70 and 149: one in each block (the last one partial); q's elements by query head, k's and v's by key.
  for (int which : {0, 1, 2})
    for (std::int64_t row : {std::int64_t{5}, rows_per_block + 6, S - 1}) {
      const std::int64_t heads = which == 0 ? Hq : Hk, at = (row * heads + heads - 1) * dh + 1;
      CAPTURE(which);
      CAPTURE(row);
      const double fd = (std::get<0>(run(which, at, eps)) - std::get<0>(run(which, at, -eps))) / (2 * eps);
      const auto& grad = which == 0 ? dq : which == 1 ? dk : dv;
      CHECK(close(grad.local()[static_cast<std::size_t>(at)], fd, 1e-7));
    }
  // Bumping v at row 70 (the second block) leaves rows 0..69 as they were and changes 70..149.
  const std::int64_t row = rows_per_block + 6;
  const auto y1 = std::get<4>(run(2, row * Hk * dh, 0.5));
  bool before_same = true, after_changed = true;
  for (std::int64_t i = 0; i < S; ++i) {
    bool same = true;
    for (std::int64_t h = 0; h < Hq; ++h)
      for (std::int64_t d = 0; d < dh; ++d) same = same && y1(0, i, h, d) == y0(0, i, h, d);
    if (i < row) before_same = before_same && same;
    if (i >= row) after_changed = after_changed && !same;
  }
  CHECK(before_same);
  CHECK(after_changed);
}

TEST_CASE("causal_attention with q of no heads: k's and v's gradients are zeros, written though no product runs") {
  const std::int64_t B = 2, S = 70, Hk = 1, dh = 3;  // two blocks of query rows
  const auto make = [&](std::int64_t heads, int salt) {
    return Tensor<double, Replicated>::from_function(
        world(), {B, S, heads, dh},
        [salt](std::span<const std::int64_t> i) { return qkv_at(i[0], i[1], i[2], i[3], salt); });
  };
  auto q = make(0, 51), k = make(Hk, 52), v = make(Hk, 53);
  for (auto* t : {&q, &k, &v}) t->requires_grad();
  Tensor<double, Replicated> y = causal_attention(q, k, v);
  Tensor<double, Replicated> loss = sum(y);
  {  // storage of k's size full of NaN, back in the pool where the backward takes its gradients from
    auto a = Tensor<double, Replicated>::full(world(), k.shape(), NAN);
    auto b = Tensor<double, Replicated>::full(world(), k.shape(), NAN);
  }
  backward(loss);
  bool zeros = true;
  for (double x : k.grad().local()) zeros = zeros && x == 0.0;
  for (double x : v.grad().local()) zeros = zeros && x == 0.0;
  CHECK(zeros);
}

TEST_CASE(
    "causal_attention's backward from the forward's kept probabilities equals the one recomputing them (two "
    "sequences of three blocks, grouped heads); the limit on their bytes decides which") {
  constexpr std::int64_t rows_per_block = detail::CausalShapes::rows_per_block;
  const std::int64_t B = 2, S = 2 * rows_per_block + 22, Hq = 4, Hk = 2, dh = 3;
  const std::int64_t limit_before = attention_kept_probabilities_limit();
  const auto same = [](const auto& a, const auto& b) {
    const auto x = a.local(), y = b.local();
    bool ok = x.size() == y.size();
    for (std::size_t i = 0; ok && i < x.size(); ++i) ok = close(x[i], y[i], 1e-13);
    return ok;
  };
  set_attention_kept_probabilities_limit(std::int64_t(1) << 40);
  const auto kept = attention_with_bump(B, S, Hq, Hk, dh, -1, 0, 0.0);
  set_attention_kept_probabilities_limit(0);
  const auto recomputed = attention_with_bump(B, S, Hq, Hk, dh, -1, 0, 0.0);
  CHECK(close(std::get<0>(kept), std::get<0>(recomputed), 1e-13));
  CHECK(same(std::get<1>(kept), std::get<1>(recomputed)));        // dq
  CHECK(same(std::get<2>(kept), std::get<2>(recomputed)));        // dk
  CHECK(same(std::get<3>(kept), std::get<3>(recomputed)));        // dv
  CHECK(same(std::get<4>(kept), std::get<4>(recomputed)));        // y
  const auto want = reference_attention_grads(B, S, Hq, Hk, dh);  // two sequences, two groups of two heads
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(equals_reference(i == 0   ? std::get<1>(kept)
                           : i == 1 ? std::get<2>(kept)
                                    : std::get<3>(kept),
                           want[static_cast<std::size_t>(i)], 1e-11));
  }

  // What a forward leaves held for its backward: the output, and the probabilities when they fit the limit.
  const std::int64_t pairs = detail::CausalShapes{B, S, Hq, Hk, dh}.computed_pairs();
  const std::int64_t probabilities_bytes = B * Hq * pairs * std::int64_t(sizeof(double));
  const auto held_after_forward = [&](std::int64_t limit) {
    set_attention_kept_probabilities_limit(limit);
    const auto make = [&](std::int64_t heads, int salt) {
      return Tensor<double, Replicated>::from_function(
          world(), {B, S, heads, dh},
          [salt](std::span<const std::int64_t> i) { return qkv_at(i[0], i[1], i[2], i[3], salt); });
    };
    auto q = make(Hq, 51), k = make(Hk, 52), v = make(Hk, 53);
    for (auto* t : {&q, &k, &v}) t->requires_grad();
    const std::int64_t before = host::pool_stats().in_use_bytes;
    Tensor<double, Replicated> y = causal_attention(q, k, v);
    return host::pool_stats().in_use_bytes - before;
  };
  const std::int64_t at_limit = held_after_forward(probabilities_bytes),
                     below_limit = held_after_forward(probabilities_bytes - 1);
  CHECK(at_limit - below_limit >= probabilities_bytes);
  CHECK(below_limit >= B * S * Hq * dh * std::int64_t(sizeof(double)));  // the output alone
  set_attention_kept_probabilities_limit(-5);
  CHECK(attention_kept_probabilities_limit() == 0);
  set_attention_kept_probabilities_limit(limit_before);
}

TEST_CASE("split_heads and merge_heads carry the lengths in units of heads, around causal_attention") {
  const int n = world().size(), r = world().rank();
  const std::int64_t B = 2, S = 3, dh = 2;
  auto rng = test::shared_rng(71);
  for (const Lens& heads : test::lengths_cases(rng, n, {.random = 2, .max_total = 5, .even = true, .empty = false})) {
    CAPTURE(to_string(heads));
    const std::int64_t H = total(heads);
    Lens cols;
    for (auto l : heads) cols.push_back(l * dh);
    const auto f = [](int salt) {
      return [salt](std::span<const std::int64_t> i) { return 2 * table_at(i[0], i[1], salt); };
    };
    auto q =
        Tensor<double, Sharded<1>>::from_function(world(), {B * S, H * dh}, f(81), layout_mapping<Sharded<1>>(cols));
    auto k =
        Tensor<double, Sharded<1>>::from_function(world(), {B * S, H * dh}, f(82), layout_mapping<Sharded<1>>(cols));
    auto qi = Tensor<double, Invariant>::from_function(world(), {B * S, H * dh}, f(81));
    auto ki = Tensor<double, Invariant>::from_function(world(), {B * S, H * dh}, f(82));
    q.requires_grad(), qi.requires_grad();
    Tensor<double, Sharded<2>> q4 = split_heads(q, B, dh);
    CHECK(q4.shape() == Shape{B, S, H, dh});
    CHECK(q4.lengths()[static_cast<std::size_t>(r)] == heads[static_cast<std::size_t>(r)]);
    Tensor<double, Sharded<1>> y = merge_heads(causal_attention(q4, split_heads(k, B, dh), split_heads(k, B, dh)));
    Tensor<double, Invariant> yi =
        merge_heads(causal_attention(split_heads(qi, B, dh), split_heads(ki, B, dh), split_heads(ki, B, dh)));
    CHECK(y.lengths()[static_cast<std::size_t>(r)] == cols[static_cast<std::size_t>(r)]);
    const std::int64_t c0 = y.global_offset();
    bool same = true;
    for (std::int64_t t = 0; t < B * S; ++t)
      for (std::int64_t c = 0; c < y.local_shape()[1]; ++c) same = same && close(y(t, c), yi(t, c0 + c), 1e-12);
    CHECK(same);
    Tensor<double, Partial> loss = sum(y * y);
    backward(loss);
    Tensor<double, Invariant> lossi = sum(yi * yi);
    backward(lossi);
    bool grads = true;
    for (std::int64_t t = 0; t < B * S; ++t)
      for (std::int64_t c = 0; c < q.local_shape()[1]; ++c)
        grads = grads && close(q.grad()(t, c), qi.grad()(t, c0 + c), 1e-12);
    CHECK(grads);
  }
  // Lengths that cut a head in two are refused.
  if (n > 1) {
    Lens odd(static_cast<std::size_t>(n), 2);
    odd[0] = 1, odd[1] = 3;
    const auto x = Tensor<double, Sharded<1>>::zeros(world(), {2, 2 * n}, layout_mapping<Sharded<1>>(odd));
    CHECK_THROWS_WITH_AS((Tensor<double, Sharded<2>>(split_heads(x, 1, 2))),
                         doctest::Contains("each rank's length) of dh 2"), invalid_argument);
  }
}

// split_heads, merge_heads and reshape are views (expr/reshape.hpp's
// same_elements): the result shares its operand's storage, and nothing that
// writes into an operand in place (an element-wise result, a gradient sum)
// writes through a view into the tensor it views.
TEST_CASE("split_heads, merge_heads and reshape are views: no copy, and nothing written through them") {
  const int n = world().size(), r = world().rank();
  const std::int64_t B = 2, S = 3, dh = 2;
  Lens cols(static_cast<std::size_t>(n), 2 * dh);
  if (n > 1) cols[0] = 0;  // rank 0 holds no head
  const std::int64_t C = total(cols);
  const auto f = [](std::span<const std::int64_t> i) { return 0.25 * double(i[0]) - 0.5 * double(i[1]) + 1.0; };
  auto x = Tensor<double, Sharded<1>>::from_function(world(), {B * S, C}, f, layout_mapping<Sharded<1>>(cols));
  const std::vector<double> before(x.data(), x.data() + x.size());
  const auto unchanged = [&] {
    bool same = true;
    for (std::int64_t i = 0; i < x.size(); ++i) same = same && x.data()[i] == before[static_cast<std::size_t>(i)];
    return same;
  };
  Tensor<double, Sharded<2>> x4 = split_heads(x, B, dh);
  Tensor<double, Sharded<1>> x2 = merge_heads(x4);
  Tensor<double, Sharded<1>> xr = reshape(x, {B * S, C});
  CHECK(x4.data() == x.data());
  CHECK(x2.data() == x.data());
  CHECK(xr.data() == x.data());
  CHECK(x4.lengths()[static_cast<std::size_t>(r)] == cols[static_cast<std::size_t>(r)] / dh);
  // An element-wise result may take an operand's storage only where the operand holds it alone.
  Tensor<double, Sharded<1>> doubled = merge_heads(split_heads(x, B, dh)) * 2.0;
  CHECK(doubled.data() != x.data());
  CHECK(unchanged());
  // Gradients: x's from two views and from x itself, through an intermediate that is not a leaf.
  x.requires_grad();
  Tensor<double, Sharded<1>> y = x * 3.0;
  Tensor<double, Sharded<1>> y2 = merge_heads(split_heads(y, B, dh));
  Tensor<double, Partial> loss = sum(y2 * y2) + sum(reshape(y, {B * S, C})) + sum(y);
  backward(loss);
  CHECK(unchanged());
  bool grads = true;  // d/dx of 9 x^2 + 3 x + 3 x
  for (std::int64_t i = 0; i < x.size(); ++i)
    grads = grads && close(x.grad().data()[i], 18.0 * before[static_cast<std::size_t>(i)] + 6.0, 1e-12);
  CHECK(grads);
}

// The host runs the norms', cross-entropy's and the mask's row passes as Eigen
// expressions and vector-register loops (src/host_passes.cpp); the Cuda kernels
// run the element and row functions of device/norm_ops.hpp and token_ops.hpp.
// Both against each other here, so that the host tests cover the device's math
// too (zero columns and rows included; 85 columns take every path of the host's
// loops: four registers at a time, one, then single elements).
TEST_CASE_TEMPLATE("the device's element functions (norm_ops.hpp, token_ops.hpp) equal the host's row passes", T, float,
                   double) {
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-13;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-2, 2);
  const auto near = [tol](T a, T b) { return std::abs(double(a) - double(b)) <= tol * (1 + std::abs(double(b))); };
  for (const auto& shape : {std::pair<std::int64_t, std::int64_t>{5, 7}, {3, 1}, {4, 0}, {0, 6}, {9, 64}, {6, 85}}) {
    const std::int64_t rows = shape.first,
                       cols = shape.second;  // (not a structured binding: CAPTURE's lambda takes them)
    CAPTURE(rows);
    CAPTURE(cols);
    std::vector<T> x(static_cast<std::size_t>(rows * cols)), g(x.size()), w(static_cast<std::size_t>(cols)),
        b(w.size());
    for (auto* v : {&x, &g, &w, &b})
      for (auto& e : *v) e = static_cast<T>(u(rng));
    for (const bool rms : {false, true}) {
      std::vector<T> y(x.size()), mean(static_cast<std::size_t>(rows)), rstd(mean.size()), dx(x.size()), dw(w.size()),
          db(w.size()), fdx(x.size()), fdw(w.size()), fdb(w.size());
      Host::norm_forward(x.data(), w.data(), rms ? nullptr : b.data(), y.data(), mean.data(), rstd.data(), rows, cols,
                         T(1e-5), rms);
      Host::norm_backward_input(x.data(), w.data(), g.data(), mean.data(), rstd.data(), dx.data(), rows, cols, rms);
      Host::norm_backward_weight(x.data(), g.data(), mean.data(), rstd.data(), dw.data(), db.data(), rows, cols);
      Host::norm_backward_fused(x.data(), w.data(), g.data(), mean.data(), rstd.data(), fdx.data(), fdw.data(),
                                fdb.data(), rows, cols, rms);
      // Added to what dx holds (nn/norm.hpp: into the residual stream's gradient): start + dx.
      std::vector<T> start(x.size()), adx(x.size()), adw(w.size()), adb(w.size());
      for (auto& e : start) e = static_cast<T>(u(rng));
      adx = start;
      Host::norm_backward_fused(x.data(), w.data(), g.data(), mean.data(), rstd.data(), adx.data(), adw.data(),
                                adb.data(), rows, cols, rms, true);
      int bad = 0;
      for (std::int64_t r = 0; r < rows; ++r) {
        T m{}, s{};
        norms::row_stats(x.data() + r * cols, cols, T(1e-5), rms, &m, &s);
        bad += !near(mean[static_cast<std::size_t>(r)], m) + !near(rstd[static_cast<std::size_t>(r)], s);
        std::vector<T> yr(static_cast<std::size_t>(cols)), dxr(yr.size());
        norms::normalize_row(x.data() + r * cols, w.data(), rms ? nullptr : b.data(), cols, m, s, yr.data());
        norms::normalize_row_backward(x.data() + r * cols, w.data(), g.data() + r * cols, cols, m, s, rms, dxr.data());
        for (std::int64_t c = 0; c < cols; ++c) {
          const auto i = static_cast<std::size_t>(r * cols + c);
          // dx is rstd times a difference of terms of g w's size: its rounding scales with rstd
          // (1 / sqrt(eps) for one column), and the library is built with FMA contraction.
          const auto near_dx = [&](T a, T want) {
            return std::abs(double(a) - double(want)) <= tol * (1 + std::abs(double(want))) * std::max(1.0, double(s));
          };
          bad += !near(y[i], yr[static_cast<std::size_t>(c)]) + !near_dx(dx[i], dxr[static_cast<std::size_t>(c)]) +
                 !near_dx(fdx[i], dxr[static_cast<std::size_t>(c)]) +
                 !near_dx(adx[i] - start[i], dxr[static_cast<std::size_t>(c)]);
        }
      }
      std::vector<T> cw(w.size()), cb(w.size());  // weight_grad_column writes column c of them
      for (std::int64_t c = 0; c < cols; ++c) {
        norms::weight_grad_column(x.data(), g.data(), mean.data(), rstd.data(), rows, cols, c, cw.data(), cb.data());
        const auto i = static_cast<std::size_t>(c);
        bad += !near(dw[i], cw[i]) + !near(db[i], cb[i]) + !near(fdw[i], cw[i]) + !near(fdb[i], cb[i]) +
               !near(adw[i], cw[i]) + !near(adb[i], cb[i]);
      }
      CHECK(bad == 0);
    }
    // Cross-entropy's rows over this "rank's" columns, from global column `first`, and the causal mask.
    const std::int64_t first = 3;
    std::vector<std::int64_t> targets(static_cast<std::size_t>(rows));
    for (std::size_t t = 0; t < targets.size(); ++t) targets[t] = static_cast<std::int64_t>(t % 4) + first - 1;
    std::vector<T> mx(targets.size()), se(targets.size()), tl(targets.size()), scale(targets.size(), T(0.25)),
        dl(x.size());
    Host::row_max_sum_exp_and_target(x.data(), targets.data(), mx.data(), se.data(), tl.data(), rows, cols, first);
    Host::cross_entropy_backward(x.data(), targets.data(), mx.data(), se.data(), scale.data(), dl.data(), rows, cols,
                                 first);
    int bad = 0;
    for (std::int64_t t = 0; t < rows; ++t) {
      const auto i = static_cast<std::size_t>(t);
      T m{}, s{}, target{};
      tokens::row_max_sum_exp_and_target(x.data() + t * cols, cols, first, targets[i], &m, &s, &target);
      bad += (mx[i] != m) + !near(se[i], s) + (tl[i] != target);
      // The same sum from a larger max (another rank's): rescaled, it is the sum of exp(x - that max).
      const T other = m + T(1.5);
      T s_other{}, unused{};
      tokens::row_sum_exp_and_target(x.data() + t * cols, cols, first, other, targets[i], &s_other, &unused);
      T rescaled = se[i];
      Host::rescale_sum_exp(&rescaled, &mx[i], &other, 1);
      bad += !near(rescaled, s_other);
    }
    {  // A rank without columns: max -inf, sum 0, which stays 0 whatever the global max.
      T m{}, s{T(7)}, target{T(7)};
      tokens::row_max_sum_exp_and_target(x.data(), 0, first, first, &m, &s, &target);
      bad += !(std::isinf(m) && m < 0) + (s != T(0)) + (target != T(0));
      const T global = T(2);
      Host::rescale_sum_exp(&s, &m, &global, 1);
      bad += s != T(0);
      bad += tokens::rescaled_sum_exp(T(0), -std::numeric_limits<T>::infinity(), -std::numeric_limits<T>::infinity()) !=
             T(0);
    }
    for (std::int64_t i = 0; i < rows * cols; ++i)
      bad += !near(
          dl[static_cast<std::size_t>(i)],
          tokens::cross_entropy_grad_at(x.data(), targets.data(), mx.data(), se.data(), scale.data(), i, cols, first));
    {
      // Whole (seq, seq) blocks, and blocks of query rows [first, first + rows) against keys [0, cols).
      const std::int64_t seq = cols, blocks = 2;
      for (const auto [rows, width, first] : {std::array<std::int64_t, 3>{seq, seq, 0}, {3, 7, 4}, {2, 9, 5}}) {
        std::vector<T> masked(static_cast<std::size_t>(blocks * rows * width), T(1)), want = masked;
        Host::causal_mask(masked.data(), blocks, rows, width, first);
        for (std::int64_t i = 0; i < blocks * rows * width; ++i)
          tokens::causal_mask_at(want.data(), i, rows, width, first);
        bad += masked != want;
        // The definition itself: row r keeps keys 0..first + r.
        for (std::int64_t i = 0; i < blocks * rows * width; ++i)
          bad += std::isinf(double(want[static_cast<std::size_t>(i)])) != (i % width > first + (i / width) % rows);
      }
    }
    CHECK(bad == 0);
  }
}

// In float the host's softmax and cross-entropy rows take their exps from
// src/host_passes.cpp's exp of vector registers (double stays on Eigen's): each
// probability within 1e-5 relative of the one in double, -inf (the causal mask)
// exactly 0 (with Eigen's float exp, which these rows ran before, the masked
// weights were about 4e-40: its exp(-inf) is 2.9e-39), a NaN kept, and exp of
// arguments below -87 exactly 0 in every column. Lengths take the loop's pairs
// of registers and its last columns, a pack at a time, at AVX2's and AVX-512's widths.
TEST_CASE(
    "float softmax and cross-entropy rows: probabilities within 1e-5 of double, masked ones exactly 0, NaN kept") {
  std::mt19937_64 rng(11);
  int bad = 0, compared = 0;
  for (const std::int64_t cols : {1, 7, 16, 17, 40, 85, 256}) {
    for (const double spread : {1.0, 8.0, 60.0, 200.0}) {
      std::uniform_real_distribution<double> u(-spread, spread);
      const std::int64_t rows = 5;
      std::vector<float> x(static_cast<std::size_t>(rows * cols));
      for (auto& e : x) e = static_cast<float>(u(rng));
      for (std::int64_t r = 1; r < rows; ++r)  // row r masks its last r columns (none of a single column)
        for (std::int64_t c = std::max<std::int64_t>(1, cols - r); c < cols; ++c)
          x[static_cast<std::size_t>(r * cols + c)] = -std::numeric_limits<float>::infinity();
      std::vector<float> p = x, dl(x.size()), mx(static_cast<std::size_t>(rows)), se(mx.size()), tl(mx.size());
      std::vector<float> scale(mx.size(), 1.0f);
      std::vector<std::int64_t> targets(mx.size(), 0);
      Host::softmax_rows(p.data(), rows, cols);
      Host::row_max_sum_exp_and_target(x.data(), targets.data(), mx.data(), se.data(), tl.data(), rows, cols,
                                       std::int64_t(0));
      Host::cross_entropy_backward(x.data(), targets.data(), mx.data(), se.data(), scale.data(), dl.data(), rows, cols,
                                   std::int64_t(0));
      for (std::int64_t r = 0; r < rows; ++r) {
        double m = -std::numeric_limits<double>::infinity(), sum = 0;
        for (std::int64_t c = 0; c < cols; ++c) m = std::max(m, double(x[static_cast<std::size_t>(r * cols + c)]));
        for (std::int64_t c = 0; c < cols; ++c) sum += std::exp(double(x[static_cast<std::size_t>(r * cols + c)]) - m);
        bad += std::abs(se[static_cast<std::size_t>(r)] - sum) > 1e-5 * sum;
        for (std::int64_t c = 0; c < cols; ++c) {
          const auto i = static_cast<std::size_t>(r * cols + c);
          const double want = std::exp(double(x[i]) - m) / sum;
          // The cross-entropy's gradient with scale 1 is the probability less 1 at the target (column 0).
          const double got_dl = double(dl[i]) + (c == 0 ? 1.0 : 0.0);
          if (std::isinf(x[i])) {
            bad += p[i] != 0.0f || dl[i] != 0.0f;
          } else if (want >= 1e-30) {
            bad += std::abs(p[i] - want) > 1e-5 * want;
            bad += std::abs(got_dl - want) > 1e-5 * want + (c == 0 ? 1e-7 : 0.0);  // 1 - p rounds at 2^-24
            ++compared;
          }
          if (double(x[i]) - m < -87.0) bad += p[i] != 0.0f;
        }
      }
    }
  }
  CHECK(bad == 0);
  CHECK(compared > 1000);
  // 72 columns: 64 in pairs of registers at AVX2's and AVX-512's widths, then 8 past them.
  std::vector<float> with_nan(72, 1.0f);
  with_nan[69] = std::numeric_limits<float>::quiet_NaN();  // in the last columns
  std::vector<float> nan_in_pack = with_nan;
  std::swap(nan_in_pack[69], nan_in_pack[3]);
  Host::softmax_rows(with_nan.data(), 1, 72);
  Host::softmax_rows(nan_in_pack.data(), 1, 72);
  CHECK(std::isnan(with_nan[0]));
  CHECK(std::isnan(nan_in_pack[0]));
  CHECK(std::isnan(nan_in_pack[3]));
}

}  // namespace shardex_test_layers
