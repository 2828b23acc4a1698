// SPDX-License-Identifier: MIT
// Bad input is an exception on every rank, never a hang: each case below makes
// every rank throw shardex::invalid_argument whose message names the
// operation, the rank and the shapes. Where only one rank's input is bad, the
// other ranks throw too and their message names the bad rank. After each case
// the communicator must still work (a valid all-reduce follows), so no stray
// message of an abandoned collective is left behind.
//
// Cases: a lengths list whose count is not the world size; a local extent that
// is not lengths[rank] (on one rank only); negative lengths; a sharded dim out
// of range; lengths that do not sum to the global extent; calls that do not
// match across ranks (strategy, shapes, dtype, operation, lengths); a data span
// of the wrong size. Runs at every world size.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include <shardex.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

#include "support/dist.hpp"

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_bad_input {

using namespace shardex;
using shardex::test::world;

namespace {

/// CHECK that `expr` throws shardex::invalid_argument whose message contains
/// every one of the pieces (each a std::string).
#define CHECK_BAD_INPUT(expr, ...)                                                                \
  do {                                                                                            \
    for (const std::string& piece_ : std::vector<std::string>{__VA_ARGS__}) {                     \
      CAPTURE(piece_);                                                                            \
      CHECK_THROWS_WITH_AS(expr, doctest::Contains(piece_.c_str()), ::shardex::invalid_argument); \
    }                                                                                             \
  } while (0)

/// The message of the invalid_argument `f` throws, or a description of what
/// happened instead.
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const invalid_argument& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not invalid_argument: ") + e.what() + ">";
  }
  return "<no exception>";
}

/// A valid collective after a failed one: every rank must get the same sum.
void check_communicator_still_works() {
  const auto& comm = world();
  auto p = Tensor<double, Partial>::full(comm, {3}, double(comm.rank() + 1));
  auto s = eager::all_reduce(p);
  const int n = comm.size();
  CHECK(s(0) == double(n * (n + 1) / 2));
  CHECK(s(2) == double(n * (n + 1) / 2));
}

std::string rank_str(int r) { return "rank " + std::to_string(r); }

/// 1, 2, ..., n: a valid lengths list for a global extent of n (n + 1) / 2.
std::vector<std::int64_t> one_to_n(int n) {
  std::vector<std::int64_t> ls(static_cast<std::size_t>(n));
  std::iota(ls.begin(), ls.end(), 1);
  return ls;
}

/// Lengths for a global extent of `total` on n ranks: all on the last rank, 0
/// elsewhere, plus `extra` entries of 0 (a count that is not the world size).
std::vector<std::int64_t> all_on_last(int n, std::int64_t total, int extra = 0) {
  std::vector<std::int64_t> ls(static_cast<std::size_t>(n + extra), 0);
  ls[static_cast<std::size_t>(n - 1)] = total;
  return ls;
}
std::vector<std::int64_t> ten_on_last(int n, int extra = 0) { return all_on_last(n, 10, extra); }

}  // namespace

