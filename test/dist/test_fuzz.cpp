// SPDX-License-Identifier: MIT
// The fuzz suite: random transitions (layout pairs, dims, shapes with empty
// dims, lengths with zeros, strategies), each checked against the logical
// value recomputed from the input's and the output's local parts with raw MPI
// calls (MPI_Bcast, MPI_Allreduce, MPI_Allgatherv), not with shardex: a
// transition never changes the logical value, and a Replicated or Invariant
// result must hold all of it on every rank. A fixed seed in CI;
// SHARDEX_FUZZ_CASES sets the count (default 10,000 per world size). Each
// case runs eagerly or lazily, and half of them also run backward, checking
// the gradient the same way. A second test perturbs the expected values
// (forward and gradient) and requires the checker to see it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <shardex.hpp>

#include "support/dist.hpp"

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_fuzz {

using namespace shardex;

namespace {

using Lens = std::vector<std::int64_t>;

template <int D>
layout_mapping<Sharded<D>> sh(const Lens& ls) {
  return layout_mapping<Sharded<D>>(ls);
}

/// The logical value of `t`, recomputed from its local parts with raw MPI.
template <class L>
std::vector<double> logical(const Tensor<double, L>& t) {
  const MPI_Comm c = t.comm().native();
  const Shape& g = t.shape();
  std::vector<double> out(static_cast<std::size_t>(g.numel()), 0.0);
  const int n = t.comm().size();
  if constexpr (std::same_as<L, Partial>) {
    MPI_Allreduce(t.data(), out.data(), static_cast<int>(out.size()), MPI_DOUBLE, MPI_SUM, c);
  } else if constexpr (is_sharded_v<L>) {
    const int d = L::dim;
    const std::int64_t outer = g.outer(d), inner = g.inner(d);
    const auto ls = t.lengths();
    std::vector<int> counts, displs;
    int total = 0;
    for (int r = 0; r < n; ++r) {
      counts.push_back(static_cast<int>(outer * ls[static_cast<std::size_t>(r)] * inner));
      displs.push_back(total);
      total += counts.back();
    }
    std::vector<double> stage(static_cast<std::size_t>(std::max(total, 1)));
    MPI_Allgatherv(t.data(), static_cast<int>(t.size()), MPI_DOUBLE, stage.data(), counts.data(), displs.data(),
                   MPI_DOUBLE, c);
    std::int64_t off = 0;
    for (int r = 0; r < n; ++r) {
      const std::int64_t len = ls[static_cast<std::size_t>(r)];
      for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t k = 0; k < len * inner; ++k)
          out[static_cast<std::size_t>((o * g[d] + off) * inner + k)] =
              stage[static_cast<std::size_t>(displs[static_cast<std::size_t>(r)] + o * len * inner + k)];
      off += len;
    }
  } else {  // Invariant, Replicated: rank 0's copy
    if (t.comm().rank() == 0) std::copy(t.data(), t.data() + t.size(), out.begin());
    MPI_Bcast(out.data(), static_cast<int>(out.size()), MPI_DOUBLE, 0, c);
  }
  return out;
}

/// Elements of `y` that differ from `want`, summed over ranks: its logical
/// value, and for I and R every rank's own copy.
template <class L>
std::int64_t mismatches(const std::vector<double>& want, const Tensor<double, L>& y) {
  std::int64_t bad = 0;
  const auto got = logical(y);
  if (got.size() != want.size())
    bad += 1 + static_cast<std::int64_t>(want.size());
  else
    for (std::size_t i = 0; i < want.size(); ++i) bad += got[i] != want[i];
  if constexpr (std::same_as<L, Invariant> || std::same_as<L, Replicated>)
    if (static_cast<std::size_t>(y.size()) == want.size())
      for (std::size_t i = 0; i < want.size(); ++i) bad += y.data()[i] != want[i];
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT64_T, MPI_SUM, y.comm().native());
  return bad;
}

/// A multiple of 1/8 in [-64, 64] from a hash: sums over ranks stay exact.
double value(std::uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return static_cast<double>(static_cast<std::int64_t>(h % 1025) - 512) / 8.0;
}

template <class L>
Tensor<double, L> random_input(const Shape& g, layout_mapping<L> m, std::uint64_t seed) {
  const auto& comm = test::world();
  // A Partial input differs by rank (its parts are summed); the others are the same logical tensor everywhere.
  const std::uint64_t salt =
      std::same_as<L, Partial> ? static_cast<std::uint64_t>(comm.rank() + 1) * 0x9e3779b97f4a7c15ull : 0;
  return Tensor<double, L>::from_function(
      comm, g,
      [&](std::span<const std::int64_t> idx) {
        std::uint64_t h = seed ^ salt;
        for (auto i : idx) h = h * 1000003ull + static_cast<std::uint64_t>(i) + 1;
        return value(h);
      },
      std::move(m));
}

