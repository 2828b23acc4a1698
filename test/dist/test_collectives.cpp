// SPDX-License-Identifier: MIT
// Forward results of every transition of the table (transition/table.hpp),
// every strategy, against a reference each rank computes alone, without
// communication: every rank knows the whole global tensor (a hash of the
// global index and a seed shared by all ranks) and derives the local part it
// must hold by plain index arithmetic (the slice of the concatenation, the sum
// over ranks of the partial parts, ...). Every element is compared exactly:
// the values are multiples of 1/8 below 128 in magnitude, so the sums of a few
// of them are exact in float as in double.
//
// The entries: all_gather (into R and I), reduce_scatter, eager::all_reduce (R and
// I), dynamic_slice (from R and I), zero_pad, eager::all_to_all (every pair C != S
// of dims 0-2, and 4-d), replicate, reshard (S(d)[a] -> S(d)[b]) and the
// identities; each with every strategy it has, and the ones it has not refused.
//
// Lengths are random and uneven with zeros, plus forced cases: some rank holds
// nothing, all ranks but one hold nothing, even lengths, all hold nothing.
// Static lengths (`Sharded<D, lengths<...>>`) run at the world size that
// matches them. Each layout type is a set of template instances to compile, so
// the static cases are chosen, not multiplied out.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <shardex.hpp>