TEST_CASE("a lengths list whose count is not the world size") {
  const auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  const auto bad = ten_on_last(n, 1);  // n + 1 entries summing to 10
  const std::string count =
      "has " + std::to_string(n + 1) + " entries but the communicator has " + std::to_string(n) + " ranks";
  const auto partial = Tensor<float, Partial>::ones(comm, {5, 10});
  const auto replicated = Tensor<float, Replicated>::ones(comm, {5, 10});

  SUBCASE("eager::reduce_scatter (collective)") {
    CHECK_BAD_INPUT(((void)eager::reduce_scatter<Sharded<1>>(partial, bad)), "shardex::reduce_scatter", rank_str(r),
                    "(5, 10)", count);
  }
  SUBCASE("reduce_scatter with every strategy") {
    for (Strategy s : {Strategy::padded, Strategy::per_root, Strategy::v_collective, Strategy::automatic}) {
      CAPTURE(strategy_name(s));
      CHECK_BAD_INPUT(((void)eager::reduce_scatter<Sharded<1>>(partial, bad, s)), "reduce_scatter", count);
    }
  }
  SUBCASE("eager::dynamic_slice (local)") {
    CHECK_BAD_INPUT(((void)eager::dynamic_slice<Sharded<1>>(replicated, bad)), "slice", rank_str(r), "(5, 10)", count);
  }
  SUBCASE("all_to_all") {
    const auto x = Tensor<float, Sharded<1>>::ones(comm, {5, 10}, layout_mapping<Sharded<1>>(ten_on_last(n)));
    const auto bad5 = [&] {
      std::vector<std::int64_t> ls(static_cast<std::size_t>(n + 1), 0);
      ls[0] = 5;
      return ls;
    }();
    CHECK_BAD_INPUT(((void)eager::all_to_all<Sharded<0>>(x, bad5)), "shardex::all_to_all", rank_str(r), "(5, 10)",
                    "has " + std::to_string(n + 1) + " entries");
  }
  SUBCASE("Tensor::zeros, ones, full") {
    const layout_mapping<Sharded<1>> m(bad);
    CHECK_BAD_INPUT(((void)Tensor<double, Sharded<1>>::zeros(comm, {5, 10}, m)), "shardex::Tensor::zeros", rank_str(r),
                    "(5, 10)", count);
    CHECK_BAD_INPUT(((void)Tensor<double, Sharded<1>>::ones(comm, {5, 10}, m)), "shardex::Tensor", rank_str(r),
                    "(5, 10)", count);
    CHECK_BAD_INPUT(((void)Tensor<float, Sharded<1>>::full(comm, {5, 10}, 2.0f, m)), "shardex::Tensor", "(5, 10)",
                    count);
  }
  SUBCASE("from_local (collective)") {
    const std::vector<float> data(static_cast<std::size_t>(5 * (r == n - 1 ? 10 : 0)));
    const Shape local{5, r == n - 1 ? 10 : 0};
    // Every rank's input is bad: every rank throws the message of the first, rank 0.
    CHECK_BAD_INPUT(
        ((void)Tensor<float, Sharded<1>>::from_local(comm, local, data, layout_mapping<Sharded<1>>(bad))),
        "shardex::Tensor::from_local", "on " + rank_str(0), "local shape " + Shape{5, n == 1 ? 10 : 0}.str(),
        "has " + std::to_string(n + 1) + " entries but the communicator has " + std::to_string(n) + " ranks");
  }
  SUBCASE("static lengths<1, 2, 3, 4> fit four ranks only") {
    using S = Sharded<1, lengths<1, 2, 3, 4>>;
    const auto make = [&] { (void)Tensor<float, S>::ones(comm, {5, 10}); };
    if (n == 4) {
      CHECK_NOTHROW(make());
      // and a transition into it is fine too
      CHECK(eager::reduce_scatter<S>(partial).local_shape() == Shape{5, r + 1});
    } else {
      CHECK_BAD_INPUT((make()), "shardex::Tensor", rank_str(r), "S(1)[1,2,3,4]", "(5, 10)",
                      "has 4 entries but the communicator has " + std::to_string(n) + " ranks");
      CHECK_BAD_INPUT(((void)eager::reduce_scatter<S>(partial)), "shardex::reduce_scatter", rank_str(r), "(5, 10)",
                      "has 4 entries but the communicator has " + std::to_string(n) + " ranks");
    }
  }
  check_communicator_still_works();
}