struct Fuzz {
  std::mt19937_64 rng;
  bool perturb = false;  // the self-test: expected values off by 1/8 in one element
  std::int64_t cases = 0, backward_cases = 0, checked_elements = 0, failures = 0, perturbed_checks = 0;

  std::int64_t extent() { return std::uniform_int_distribution<std::int64_t>(0, 4)(rng); }
  Lens lengths(std::int64_t total) { return test::random_lengths(rng, test::world().size(), total); }
  template <class T>
  T pick(std::initializer_list<T> xs) {
    return *(xs.begin() + std::uniform_int_distribution<std::size_t>(0, xs.size() - 1)(rng));
  }

  /// One transition From -> To of a random tensor, checked; run eagerly
  /// (apply_transition) or lazily (a redistribute expression, evaluated). Half the
  /// cases also run backward: x's gradient, from loss = sum(y * w), must hold
  /// the logical value of w read in the dual layout (a transition is the
  /// identity on logical values, so its adjoint is too), recomputed with raw MPI.
  template <class From, class To>
  void run(const Shape& g, layout_mapping<From> from_map, layout_mapping<To> to_map, Strategy s,
           const std::string& what) {
    auto x = random_input<From>(g, std::move(from_map), rng());
    const bool lazy = rng() % 2 == 0, grad = rng() % 2 == 0;
    if (grad) x.requires_grad();
    const std::string how = what + (lazy ? " (lazy" : " (eager") + (grad ? ", backward)" : ")");
    auto want = logical(x);
    perturb_one(want);
    Tensor<double, To> y;
    if (lazy)
      y = redistribute<To>(x, to_map, s);
    else
      y = apply_transition<To>(x, to_map, s);
    check(want, mismatches(want, y), g, how + " forward");
    if (grad) {
      const auto w = random_input<To>(g, to_map, rng());
      backward(eval(sum(y * w)));
      auto gwant = logical(w.template reinterpret_as<dual_t<To>>(dual_mapping<To>(to_map)));
      perturb_one(gwant);
      check(gwant, x.has_grad() ? mismatches(gwant, x.grad()) : 1 + static_cast<std::int64_t>(gwant.size()), g,
            how + " gradient");
      ++backward_cases;
    }
    ++cases;
  }

  void perturb_one(std::vector<double>& want) {
    if (perturb && !want.empty()) want[static_cast<std::size_t>(rng() % want.size())] += 0.125;
  }

  void check(const std::vector<double>& want, std::int64_t bad, const Shape& g, const std::string& what) {
    checked_elements += static_cast<std::int64_t>(want.size());
    if (perturb) {
      if (!want.empty()) {
        CHECK_MESSAGE(bad > 0, "the checker missed a perturbed value: " << what);
        failures += bad == 0;
        ++perturbed_checks;
      }
    } else if (bad != 0) {
      ++failures;
      if (failures <= 5) FAIL_CHECK(what << ": " << bad << " elements differ (global shape " << g.str() << ")");
    }
  }