#include "support/dist.hpp"

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_collectives {

using namespace shardex;

namespace {

using Lens = std::vector<std::int64_t>;
using Index = std::span<const std::int64_t>;

constexpr Strategy gather_strategies[] = {Strategy::padded, Strategy::per_root, Strategy::v_collective,
                                          Strategy::automatic};
constexpr Strategy a2a_strategies[] = {Strategy::padded, Strategy::v_collective, Strategy::send_recv,
                                       Strategy::automatic};

std::uint64_t mix(std::uint64_t z) {  // splitmix64's finalizer
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// Element `idx` of the global test tensor number `seed`: a multiple of 1/8 in
/// [-125, 125], so that sums over up to a few dozen ranks are exact in float.
double value(std::uint64_t seed, Index idx) {
  std::uint64_t h = mix(seed);
  for (auto i : idx) h = mix(h ^ static_cast<std::uint64_t>(i));
  return static_cast<double>(static_cast<std::int64_t>(h % 2001) - 1000) / 8.0;
}

/// The local part of rank r of a Partial test tensor.
double partial_value(std::uint64_t seed, int r, Index idx) {
  return value(seed + 1000003ull * static_cast<std::uint64_t>(r + 1), idx);
}

std::int64_t sum_of(const Lens& ls) {
  std::int64_t s = 0;
  for (auto l : ls) s += l;
  return s;
}

std::string str(const Lens& ls) { return to_string(std::span<const std::int64_t>(ls)); }

/// Which part of a global tensor a rank holds: the whole (dim < 0) or
/// lens[rank] indices along `dim`, from the sum of the lengths before it.
struct Part {
  Shape global;
  int dim = -1;
  Lens lens;
};

/// Compares every local element (`data`, local shape `local_got`) with
/// `expected(global index)`, the shapes with the ones `p` implies. No
/// communication. Not inlined, and one instance per element type, to keep
/// the compiler's work bounded.
template <class T>
[[gnu::noinline]] void check_values(const Shape& global_got, const Shape& local_got, int me, const T* data,
                                    const Part& p, const std::function<double(Index)>& expected,
                                    const std::string& what) {
  INFO(what);
  Shape local = p.global;
  std::int64_t off = 0;
  if (p.dim >= 0) {
    local = p.global.with(p.dim, p.lens[static_cast<std::size_t>(me)]);
    for (int r = 0; r < me; ++r) off += p.lens[static_cast<std::size_t>(r)];
  }
  CHECK_MESSAGE(global_got == p.global, "global shape " << global_got.str() << ", expected " << p.global.str());
  CHECK_MESSAGE(local_got == local, "local shape " << local_got.str() << ", expected " << local.str());
  if (!(local_got == local)) return;
  std::vector<std::int64_t> idx(static_cast<std::size_t>(local.rank()), 0);
  std::int64_t bad = 0;
  std::string first;
  for (std::int64_t i = 0; i < local.numel(); ++i) {
    std::int64_t rem = i;
    for (int d = local.rank() - 1; d >= 0; --d) {
      idx[static_cast<std::size_t>(d)] = rem % local[d];
      rem /= local[d];
    }
    if (p.dim >= 0) idx[static_cast<std::size_t>(p.dim)] += off;
    const T want = static_cast<T>(expected(Index(idx)));
    const T got = data[i];
    if (got != want) {
      if (bad++ == 0) {
        std::ostringstream os;
        os << "global index " << str(idx) << ": got " << got << ", expected " << want;
        first = os.str();
      }
    }
  }
  CHECK_MESSAGE(bad == 0, bad << " of " << local.numel() << " elements differ; first: " << first);
}

template <class T, class L>
void check_part(const Tensor<T, L>& t, const Part& p, const std::function<double(Index)>& expected,
                const std::string& what) {
  check_values<T>(t.shape(), t.local_shape(), t.rank(), t.data(), p, expected, what);
}

template <ShardedLayout L>
layout_mapping<L> mapping_of(const Lens& ls) {
  if constexpr (L::has_static_lengths)
    return {};
  else
    return layout_mapping<L>(ls);
}

template <class L>
Lens lens_of(const layout_mapping<L>& m) {
  return Lens(m.lengths().begin(), m.lengths().end());
}

// The public calls, with static or run-time lengths as the layout wants.
template <ShardedLayout To, class X>
auto call_reduce_scatter(const X& x, const Lens& ls, Strategy s) {
  if constexpr (To::has_static_lengths)
    return eager::reduce_scatter<To>(x, s);
  else
    return eager::reduce_scatter<To>(x, ls, s);
}
template <ShardedLayout To, class X>
auto call_dynamic_slice(const X& x, const Lens& ls) {
  if constexpr (To::has_static_lengths)
    return eager::dynamic_slice<To>(x);
  else
    return eager::dynamic_slice<To>(x, ls);
}
template <ShardedLayout To, class X>
auto call_all_to_all(const X& x, const Lens& ls, Strategy s) {
  if constexpr (To::has_static_lengths)
    return eager::all_to_all<To>(x, s);
  else
    return eager::all_to_all<To>(x, ls, s);
}

/// `lengths<...>` in reverse order.
template <class Ls, class Seq = std::make_index_sequence<Ls::count>>
struct reversed;
template <class Ls, std::size_t... I>
struct reversed<Ls, std::index_sequence<I...>> {
  using type = lengths<Ls::values[Ls::count - 1 - I]...>;
};

template <class F>
void for_each_type(F&& f) {
  f(std::type_identity<float>{});
  f(std::type_identity<double>{});
}

template <class F>
void for_each_dim(F&& f) {
  f(std::integral_constant<int, 0>{});
  f(std::integral_constant<int, 1>{});
  f(std::integral_constant<int, 2>{});
}

/// Static lengths lists for world sizes 1..4 (none beyond).
template <class F>
void for_each_static_lengths(int n, F&& f) {
  using std::type_identity;
  switch (n) {
    case 1:
      f(type_identity<lengths<6>>{});
      break;
    case 2:
      f(type_identity<lengths<0, 5>>{});
      break;
    case 3:
      f(type_identity<lengths<2, 0, 3>>{});
      break;
    case 4:
      f(type_identity<lengths<1, 2, 3, 4>>{});
      break;  // and the reference's lists, in their own test case
    default:
      break;
  }
}

/// The lengths cases of one configuration: three random (zeros likely), one with a
/// forced zero, one where all ranks but one hold nothing, even lengths, and all zero.
std::vector<Lens> lens_cases(std::mt19937_64& rng, int n) {
  return test::lengths_cases(rng, n, {.random = 3, .max_total = 6 * n + 6, .even = true, .empty = true});
}

/// A random global shape of `ndim` dims with extent `extent` along `dim`.
Shape random_shape(std::mt19937_64& rng, int ndim, int dim, std::int64_t extent, std::int64_t max_extent = 10) {
  std::uniform_int_distribution<std::int64_t> e(1, max_extent);
  std::vector<std::int64_t> ex(static_cast<std::size_t>(ndim));
  for (auto& v : ex) v = e(rng);
  ex[static_cast<std::size_t>(dim)] = extent;
  return Shape(std::span<const std::int64_t>(ex));
}

std::string context(const char* op, const std::string& layout, const Shape& g, const Lens& ls, Strategy s,
                    const char* dtype) {
  return std::string(op) + " " + dtype + " " + layout + " global " + g.str() + " lengths " + str(ls) + " strategy " +
         strategy_name(s);
}

// ---- one configuration of each transition ------------------------------------

/// S(D) -> R and S(D) -> I.
template <class T, class S>
[[gnu::noinline]] void check_all_gather(const Shape& g, const Lens& ls, Strategy s, std::uint64_t seed) {
  constexpr int D = S::dim;
  const auto& comm = test::world();
  INFO(context("all_gather", layout_name<S>(), g, ls, s, dtype_name<T>()));
  const auto f = [seed](Index i) { return value(seed, i); };
  auto x = Tensor<T, S>::from_function(comm, g, f, mapping_of<S>(ls));
  check_part(x, {g, D, ls}, f, "input (from_function)");
  auto r = eager::all_gather(x, s);
  static_assert(std::same_as<decltype(r), Tensor<T, Replicated>>);
  check_part(r, {g, -1, {}}, f, "all_gather -> R");
  auto i = eager::all_gather<Invariant>(x, s);
  static_assert(std::same_as<decltype(i), Tensor<T, Invariant>>);
  check_part(i, {g, -1, {}}, f, "all_gather -> I");
  check_part(x, {g, D, ls}, f, "input after the gathers (unchanged)");
}

/// P -> S(D).
template <class T, class S>
[[gnu::noinline]] void check_reduce_scatter(const Shape& g, const Lens& ls, Strategy s, std::uint64_t seed) {
  constexpr int D = S::dim;
  const auto& comm = test::world();
  const int n = comm.size(), me = comm.rank();
  INFO(context("reduce_scatter", layout_name<S>(), g, ls, s, dtype_name<T>()));
  const auto mine = [seed, me](Index i) { return partial_value(seed, me, i); };
  const auto total = [seed, n](Index i) {
    double acc = 0;
    for (int r = 0; r < n; ++r) acc += partial_value(seed, r, i);
    return acc;
  };
  auto x = Tensor<T, Partial>::from_function(comm, g, mine);
  auto y = call_reduce_scatter<S>(x, ls, s);
  static_assert(std::same_as<decltype(y), Tensor<T, S>>);
  check_part(y, {g, D, ls}, total, "reduce_scatter -> S");
  CHECK(lens_of(y.mapping()) == ls);
  check_part(x, {g, -1, {}}, mine, "input after eager::reduce_scatter (unchanged)");
}

/// R -> S(D), I -> S(D) (dynamic_slice) and S(D) -> P (zero_pad).
template <class T, class S>
[[gnu::noinline]] void check_slice_and_pad(const Shape& g, const Lens& ls, std::uint64_t seed) {
  constexpr int D = S::dim;
  const auto& comm = test::world();
  const int me = comm.rank();
  INFO(context("dynamic_slice/zero_pad", layout_name<S>(), g, ls, Strategy::automatic, dtype_name<T>()));
  const auto f = [seed](Index i) { return value(seed, i); };
  auto r = Tensor<T, Replicated>::from_function(comm, g, f);
  auto a = call_dynamic_slice<S>(r, ls);
  static_assert(std::same_as<decltype(a), Tensor<T, S>>);
  check_part(a, {g, D, ls}, f, "dynamic_slice R -> S");
  auto inv = Tensor<T, Invariant>::from_function(comm, g, f);
  auto b = call_dynamic_slice<S>(inv, ls);
  static_assert(std::same_as<decltype(b), Tensor<T, S>>);
  check_part(b, {g, D, ls}, f, "dynamic_slice I -> S");
  check_part(r, {g, -1, {}}, f, "R input after the slice (unchanged)");

  std::int64_t lo = 0;
  for (int q = 0; q < me; ++q) lo += ls[static_cast<std::size_t>(q)];
  const std::int64_t hi = lo + ls[static_cast<std::size_t>(me)];
  auto x = Tensor<T, S>::from_function(comm, g, f, mapping_of<S>(ls));
  auto p = eager::zero_pad(x);
  static_assert(std::same_as<decltype(p), Tensor<T, Partial>>);
  check_part(
      p, {g, -1, {}}, [&](Index i) { return i[D] >= lo && i[D] < hi ? f(i) : 0.0; }, "zero_pad S -> P");
}

/// S(C) -> S(S), C != S.
template <class T, class SC, class SS>
[[gnu::noinline]] void check_all_to_all(const Shape& g, const Lens& lc, const Lens& ls, Strategy s,
                                        std::uint64_t seed) {
  const auto& comm = test::world();
  INFO(context("all_to_all", layout_name<SC>() + " -> " + layout_name<SS>() + " to lengths " + str(ls), g, lc, s,
               dtype_name<T>()));
  const auto f = [seed](Index i) { return value(seed, i); };
  auto x = Tensor<T, SC>::from_function(comm, g, f, mapping_of<SC>(lc));
  check_part(x, {g, SC::dim, lc}, f, "input (from_function)");
  auto y = call_all_to_all<SS>(x, ls, s);
  static_assert(std::same_as<decltype(y), Tensor<T, SS>>);
  check_part(y, {g, SS::dim, ls}, f, "all_to_all");
  CHECK(lens_of(y.mapping()) == ls);
  check_part(x, {g, SC::dim, lc}, f, "input after eager::all_to_all (unchanged)");
}

/// Runs `body(T, D, ndim)` for each type, sharded dim 0..2 and tensor rank
/// D+1..3.
template <class F>
void for_each_config(F&& body) {
  for_each_type([&](auto tc) {
    for_each_dim([&](auto dc) {
      for (int ndim = dc.value + 1; ndim <= 3; ++ndim) body(tc, dc, ndim);
    });
  });
}

}  // namespace

TEST_CASE(
    "all_gather into R and I: every strategy, dynamic lengths with zeros, sharded dims 0-2, 1-3 dims, float and double") {
  const int n = test::world().size();
  auto rng = test::shared_rng(101);
  int cases = 0;
  for_each_config([&](auto tc, auto dc, int ndim) {
    using T = typename decltype(tc)::type;
    constexpr int D = decltype(dc)::value;
    for (const Lens& ls : lens_cases(rng, n)) {
      const Shape g = random_shape(rng, ndim, D, sum_of(ls));
      for (Strategy s : gather_strategies) {
        check_all_gather<T, Sharded<D>>(g, ls, s, rng());
        ++cases;
      }
    }
  });
  CHECK(cases >= 2 * 6 * 2 * 4);
}

TEST_CASE("reduce_scatter: every strategy, dynamic lengths with zeros, sharded dims 0-2, 1-3 dims, float and double") {
  const int n = test::world().size();
  auto rng = test::shared_rng(202);
  int cases = 0;
  for_each_config([&](auto tc, auto dc, int ndim) {
    using T = typename decltype(tc)::type;
    constexpr int D = decltype(dc)::value;
    for (const Lens& ls : lens_cases(rng, n)) {
      const Shape g = random_shape(rng, ndim, D, sum_of(ls));
      for (Strategy s : gather_strategies) {
        check_reduce_scatter<T, Sharded<D>>(g, ls, s, rng());
        ++cases;
      }
    }
  });
  CHECK(cases >= 2 * 6 * 2 * 4);
}

TEST_CASE("all_reduce into R and I, of 0-d to 3-d tensors, float and double; in place only into a value given up") {
  const auto& comm = test::world();
  const int n = comm.size(), me = comm.rank();
  auto rng = test::shared_rng(303);
  std::uniform_int_distribution<std::int64_t> e(0, 9);
  for_each_type([&](auto tc) {
    using T = typename decltype(tc)::type;
    for (int ndim = 0; ndim <= 3; ++ndim)
      for (int rep = 0; rep < 2; ++rep) {
        std::vector<std::int64_t> ex(static_cast<std::size_t>(ndim));
        for (auto& v : ex) v = e(rng) + (rep == 0 ? 1 : 0);  // the second round may hold an empty dim
        const Shape g{std::span<const std::int64_t>(ex)};
        const std::uint64_t seed = rng();
        INFO("all_reduce ", dtype_name<T>(), " global ", g.str());
        const auto mine = [seed, me](Index i) { return partial_value(seed, me, i); };
        const auto total = [seed, n](Index i) {
          double acc = 0;
          for (int r = 0; r < n; ++r) acc += partial_value(seed, r, i);
          return acc;
        };
        auto x = Tensor<T, Partial>::from_function(comm, g, mine);
        auto r = eager::all_reduce(x);
        static_assert(std::same_as<decltype(r), Tensor<T, Replicated>>);
        check_part(r, {g, -1, {}}, total, "all_reduce -> R");
        auto i = eager::all_reduce<Invariant>(x);
        static_assert(std::same_as<decltype(i), Tensor<T, Invariant>>);
        check_part(i, {g, -1, {}}, total, "all_reduce -> I");
        check_part(x, {g, -1, {}}, mine, "input after eager::all_reduce (unchanged)");
        if (g.numel() > 0) CHECK(r.data() != x.data());  // a new tensor, not the input overwritten

        // Given up and held by nobody else: summed in its own storage, which the result takes over.
        auto given = Tensor<T, Partial>::from_function(comm, g, mine);
        const T* storage = given.data();
        auto in_place = apply_transition<Invariant>(std::move(given));
        check_part(in_place, {g, -1, {}}, total, "all_reduce of a value given up -> I");
        if (g.numel() > 0) CHECK(in_place.data() == storage);
        CHECK(!given.valid());  // left empty, as a moved-from tensor is
        // Given up but shared (a copy the caller keeps): out of place, the copy unchanged.
        auto shared = x;
        auto out_of_place = apply_transition<Replicated>(std::move(shared));
        check_part(out_of_place, {g, -1, {}}, total, "all_reduce of a shared value -> R");
        check_part(x, {g, -1, {}}, mine, "input after all_reduce of a copy given up (unchanged)");
        if (g.numel() > 0) CHECK(out_of_place.data() != x.data());
        // In an expression: its own intermediate (x * 2) is summed in place, a named operand never.
        const Tensor<T, Invariant> doubled = all_reduce<Invariant>(x * T(2));
        check_part(
            doubled, {g, -1, {}}, [&](Index i) { return 2 * total(i); }, "all_reduce<I>(x * 2)");
        const Tensor<T, Replicated> named = all_reduce(x);
        check_part(named, {g, -1, {}}, total, "all_reduce(x)");
        check_part(x, {g, -1, {}}, mine, "input after all_reduce(x) (unchanged)");
      }
  });
}

TEST_CASE(
    "dynamic_slice from R and I, and zero_pad: dynamic lengths with zeros, sharded dims 0-2, 1-3 dims, float and double") {
  const int n = test::world().size();
  auto rng = test::shared_rng(404);
  int cases = 0;
  for_each_config([&](auto tc, auto dc, int ndim) {
    using T = typename decltype(tc)::type;
    constexpr int D = decltype(dc)::value;
    for (const Lens& ls : lens_cases(rng, n)) {
      const Shape g = random_shape(rng, ndim, D, sum_of(ls), 12);
      check_slice_and_pad<T, Sharded<D>>(g, ls, rng());
      ++cases;
    }
  });
  CHECK(cases >= 2 * 6 * 2);
}

TEST_CASE("replicate: I -> R moves nothing and keeps every element") {
  const auto& comm = test::world();
  auto rng = test::shared_rng(505);
  for_each_type([&](auto tc) {
    using T = typename decltype(tc)::type;
    for (int ndim = 0; ndim <= 3; ++ndim) {
      const Shape g = ndim == 0 ? Shape{} : random_shape(rng, ndim, 0, 1 + static_cast<std::int64_t>(rng() % 9));
      const std::uint64_t seed = rng();
      const auto f = [seed](Index i) { return value(seed, i); };
      INFO("replicate ", dtype_name<T>(), " global ", g.str());
      auto x = Tensor<T, Invariant>::from_function(comm, g, f);
      auto y = eager::replicate(x);
      static_assert(std::same_as<decltype(y), Tensor<T, Replicated>>);
      check_part(y, {g, -1, {}}, f, "replicate -> R");
      CHECK(y.data() == x.data());  // "nothing moves": the same storage
    }
  });
}

TEST_CASE("all_to_all: every strategy, every pair C != S of dims 0-2, dynamic lengths with zeros, float and double") {
  const int n = test::world().size();
  auto rng = test::shared_rng(606);
  int cases = 0;
  for_each_type([&](auto tc) {
    using T = typename decltype(tc)::type;
    for_each_dim([&](auto cc) {
      for_each_dim([&](auto sc) {
        constexpr int C = decltype(cc)::value, S = decltype(sc)::value;
        if constexpr (C != S) {
          const int lo = std::max(C, S) + 1;
          for (int ndim = lo; ndim <= 3; ++ndim) {
            const auto cs = lens_cases(rng, n);
            // Pair each C-lengths case with an S-lengths case (rotated, so the zero patterns differ).
            for (std::size_t k = 0; k < cs.size(); ++k) {
              const Lens& lc = cs[k];
              const Lens ls = lens_cases(rng, n)[(k + 1) % cs.size()];
              std::vector<std::int64_t> ex(static_cast<std::size_t>(ndim));
              for (auto& v : ex) v = 1 + static_cast<std::int64_t>(rng() % 6);
              ex[static_cast<std::size_t>(C)] = sum_of(lc);
              ex[static_cast<std::size_t>(S)] = sum_of(ls);
              const Shape g{std::span<const std::int64_t>(ex)};
              for (Strategy s : a2a_strategies) {
                check_all_to_all<T, Sharded<C>, Sharded<S>>(g, lc, ls, s, rng());
                ++cases;
              }
            }
          }
        }
      });
    });
  });
  CHECK(cases > 0);
}

TEST_CASE("all_to_all: strided pieces sent packed by one rank and as datatypes by another, next to a rank with none") {
  // v_collective packs a rank's strided sends below
  // CostModel::mpi_pack_strided_sends_below bytes and sends them as vector
  // datatypes from it: rank 0 sends 16 rows, the others hundreds, so both
  // ways run in the same call.
  const int n = test::world().size();
  Lens lc(static_cast<std::size_t>(n)), ls(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    lc[static_cast<std::size_t>(i)] = i == 0 ? 16 : (i == 1 && n > 2 ? 0 : 128 * (i + 1));
    ls[static_cast<std::size_t>(i)] = i == 0 && n > 2 ? 0 : 256 + 64 * i;
  }
  const Shape g{sum_of(lc), sum_of(ls)};
  if (n > 1) REQUIRE(static_cast<std::int64_t>(sizeof(float)) * 200 * g[1] >= CostModel{}.mpi_pack_strided_sends_below);
  for (Strategy s : {Strategy::v_collective, Strategy::automatic, Strategy::send_recv}) {
    check_all_to_all<float, Sharded<0>, Sharded<1>>(g, lc, ls, s, 21);
    check_all_to_all<float, Sharded<1>, Sharded<0>>({g[1], g[0]}, lc, ls, s, 22);
  }
}

TEST_CASE(
    "all_to_all: the reference module's cases (exactly at 4 ranks, their pattern at other sizes), every strategy") {
  const auto& comm = test::world();
  const int n = comm.size(), me = comm.rank();
  // The reference's lengths at 4 ranks: [1,2,3,4] -> [4,3,2,1], and with
  // zeros [0,2,0,8] -> [5,0,5,0]; the same patterns at n ranks.
  Lens up(static_cast<std::size_t>(n)), zc(static_cast<std::size_t>(n)), zs(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    up[static_cast<std::size_t>(i)] = i + 1;
    zc[static_cast<std::size_t>(i)] = i % 2 == 1 ? (i == n - 1 ? 8 : 2) : 0;
    zs[static_cast<std::size_t>(i)] = i % 2 == 0 ? 5 : 0;
  }
  const Lens down(up.rbegin(), up.rend());
  for (Strategy s : a2a_strategies) {
    for_each_type([&](auto tc) {
      using T = typename decltype(tc)::type;
      // S(1)[up] of (sum, sum) -> S(0)[down], and back; S(1)[zc] -> S(0)[zs].
      check_all_to_all<T, Sharded<1>, Sharded<0>>({sum_of(down), sum_of(up)}, up, down, s, 11);
      check_all_to_all<T, Sharded<0>, Sharded<1>>({sum_of(down), sum_of(up)}, down, up, s, 12);
      check_all_to_all<T, Sharded<1>, Sharded<0>>({sum_of(zs), sum_of(zc)}, zc, zs, s, 14);
      check_all_to_all<T, Sharded<0>, Sharded<1>>({sum_of(zs), sum_of(zc)}, zs, zc, s, 15);
      if (n == 4) {  // the reference's own types and shapes: static lengths, (10, 10)
        check_all_to_all<T, Sharded<1, lengths<1, 2, 3, 4>>, Sharded<0, lengths<4, 3, 2, 1>>>({10, 10}, up, down, s,
                                                                                              16);
        check_all_to_all<T, Sharded<0, lengths<4, 3, 2, 1>>, Sharded<1, lengths<1, 2, 3, 4>>>({10, 10}, down, up, s,
                                                                                              17);
        using C = Sharded<1, lengths<0, 2, 0, 8>>;
        using S0 = Sharded<0, lengths<5, 0, 5, 0>>;
        check_all_to_all<T, C, S0>({10, 10}, zc, zs, s, 13);
        // ones, as in the reference: local shapes (10, 0|2|0|8) -> (5|0|5|0, 10), each rank's sum 10 x its rows
        auto p = Tensor<T, C>::ones(comm, {10, 10});
        auto y = eager::all_to_all<S0>(p, s);
        const std::int64_t in_cols[] = {0, 2, 0, 8}, out_rows[] = {5, 0, 5, 0};
        CHECK(p.local_shape() == Shape{10, in_cols[me]});
        CHECK(y.local_shape() == Shape{out_rows[me], 10});
        CHECK(Host::sum(y.data(), y.size()) == static_cast<T>(out_rows[me] * 10));
      }
    });
  }
}

TEST_CASE(
    "static lengths at the matching world size: every transition, every strategy, sharded dims 0-2, float and double") {
  const int n = test::world().size();
  auto rng = test::shared_rng(707);
  int lists = 0;
  for_each_static_lengths(n, [&](auto lc) {
    using Ls = typename decltype(lc)::type;
    ++lists;
    const Lens ls(Ls::values.begin(), Ls::values.end());
    // Static lengths differ from run-time ones only in the types (and every
    // layout type is a set of template instances to compile): the gathers and
    // reduce_scatter, whose lowerings depend on the sharded dim, run on dims
    // 0-2; slice, zero_pad and all_to_all on one dim each.
    for_each_dim([&](auto dc) {
      constexpr int D = decltype(dc)::value;
      using T = std::conditional_t<D == 1, float, double>;
      using S = Sharded<D, Ls>;
      const Shape g = random_shape(rng, 3, D, Ls::sum);
      for (Strategy s : gather_strategies) {
        check_all_gather<T, S>(g, ls, s, rng());
        check_reduce_scatter<T, S>(g, ls, s, rng());
      }
    });
    using S1 = Sharded<1, Ls>;
    using S0 = Sharded<0, typename reversed<Ls>::type>;
    const Lens rev(S0::lengths_type::values.begin(), S0::lengths_type::values.end());
    check_slice_and_pad<float, S1>(random_shape(rng, 2, 1, Ls::sum), ls, rng());
    const Shape g{S0::lengths_type::sum, Ls::sum, 1 + static_cast<std::int64_t>(rng() % 5)};
    for (Strategy s : a2a_strategies) {
      check_all_to_all<double, S1, S0>(g, ls, rev, s, rng());
      check_all_to_all<double, S0, S1>(g, rev, ls, s, rng());
    }
  });
  if (n <= 4)
    CHECK(lists >= 1);
  else
    MESSAGE("no static lengths lists for " << n << " ranks; the dynamic cases cover them");
}

TEST_CASE("4-d tensors: sharded dims 1 and 3, every transition") {
  const int n = test::world().size();
  auto rng = test::shared_rng(808);
  const auto g4 = [&](int dim, std::int64_t extent) { return random_shape(rng, 4, dim, extent, 4); };
  for (const Lens& ls : lens_cases(rng, n)) {
    for (Strategy s : gather_strategies) {
      check_all_gather<double, Sharded<3>>(g4(3, sum_of(ls)), ls, s, rng());
      check_all_gather<float, Sharded<1>>(g4(1, sum_of(ls)), ls, s, rng());
      check_reduce_scatter<float, Sharded<3>>(g4(3, sum_of(ls)), ls, s, rng());
      check_reduce_scatter<double, Sharded<1>>(g4(1, sum_of(ls)), ls, s, rng());
    }
    check_slice_and_pad<double, Sharded<3>>(g4(3, sum_of(ls)), ls, rng());
    check_slice_and_pad<float, Sharded<2>>(g4(2, sum_of(ls)), ls, rng());
    const Lens ls2 = test::random_lengths(rng, n, 1 + static_cast<std::int64_t>(rng() % 7));
    for (Strategy s : a2a_strategies) {
      Shape g = random_shape(rng, 4, 3, sum_of(ls), 4).with(1, sum_of(ls2));
      check_all_to_all<double, Sharded<3>, Sharded<1>>(g, ls, ls2, s, rng());
      g = random_shape(rng, 4, 0, sum_of(ls), 4).with(3, sum_of(ls2));
      check_all_to_all<float, Sharded<0>, Sharded<3>>(g, ls, ls2, s, rng());
      g = random_shape(rng, 4, 2, sum_of(ls), 4).with(1, sum_of(ls2));
      check_all_to_all<double, Sharded<2>, Sharded<1>>(g, ls, ls2, s, rng());
    }
  }
}

/// Runs `body` under a BackendCallRecorder (core/backend_calls.hpp) and
/// checks that it handed the backend nothing to send: every call it made
/// (agreements, collectives of zero counts) carried 0 bytes.
template <class F>
void check_moves_nothing(const std::string& what, F&& body) {
  BackendCallRecorder rec;
  body();
  std::int64_t bytes = 0;
  std::string calls;
  for (const BackendCall& c : rec.calls()) {
    bytes += c.bytes;
    calls += std::string(calls.empty() ? "" : ", ") + c.primitive + " " + std::to_string(c.bytes) + " B";
  }
  CHECK_MESSAGE(bytes == 0, what << ": " << bytes << " bytes handed to the backend (" << calls << ")");
  // The calls are there to be counted (an agreement at least), except at one
  // rank, where there is nobody to agree with and nothing is called.
  if (test::world().size() > 1)
    CHECK_MESSAGE(!rec.calls().empty(), what << ": no backend call at all, not even the agreement");
}

TEST_CASE("an empty dim other than the sharded one: every transition moves nothing and keeps the shapes") {
  const int n = test::world().size();
  auto rng = test::shared_rng(909);
  const Lens ls = test::random_lengths(rng, n, 2 * n + 1);
  // Each check_* also compares the shapes (and the values, of which there are none).
  for (Strategy s : gather_strategies) {
    const std::string how = std::string(" (") + strategy_name(s) + ")";
    check_moves_nothing("all_gather S(1)" + how, [&] {
      check_all_gather<float, Sharded<1>>({0, sum_of(ls), 3}, ls, s, rng());
    });
    check_moves_nothing("all_gather S(0)" + how, [&] {
      check_all_gather<double, Sharded<0>>({sum_of(ls), 4, 0}, ls, s, rng());
    });
    check_moves_nothing("reduce_scatter S(2)" + how, [&] {
      check_reduce_scatter<float, Sharded<2>>({3, 0, sum_of(ls)}, ls, s, rng());
    });
    check_moves_nothing("reduce_scatter S(0)" + how, [&] {
      check_reduce_scatter<double, Sharded<0>>({sum_of(ls), 0}, ls, s, rng());
    });
  }
  check_moves_nothing("dynamic_slice/zero_pad S(1)", [&] {
    check_slice_and_pad<float, Sharded<1>>({2, sum_of(ls), 0}, ls, rng());
  });
  for (Strategy s : a2a_strategies) {
    const std::string how = std::string(" (") + strategy_name(s) + ")";
    check_moves_nothing("all_to_all S(0) -> S(2)" + how, [&] {
      check_all_to_all<float, Sharded<0>, Sharded<2>>({sum_of(ls), 0, sum_of(ls)}, ls, ls, s, rng());
    });
    check_moves_nothing("all_to_all S(2) -> S(1)" + how, [&] {
      check_all_to_all<double, Sharded<2>, Sharded<1>>({0, sum_of(ls), sum_of(ls)}, ls, ls, s, rng());
    });
  }
}

TEST_CASE("identity: I -> I, R -> R, P -> P and S(d)[a] -> S(d)[a] keep the storage") {
  const auto& comm = test::world();
  const int n = comm.size();
  auto rng = test::shared_rng(1001);
  const Lens ls = test::random_lengths(rng, n, 3 * n);
  const auto f = [](Index i) { return value(77, i); };
  auto x = Tensor<double, Sharded<1>>::from_function(comm, {3, sum_of(ls)}, f, layout_mapping<Sharded<1>>(ls));
  auto y = apply_transition<Sharded<1>>(x, x.mapping());
  CHECK(y.data() == x.data());
  check_part(y, {Shape{3, sum_of(ls)}, 1, ls}, f, "S -> S, same lengths");
  auto r = Tensor<double, Replicated>::from_function(comm, {4, 2}, f);
  CHECK(apply_transition<Replicated>(r).data() == r.data());
  auto p = Tensor<double, Partial>::from_function(comm, {4, 2}, f);
  CHECK(apply_transition<Partial>(p).data() == p.data());
  auto i = Tensor<float, Invariant>::from_function(comm, {4, 2}, f);
  CHECK(apply_transition<Invariant>(i).data() == i.data());
}

TEST_CASE("reshard: S(d)[a] -> S(d)[b], every strategy, dims 0-2, 1-3 dims, lengths with zeros") {
  const auto& comm = test::world();
  const int n = comm.size();
  auto rng = test::shared_rng(1002);
  int cases = 0;
  for_each_config([&](auto tc, auto dc, int ndim) {
    using T = typename decltype(tc)::type;
    constexpr int D = decltype(dc)::value;
    using S = Sharded<D>;
    const auto cs = lens_cases(rng, n);
    for (std::size_t k = 0; k < cs.size(); ++k) {
      const Lens& a = cs[k];
      const Lens b = test::random_lengths(rng, n, sum_of(a));  // same total, new split
      const Shape g = random_shape(rng, ndim, D, sum_of(a));
      for (Strategy s : {Strategy::v_collective, Strategy::send_recv, Strategy::automatic}) {
        INFO(context("reshard", layout_name<S>() + " to lengths " + str(b), g, a, s, dtype_name<T>()));
        const std::uint64_t seed = rng();
        const auto f = [seed](Index i) { return value(seed, i); };
        auto x = Tensor<T, S>::from_function(comm, g, f, layout_mapping<S>(a));
        auto y = apply_transition<S>(x, layout_mapping<S>(b), s);
        check_part(y, {g, D, b}, f, "reshard");
        CHECK(lens_of(y.mapping()) == b);
        check_part(x, {g, D, a}, f, "input after reshard (unchanged)");
        ++cases;
      }
    }
  });
  CHECK(cases >= 2 * 6 * 3);
  // Static lengths, to their reverse (at the world sizes of the static lists).
  for_each_static_lengths(n, [&](auto lc) {
    using Ls = typename decltype(lc)::type;
    using Rev = typename reversed<Ls>::type;
    const Lens a(Ls::values.begin(), Ls::values.end()), b(Rev::values.begin(), Rev::values.end());
    const Shape g{3, Ls::sum, 2};
    for (Strategy s : {Strategy::v_collective, Strategy::send_recv, Strategy::automatic}) {
      INFO("reshard ", layout_name<Sharded<1, Ls>>(), " -> ", layout_name<Sharded<1, Rev>>(), " strategy ",
           strategy_name(s));
      const std::uint64_t seed = rng();
      const auto f = [seed](Index i) { return value(seed, i); };
      auto x = Tensor<double, Sharded<1, Ls>>::from_function(comm, g, f);
      auto y = apply_transition<Sharded<1, Rev>>(x, {}, s);
      check_part(y, {g, 1, b}, f, "reshard, static lengths");
      auto z = apply_transition<Sharded<1>>(y, layout_mapping<Sharded<1>>(a), s);
      check_part(z, {g, 1, a}, f, "reshard back, to run-time lengths");
    }
  });
}

TEST_CASE("a strategy an operation does not have is refused on every rank, naming both") {
  const auto& comm = test::world();
  const int n = comm.size();
  auto rng = test::shared_rng(1101);
  const Lens ls = test::random_lengths(rng, n, 2 * n + 1);
  auto x = Tensor<float, Sharded<0>>::ones(comm, {sum_of(ls), 3}, layout_mapping<Sharded<0>>(ls));
  CHECK_THROWS_WITH_AS(eager::all_to_all<Sharded<1>>(x, test::random_lengths(rng, n, 3), Strategy::per_root),
                       doctest::Contains("strategy per_root does not apply"), invalid_argument);
  CHECK_THROWS_WITH_AS(eager::all_gather(x, Strategy::send_recv),
                       doctest::Contains("strategy send_recv does not apply"), invalid_argument);
  auto p = Tensor<float, Partial>::ones(comm, {sum_of(ls), 3});
  CHECK_THROWS_WITH_AS(eager::reduce_scatter<Sharded<0>>(p, ls, Strategy::send_recv), doctest::Contains("send_recv"),
                       invalid_argument);
  if (n > 1) {  // reshard (lengths that differ: equal ones resolve no strategy, nothing moves)
    Lens a(static_cast<std::size_t>(n), 0), b(static_cast<std::size_t>(n), 0);
    a.front() = 5;
    b.back() = 5;
    auto z = Tensor<float, Sharded<0>>::ones(comm, {5, 2}, layout_mapping<Sharded<0>>(a));
    CHECK_THROWS_WITH_AS(apply_transition<Sharded<0>>(z, layout_mapping<Sharded<0>>(b), Strategy::per_root),
                         doctest::Contains("strategy per_root does not apply"), invalid_argument);
    CHECK_THROWS_WITH_AS(apply_transition<Sharded<0>>(z, layout_mapping<Sharded<0>>(b), Strategy::padded),
                         doctest::Contains("strategy padded does not apply"), invalid_argument);
  }
  // ... and the ranks are still in step: a collective afterwards works.
  check_part(
      eager::all_gather(x), {Shape{sum_of(ls), 3}, -1, {}}, [](Index) { return 1.0; }, "all_gather after the refusals");
}

}  // namespace shardex_test_collectives