TEST_CASE("a local extent that is not lengths[rank], on one rank only") {
  const auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  const auto ls = one_to_n(n);  // rank i holds i + 1 columns
  const layout_mapping<Sharded<1>> m(ls);

  SUBCASE("the last rank passes one column too many") {
    const int bad = n - 1;
    const std::int64_t extent = r == bad ? n + 1 : r + 1;
    const Shape local{3, extent};
    std::vector<float> data(static_cast<std::size_t>(local.numel()), 1.0f);
    const Shape bad_local{3, n + 1};
    // Every rank throws the bad rank's message: the operation, the bad rank, its shape and the lengths.
    CHECK_BAD_INPUT(((void)Tensor<float, Sharded<1>>::from_local(comm, local, data, m)), "shardex::Tensor::from_local",
                    "on " + rank_str(bad) + " of " + std::to_string(n), "local shape " + bad_local.str(),
                    "the local extent along sharded dim 1 is " + std::to_string(n + 1) + " but lengths[" +
                        std::to_string(bad) + "] is " + std::to_string(n));
    CHECK_BAD_INPUT(((void)Tensor<float, Sharded<1>>::view_local(comm, local, data.data(), data.size(), m)),
                    "shardex::Tensor::from_local", "on " + rank_str(bad), "local shape " + bad_local.str());
    // The other ranks say who reported it and who they are.
    const std::string msg = message_of([&] { (void)Tensor<float, Sharded<1>>::from_local(comm, local, data, m); });
    if (r != bad) {
      CHECK(msg.find("reported by " + rank_str(bad) + "; this is " + rank_str(r)) != std::string::npos);
    } else {
      CHECK(msg.find("reported by") == std::string::npos);
    }
  }
  SUBCASE("rank 0 passes a column where its length is 0") {
    std::vector<std::int64_t> zl = ls;
    zl[0] = 0;  // (the global extent follows from the lengths)
    const std::int64_t extent = r == 0 ? 1 : zl[static_cast<std::size_t>(r)];
    const Shape local{2, extent};
    std::vector<double> data(static_cast<std::size_t>(local.numel()), 1.0);
    CHECK_BAD_INPUT(((void)Tensor<double, Sharded<1>>::from_local(comm, local, data, layout_mapping<Sharded<1>>(zl))),
                    "shardex::Tensor::from_local", "on " + rank_str(0), "local shape (2, 1)", "but lengths[0] is 0");
  }
  SUBCASE("the extent along a dim other than the sharded one differs on one rank") {
    // Rank 0 passes (4, 1) where the others pass (3, r + 1): the global shapes differ.
    const Shape local{r == 0 ? 4 : 3, r + 1};
    std::vector<float> data(static_cast<std::size_t>(local.numel()), 1.0f);
    if (n >= 2) {
      CHECK_BAD_INPUT(((void)Tensor<float, Sharded<1>>::from_local(comm, local, data, m)),
                      "shardex::Tensor::from_local", rank_str(r), "local shape " + local.str(),
                      "not making the same call");
    } else {
      CHECK_NOTHROW((void)Tensor<float, Sharded<1>>::from_local(comm, local, data, m));
    }
  }
  check_communicator_still_works();
}

TEST_CASE("negative lengths") {
  const auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  // -1 on rank 0 and, from two ranks on, 11 on the last rank: the sum is right,
  // one length is not (negative lengths are reported before a wrong sum).
  const auto negative = [n](std::int64_t total) {
    std::vector<std::int64_t> ls(static_cast<std::size_t>(n), 0);
    ls[0] = -1;
    if (n > 1) ls.back() = total + 1;
    return ls;
  };
  const auto neg = negative(10);
  const auto partial = Tensor<float, Partial>::ones(comm, {5, 10});
  const std::string what = "length of rank 0 is negative";
  CHECK_BAD_INPUT(((void)eager::reduce_scatter<Sharded<1>>(partial, neg)), "shardex::reduce_scatter", rank_str(r),
                  "(5, 10)", what);
  CHECK_BAD_INPUT(((void)eager::dynamic_slice<Sharded<1>>(Tensor<float, Replicated>::ones(comm, {5, 10}), neg)),
                  "slice", rank_str(r), "(5, 10)", what);
  CHECK_BAD_INPUT(((void)Tensor<float, Sharded<1>>::zeros(comm, {5, 10}, layout_mapping<Sharded<1>>(neg))),
                  "shardex::Tensor", rank_str(r), "(5, 10)", what);
  const auto x = Tensor<double, Sharded<0>>::ones(comm, {10, 5}, layout_mapping<Sharded<0>>(ten_on_last(n)));
  CHECK_BAD_INPUT(((void)eager::all_to_all<Sharded<1>>(x, negative(5))), "all_to_all", rank_str(r), "(10, 5)", what);
  check_communicator_still_works();
}