  void one() {
    const Strategy gather = pick({Strategy::padded, Strategy::per_root, Strategy::v_collective, Strategy::automatic});
    const Strategy a2a = pick({Strategy::padded, Strategy::send_recv, Strategy::v_collective, Strategy::automatic});
    const Strategy reshard = pick({Strategy::send_recv, Strategy::v_collective, Strategy::automatic});
    const int ndim = static_cast<int>(std::uniform_int_distribution<int>(2, 3)(rng));
    std::vector<std::int64_t> ex(static_cast<std::size_t>(ndim));
    for (auto& e : ex) e = extent();
    const Lens a = lengths(std::uniform_int_distribution<std::int64_t>(0, 9)(rng));
    const Lens b = lengths(std::uniform_int_distribution<std::int64_t>(0, 9)(rng));
    const auto shape_with = [&](int d, const Lens& ls, int d2 = -1, const Lens* ls2 = nullptr) {
      std::vector<std::int64_t> e = ex;
      e[static_cast<std::size_t>(d)] = std::accumulate(ls.begin(), ls.end(), std::int64_t(0));
      if (ls2) e[static_cast<std::size_t>(d2)] = std::accumulate(ls2->begin(), ls2->end(), std::int64_t(0));
      return Shape{std::span<const std::int64_t>(e)};
    };
    const std::string sa = "lengths " + to_string(std::span<const std::int64_t>(a));
    switch (std::uniform_int_distribution<int>(0, 10)(rng)) {
      case 0:
        run<Sharded<0>, Replicated>(shape_with(0, a), sh<0>(a), {}, gather, "all_gather S(0) -> R, " + sa);
        break;
      case 1:
        run<Sharded<1>, Invariant>(shape_with(1, a), sh<1>(a), {}, gather, "all_gather S(1) -> I, " + sa);
        break;
      case 2:
        run<Partial, Sharded<0>>(shape_with(0, a), {}, sh<0>(a), gather, "reduce_scatter P -> S(0), " + sa);
        break;
      case 3:
        run<Partial, Sharded<1>>(shape_with(1, a), {}, sh<1>(a), gather, "reduce_scatter P -> S(1), " + sa);
        break;
      case 4:
        run<Partial, Replicated>(Shape{std::span<const std::int64_t>(ex)}, {}, {}, Strategy::automatic,
                                 "all_reduce P -> R");
        break;
      case 5:
        run<Sharded<0>, Sharded<1>>(shape_with(0, a, 1, &b), sh<0>(a), sh<1>(b), a2a, "all_to_all S(0) -> S(1), " + sa);
        break;
      case 6:
        run<Sharded<1>, Sharded<0>>(shape_with(1, a, 0, &b), sh<1>(a), sh<0>(b), a2a, "all_to_all S(1) -> S(0), " + sa);
        break;
      case 7: {
        Lens c = lengths(std::accumulate(a.begin(), a.end(), std::int64_t(0)));
        run<Sharded<1>, Sharded<1>>(shape_with(1, a), sh<1>(a), sh<1>(c), reshard, "reshard S(1), " + sa);
        break;
      }
      case 8:
        run<Replicated, Sharded<1>>(shape_with(1, a), {}, sh<1>(a), Strategy::automatic,
                                    "dynamic_slice R -> S(1), " + sa);
        break;
      case 9:
        run<Invariant, Replicated>(Shape{std::span<const std::int64_t>(ex)}, {}, {}, Strategy::automatic,
                                   "replicate I -> R");
        break;
      default:
        if (ndim == 3)
          run<Sharded<2>, Sharded<0>>(shape_with(2, a, 0, &b), sh<2>(a), sh<0>(b), a2a,
                                      "all_to_all S(2) -> S(0), " + sa);
        else
          run<Sharded<0>, Sharded<0>>(shape_with(0, a), sh<0>(a),
                                      sh<0>(lengths(std::accumulate(a.begin(), a.end(), std::int64_t(0)))), reshard,
                                      "reshard S(0), " + sa);
    }
  }
};

/// This process's resident set in KiB (Linux's /proc), or -1 where unknown.
std::int64_t resident_kib() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  std::int64_t kib = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
  std::fclose(f);
  return kib;
}

std::int64_t fuzz_cases() {
  if (const char* v = std::getenv("SHARDEX_FUZZ_CASES")) return std::max<std::int64_t>(1, std::atoll(v));
  return 10000;
}

}  // namespace

TEST_CASE("fuzz: random transitions keep the logical value recomputed with raw MPI") {
  Fuzz f{test::shared_rng(20261130)};
  const std::int64_t n = fuzz_cases();
  // Memory must not grow with the number of cases (a leaked buffer or graph
  // node per transition would): the resident set after a warm-up against the end.
  const std::int64_t warm_up = std::min<std::int64_t>(n / 10, 1000);
  std::int64_t rss_after_warm_up = -1;
  for (std::int64_t i = 0; i < n && f.failures < 20; ++i) {
    if (i == warm_up) rss_after_warm_up = resident_kib();
    f.one();
  }
  // ASan keeps freed memory in quarantine, so the resident set grows anyway;
  // its leak checker reports at exit what this check would.
  if (test::sanitized) rss_after_warm_up = -1;
  const std::int64_t growth = rss_after_warm_up < 0 ? 0 : resident_kib() - rss_after_warm_up;
  CHECK_MESSAGE(growth < 2048, "the resident set grew by " << growth << " KiB over " << n - warm_up << " cases");
  MESSAGE(f.cases << " transitions (" << f.backward_cases << " also backward), " << f.checked_elements
                  << " elements checked");
  CHECK(f.cases == n);
  CHECK(f.backward_cases > n / 3);  // about half run backward
  CHECK(f.failures == 0);
}

TEST_CASE("fuzz: the checker reports a perturbed expected value (a self-test)") {
  Fuzz f{test::shared_rng(7)};
  f.perturb = true;
  for (int i = 0; i < 300; ++i) f.one();
  CHECK(f.cases == 300);
  CHECK(f.backward_cases > 100);
  CHECK(f.perturbed_checks > 300);  // forward and gradient checks both perturbed
  CHECK(f.failures == 0);
}

}  // namespace shardex_test_fuzz