TEST_CASE("a sharded dim out of range") {
  const auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  const auto ls = ten_on_last(n);
  const std::string range = "sharded dim 3 is out of range for a 2-d tensor";
  CHECK_BAD_INPUT(((void)eager::dynamic_slice<Sharded<3>>(Tensor<float, Replicated>::ones(comm, {5, 10}), ls)), "slice",
                  rank_str(r), "(5, 10)", range);
  CHECK_BAD_INPUT(((void)eager::reduce_scatter<Sharded<3>>(Tensor<float, Partial>::ones(comm, {5, 10}), ls)),
                  "reduce_scatter", rank_str(r), "(5, 10)", range);
  const auto x = Tensor<float, Sharded<1>>::ones(comm, {5, 10}, layout_mapping<Sharded<1>>(ls));
  CHECK_BAD_INPUT(((void)eager::all_to_all<Sharded<2>>(x, ls)), "all_to_all", rank_str(r), "(5, 10)",
                  "sharded dim 2 is out of range for a 2-d tensor");
  CHECK_BAD_INPUT(((void)Tensor<float, Sharded<2>>::zeros(comm, {5, 10}, layout_mapping<Sharded<2>>(ls))),
                  "shardex::Tensor", rank_str(r), "(5, 10)", "sharded dim 2 is out of range");
  // A 0-d tensor has no dim 0 to shard.
  CHECK_BAD_INPUT(((void)eager::reduce_scatter<Sharded<0>>(Tensor<double, Partial>::ones(comm, Shape{}),
                                                           std::vector<std::int64_t>(static_cast<std::size_t>(n), 0))),
                  "reduce_scatter", rank_str(r), "sharded dim 0 is out of range for a 0-d tensor");
  std::vector<float> data(static_cast<std::size_t>(r == n - 1 ? 10 : 0));
  CHECK_BAD_INPUT(((void)Tensor<float, Sharded<1>>::from_local(comm, Shape{r == n - 1 ? 10 : 0}, data,
                                                               layout_mapping<Sharded<1>>(ls))),
                  "shardex::Tensor::from_local", rank_str(r), "sharded dim 1 is out of range for a 1-d tensor");
  check_communicator_still_works();
}

TEST_CASE("lengths that do not sum to the global extent") {
  const auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  std::vector<std::int64_t> nine = ten_on_last(n);
  nine.back() = 9;
  const std::string sum = "the lengths sum to 9 but the global extent of dim 1 is 10";
  const auto partial = Tensor<float, Partial>::ones(comm, {5, 10});
  for (Strategy s : {Strategy::padded, Strategy::per_root, Strategy::v_collective}) {
    CAPTURE(strategy_name(s));
    CHECK_BAD_INPUT(((void)eager::reduce_scatter<Sharded<1>>(partial, nine, s)), "shardex::reduce_scatter", rank_str(r),
                    "(5, 10)", sum);
  }
  CHECK_BAD_INPUT(((void)eager::dynamic_slice<Sharded<1>>(Tensor<double, Replicated>::ones(comm, {5, 10}), nine)),
                  "slice", rank_str(r), "(5, 10)", sum);
  CHECK_BAD_INPUT(((void)eager::dynamic_slice<Sharded<1>>(Tensor<double, Invariant>::ones(comm, {5, 10}), nine)),
                  "slice", "(5, 10)", sum);
  CHECK_BAD_INPUT(((void)Tensor<float, Sharded<1>>::ones(comm, {5, 10}, layout_mapping<Sharded<1>>(nine))),
                  "shardex::Tensor", rank_str(r), "(5, 10)", sum);
  const auto x = Tensor<float, Sharded<0>>::ones(comm, {7, 10}, layout_mapping<Sharded<0>>([&] {
                                                   std::vector<std::int64_t> ls(static_cast<std::size_t>(n), 0);
                                                   ls[0] = 7;
                                                   return ls;
                                                 }()));
  for (Strategy s : {Strategy::padded, Strategy::v_collective, Strategy::send_recv}) {
    CAPTURE(strategy_name(s));
    CHECK_BAD_INPUT(((void)eager::all_to_all<Sharded<1>>(x, nine, s)), "shardex::all_to_all", rank_str(r), "(7, 10)",
                    sum);
  }
  check_communicator_still_works();
}

/// Runs a factory at CheckLevel::local: the tensors below differ across ranks
/// on purpose, and the factories' own agreement would report that first.
template <class F>
auto made_unchecked(F&& make) {
  set_check_level(CheckLevel::local);
  auto t = make();
  set_check_level(CheckLevel::communicating);
  return t;
}

TEST_CASE("calls that do not match across ranks throw on every rank instead of hanging") {
  const auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  if (n < 2) {
    // One rank cannot disagree with itself: the same calls simply run.
    auto x = Tensor<float, Sharded<1>>::ones(comm, {5, 10}, layout_mapping<Sharded<1>>(ten_on_last(n)));
    CHECK(eager::all_gather(x, Strategy::padded).local_shape() == Shape{5, 10});
    return;
  }
  const std::string mismatch = "the ranks are not making the same call";
  const auto ls = one_to_n(n);
  const std::int64_t total = n * (n + 1) / 2;
  const auto x = Tensor<float, Sharded<1>>::ones(comm, {5, total}, layout_mapping<Sharded<1>>(ls));
  const std::string global = "(5, " + std::to_string(total) + ")";

  SUBCASE("all_gather: padded on rank 0, per_root on the others") {
    const Strategy s = r == 0 ? Strategy::padded : Strategy::per_root;
    // Each rank describes its own call, strategy included.
    CHECK_BAD_INPUT(((void)eager::all_gather(x, s)), "shardex::all_gather", rank_str(r), global, mismatch,
                    std::string("strategy ") + strategy_name(s));
  }
  SUBCASE("reduce_scatter: v_collective on the last rank, per_root on the others") {
    const Strategy s = r == n - 1 ? Strategy::v_collective : Strategy::per_root;
    CHECK_BAD_INPUT(((void)eager::reduce_scatter<Sharded<1>>(Tensor<float, Partial>::ones(comm, {5, total}), ls, s)),
                    "shardex::reduce_scatter", rank_str(r), global, mismatch,
                    std::string("strategy ") + strategy_name(s));
  }
  SUBCASE("all_reduce of different global shapes") {
    const Shape shape{5, r == 0 ? 11 : 10};
    const auto p = made_unchecked([&] { return Tensor<double, Partial>::ones(comm, shape); });
    CHECK_BAD_INPUT(((void)eager::all_reduce(p)), "shardex::all_reduce", rank_str(r), shape.str(), mismatch);
  }
  SUBCASE("all_gather of different global shapes") {
    const std::int64_t rows = r == 1 ? 6 : 5;
    const auto y = made_unchecked([&] {
      return Tensor<float, Sharded<1>>::ones(comm, {rows, total}, layout_mapping<Sharded<1>>(ls));
    });
    CHECK_BAD_INPUT(((void)eager::all_gather(y)), "shardex::all_gather", rank_str(r), "(" + std::to_string(rows) + ", ",
                    mismatch);
  }
  SUBCASE("all_reduce of different dtypes") {
    if (r == 0) {
      const auto p = made_unchecked([&] { return Tensor<float, Partial>::ones(comm, {4}); });
      CHECK_BAD_INPUT(((void)eager::all_reduce(p)), "shardex::all_reduce", rank_str(r), "float32", mismatch);
    } else {
      const auto p = made_unchecked([&] { return Tensor<double, Partial>::ones(comm, {4}); });
      CHECK_BAD_INPUT(((void)eager::all_reduce(p)), "shardex::all_reduce", rank_str(r), "float64", mismatch);
    }
  }
  SUBCASE("different operations: all_gather on rank 0, all_to_all on the others") {
    if (r == 0) {
      CHECK_BAD_INPUT(((void)eager::all_gather(x)), "shardex::all_gather", rank_str(r), global, mismatch,
                      "by the call they make: rank 0 | rank");
    } else {
      CHECK_BAD_INPUT(((void)eager::all_to_all<Sharded<0>>(x, all_on_last(n, 5))), "shardex::all_to_all", rank_str(r),
                      global, mismatch, n == 2 ? "rank 0 | rank 1)" : "rank 0 | ranks 1, 2");
    }
  }
  SUBCASE("reduce_scatter to lengths that differ across ranks") {
    std::vector<std::int64_t> mine = ls;
    if (r == 1) std::reverse(mine.begin(), mine.end());
    CHECK_BAD_INPUT(((void)eager::reduce_scatter<Sharded<1>>(Tensor<float, Partial>::ones(comm, {5, total}), mine)),
                    "shardex::reduce_scatter", rank_str(r), global, mismatch);
  }
  SUBCASE("all_gather of a tensor whose lengths differ across ranks") {
    // Made unchecked (Tensor::ones would report it), the disagreement surfaces at the first collective.
    std::vector<std::int64_t> mine = ls;
    if (r == 0) std::reverse(mine.begin(), mine.end());
    const auto y = made_unchecked([&] {
      return Tensor<float, Sharded<1>>::ones(comm, {5, total}, layout_mapping<Sharded<1>>(mine));
    });
    CHECK_BAD_INPUT(((void)eager::all_gather(y)), "shardex::all_gather", rank_str(r), global, mismatch);
  }
  SUBCASE("from_local with lengths that differ across ranks") {
    // Rank 0 believes the lengths are [2, 1, 3, ...], the others [1, 2, 3, ...]:
    // every rank's own extent fits its own list and the sums agree.
    std::vector<std::int64_t> mine = ls;
    if (r == 0) std::swap(mine[0], mine[1]);
    const Shape local{2, mine[static_cast<std::size_t>(r)]};
    std::vector<float> data(static_cast<std::size_t>(local.numel()), 1.0f);
    CHECK_BAD_INPUT(((void)Tensor<float, Sharded<1>>::from_local(comm, local, data, layout_mapping<Sharded<1>>(mine))),
                    "shardex::Tensor::from_local", rank_str(r), "local shape " + local.str(), mismatch);
  }
  SUBCASE("a strategy that does not apply, on one rank only") {
    // per_root has no all_to_all lowering: rank 0's input is bad, the others' fine.
    const Strategy s = r == 0 ? Strategy::per_root : Strategy::automatic;
    CHECK_BAD_INPUT(((void)eager::all_to_all<Sharded<0>>(x, all_on_last(n, 5), s)), "all_to_all", "on " + rank_str(0),
                    "strategy per_root does not apply");
  }
  SUBCASE("bad lengths on one rank only") {
    std::vector<std::int64_t> mine = ls;
    if (r == n - 1) mine.back() += 1;  // sums to total + 1 on the last rank
    const std::string msg = message_of([&] {
      (void)eager::reduce_scatter<Sharded<1>>(Tensor<float, Partial>::ones(comm, {5, total}), mine);
    });
    CHECK(msg.find("shardex::reduce_scatter on " + rank_str(n - 1)) != std::string::npos);
    CHECK(msg.find("but the global extent of dim 1 is " + std::to_string(total)) != std::string::npos);
    CHECK(msg.find(global) != std::string::npos);
    if (r != n - 1) CHECK(msg.find("reported by " + rank_str(n - 1)) != std::string::npos);
  }
  check_communicator_still_works();
}

TEST_CASE("a data span of the wrong size") {
  const auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  const int bad = n / 2;  // a middle rank (rank 0 on one rank)
  const auto ls = one_to_n(n);
  const Shape local{3, r + 1};
  // One element short on the bad rank.
  std::vector<double> data(static_cast<std::size_t>(local.numel() - (r == bad ? 1 : 0)), 1.0);
  const Shape bad_local{3, bad + 1};
  const std::string what = std::to_string(bad_local.numel() - 1) + " elements given for a local shape of " +
                           std::to_string(bad_local.numel());
  CHECK_BAD_INPUT(((void)Tensor<double, Sharded<1>>::from_local(comm, local, data, layout_mapping<Sharded<1>>(ls))),
                  "shardex::Tensor::from_local", "on " + rank_str(bad), "local shape " + bad_local.str(), what);
  CHECK_BAD_INPUT(((void)Tensor<double, Sharded<1>>::view_local(comm, local, data.data(), data.size(),
                                                                layout_mapping<Sharded<1>>(ls))),
                  "shardex::Tensor::from_local", "on " + rank_str(bad), what);
  // Whole layouts too: one element too many on the bad rank.
  std::vector<float> whole(static_cast<std::size_t>(6 + (r == bad ? 1 : 0)), 1.0f);
  CHECK_BAD_INPUT(((void)Tensor<float, Replicated>::from_local(comm, {2, 3}, whole)), "shardex::Tensor::from_local",
                  "on " + rank_str(bad), "local shape (2, 3)", "7 elements given for a local shape of 6");
  if (r != bad) {
    const std::string msg = message_of([&] { (void)Tensor<float, Replicated>::from_local(comm, {2, 3}, whole); });
    CHECK(msg.find("reported by " + rank_str(bad) + "; this is " + rank_str(r)) != std::string::npos);
  } else {
    // The bad rank makes the same collective call as its peers.
    CHECK_THROWS_AS(((void)Tensor<float, Replicated>::from_local(comm, {2, 3}, whole)), invalid_argument);
  }
  check_communicator_still_works();
}

TEST_CASE("an empty tensor (default-constructed or moved-from) throws wherever it is used, never reads freed memory") {
  const auto& comm = world();
  const int n = comm.size();
  std::vector<std::int64_t> lens(static_cast<std::size_t>(n), 2);
  lens[0] = 0;
  const Shape g{2 * (n - 1), 3};
  Tensor<float, Sharded<0>> empty;
  CHECK_FALSE(empty.valid());
  CHECK_THROWS_WITH_AS(eval(all_gather(empty)), doctest::Contains("the tensor is empty"), error);
  CHECK_THROWS_WITH_AS(apply_transition<Replicated>(empty, {}),
                       doctest::Contains("shardex::all_gather: the tensor is empty"), error);
  Tensor<float, Partial> p0;
  CHECK_THROWS_WITH_AS(apply_transition<Replicated>(p0, {}),
                       doctest::Contains("shardex::all_reduce: the tensor is empty"), error);
  CHECK_THROWS_WITH_AS((Tensor<float, Partial>(sum(p0))), doctest::Contains("the tensor is empty"), error);

  auto a = Tensor<float, Sharded<0>>::ones(comm, g, layout_mapping<Sharded<0>>(lens));
  auto b = std::move(a);
  CHECK_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): that is the point
  CHECK(a.data() == nullptr);
  CHECK(b.valid());
  CHECK_THROWS_WITH_AS((Tensor<float, Replicated>(all_gather(a))), doctest::Contains("moved-from"), error);
  Tensor<float, Replicated> r = all_gather(b);  // the tensor moved to still works
  CHECK(std::all_of(r.data(), r.data() + r.size(), [](float v) { return v == 1.f; }));
  Tensor<float, Sharded<0>> c;
  c = std::move(b);
  CHECK_FALSE(b.valid());  // NOLINT(bugprone-use-after-move)
  CHECK(c.valid());
  CHECK_THROWS_AS(backward(Tensor<float, Replicated>()), error);
}

TEST_CASE("shapes are checked when a tensor is made: negative extents and element counts that overflow 64 bits") {
  const auto& comm = world();
  CHECK_BAD_INPUT((Tensor<float, Partial>::zeros(comm, {-1, 5})), "shardex::Tensor::zeros", "(-1, 5)",
                  "extent -1 of dim 0 is negative");
  CHECK_BAD_INPUT((Tensor<float, Replicated>::ones(comm, {3, -2})), "extent -2 of dim 1 is negative");
  CHECK_BAD_INPUT((Tensor<double, Invariant>::zeros(comm, {std::int64_t(1) << 32, std::int64_t(1) << 32})),
                  "overflows 64 bits");
  std::vector<std::int64_t> lens(static_cast<std::size_t>(comm.size()), 0);
  lens[0] = 4;
  CHECK_BAD_INPUT((Tensor<float, Sharded<1>>::ones(comm, {-2, 4}, layout_mapping<Sharded<1>>(lens))),
                  "extent -2 of dim 0 is negative");
  std::vector<float> local(8, 1.f);
  CHECK_BAD_INPUT((Tensor<float, Replicated>::from_local(comm, Shape{-2, -4}, std::span<const float>(local))),
                  "negative", "shardex::Tensor::from_local");
}

TEST_CASE(
    "a local part too large for the backend's counts is refused before allocating; a failed allocation throws on every rank") {
  const auto& comm = world();
  const int n = comm.size(), last = n - 1;
  std::vector<std::int64_t> lens(static_cast<std::size_t>(n), 0);
  lens[static_cast<std::size_t>(last)] = 1;
#if SHARDEX_WITH_MPI
  // 2^31 floats (8 GiB) on the last rank only: refused on every rank, nothing allocated.
  const Shape huge{1, std::int64_t(1) << 31};
  CHECK_BAD_INPUT((Tensor<float, Sharded<0>>::zeros(comm, huge, layout_mapping<Sharded<0>>(lens))),
                  "shardex::Tensor::zeros on rank " + std::to_string(last), "2147483648 elements, more than one call",
                  "2147483647 for MPI's int counts");
  CHECK(host::pool_stats().in_use_bytes < (std::int64_t(1) << 30));
#endif
  // 2 GiB on the last rank, under an address-space limit there: its
  // allocation fails, and every rank throws with its message (not a
  // std::bad_alloc on one rank while the others go on).
  rlimit old{};
  getrlimit(RLIMIT_AS, &old);
  const bool limited = comm.rank() == last;
  if (limited) {
    long pages = 0;
    if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    rlimit lim = old;
    lim.rlim_cur = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (rlim_t(512) << 20);
    if (pages > 0 && (old.rlim_cur == RLIM_INFINITY || lim.rlim_cur < old.rlim_cur)) setrlimit(RLIMIT_AS, &lim);
  }
  const std::string msg = message_of([&] {
    (void)Tensor<double, Sharded<0>>::zeros(comm, {1, std::int64_t(1) << 28}, layout_mapping<Sharded<0>>(lens));
  });
  if (limited) setrlimit(RLIMIT_AS, &old);
  CHECK_MESSAGE(msg.find("shardex::Tensor::zeros on rank " + std::to_string(last)) != std::string::npos, msg);
  CHECK_MESSAGE(msg.find("cannot allocate its local part (1, 268435456) (268435456 elements, 2147483648 bytes)") !=
                    std::string::npos,
                msg);
  check_communicator_still_works();
}

// Needs a rank that differs from another: skipped (and said so) at one rank.
TEST_CASE("the factories agree across ranks: lengths wrong on one rank, or shapes that differ, throw on every rank" *
          doctest::skip(test::launched_ranks() < 2)) {
  const auto& comm = world();
  const int n = comm.size();
  REQUIRE(n >= 2);
  std::vector<std::int64_t> lens(static_cast<std::size_t>(n), 1);
  if (comm.rank() == 1) lens[0] = 2;  // sums to n + 1 on rank 1 only
  const Shape g{n, 2};
  CHECK_BAD_INPUT((Tensor<float, Sharded<0>>::zeros(comm, g, layout_mapping<Sharded<0>>(lens))),
                  "shardex::Tensor::zeros on rank 1",
                  "(layout S(0)[dyn], global shape (" + std::to_string(n) + ", 2))");
  CHECK_BAD_INPUT((Tensor<float, Sharded<0>>::ones(comm, g, layout_mapping<Sharded<0>>(lens))),
                  "shardex::Tensor::full on rank 1");
  // slice does not communicate, but its lengths must hold on every rank too.
  CHECK_BAD_INPUT(((void)eager::dynamic_slice<Sharded<0>>(Tensor<float, Replicated>::ones(comm, g), lens)), "slice",
                  "on rank 1");
  // Valid on each rank alone, different across ranks.
  const Shape mine{n, comm.rank() == 1 ? 3 : 2};
  CHECK_BAD_INPUT((Tensor<double, Replicated>::zeros(comm, mine)), "the ranks are not making the same call");
  // Still in step: a good call afterwards works everywhere.
  auto ok = Tensor<float, Replicated>::ones(comm, g);
  CHECK(ok.size() == 2 * n);
}

}  // namespace shardex_test_bad_input
