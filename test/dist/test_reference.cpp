// SPDX-License-Identifier: MIT
// The four-rank test of the reference module (shared/reference/collectives.py,
// test()) as an acceptance test, reproduced exactly: for every case, each
// rank's loss and every element of every gradient, and the gradient's layout
// (static_assert). Beyond the reference: every case runs with each lowering
// that applies (the reference's two, plus v_collective and automatic), with
// float and double, with static and with run-time lengths; all_to_all with
// zero lengths also runs backward; and every case checks that gradients
// accumulate over two backward passes and reset with zero_grad().
//
// World size 4 only (the reference's lengths are for four ranks).
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <shardex.hpp>

#include "support/dist.hpp"

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_reference {

using namespace shardex;
using shardex::test::world;

namespace {

/// One configuration of the suite: element type, and static or run-time lengths.
template <class T, bool Dynamic>
struct Cfg {
  using value_type = T;
  static constexpr bool dynamic = Dynamic;
};

/// The sharding `Sharded<D, lengths<Ls...>>`, or `Sharded<D>` given the same
/// lengths at run time, as the configuration says.
template <class C, int D, std::int64_t... Ls>
struct Sh {
  using layout = std::conditional_t<C::dynamic, Sharded<D>, Sharded<D, lengths<Ls...>>>;
  static std::vector<std::int64_t> lens() { return {Ls...}; }
  static layout_mapping<layout> mapping() {
    if constexpr (C::dynamic)
      return layout_mapping<layout>(lens());
    else
      return {};
  }
  static std::int64_t len(int r) { return lens()[static_cast<std::size_t>(r)]; }
  static std::int64_t offset(int r) {
    std::int64_t o = 0;
    for (int i = 0; i < r; ++i) o += len(i);
    return o;
  }
};

// The reference's operations, for static and run-time lengths alike.
template <class To, class X>
auto reduce_scatter_to(const X& x, Strategy s) {
  if constexpr (To::layout::has_static_lengths)
    return eager::reduce_scatter<typename To::layout>(x, s);
  else
    return eager::reduce_scatter<typename To::layout>(x, To::lens(), s);
}
template <class To, class X>
auto dynamic_slice_to(const X& x) {
  if constexpr (To::layout::has_static_lengths)
    return eager::dynamic_slice<typename To::layout>(x);
  else
    return eager::dynamic_slice<typename To::layout>(x, To::lens());
}
template <class To, class X>
auto all_to_all_to(const X& x, Strategy s) {
  if constexpr (To::layout::has_static_lengths)
    return eager::all_to_all<typename To::layout>(x, s);
  else
    return eager::all_to_all<typename To::layout>(x, To::lens(), s);
}

/// Local elements (i, j) of a 2-d tensor that differ from want * expected(i, j),
/// where (i, j) is the *global* index.
template <class X, class F>
int count_grad_mismatches(const X& g, F&& expected, double want) {
  using T = typename X::value_type;
  const Shape& ls = g.local_shape();
  std::int64_t col0 = 0;
  if constexpr (is_sharded_v<typename X::layout_type>)
    if (X::layout_type::dim == 1) col0 = g.global_offset();
  std::int64_t row0 = 0;
  if constexpr (is_sharded_v<typename X::layout_type>)
    if (X::layout_type::dim == 0) row0 = g.global_offset();
  int bad = 0;
  for (std::int64_t i = 0; i < ls[0]; ++i)
    for (std::int64_t j = 0; j < ls[1]; ++j) bad += g(i, j) != static_cast<T>(want * expected(row0 + i, col0 + j));
  return bad;
}

const auto ones_everywhere = [](std::int64_t, std::int64_t) { return 1.0; };

/// One case of the reference: loss = forward(p) must be `want_loss` on this
/// rank, and p's gradient expected(i, j) at every global index (i, j) of its
/// local part. Then a second forward and backward doubles the gradient, and
/// zero_grad() makes the next backward start from zero.
template <class P, class Fwd, class G>
void check_case(P& p, Fwd&& forward, double want_loss, G&& expected) {
  using T = typename P::value_type;
  auto loss = forward(p);
  CHECK(loss.shape().numel() == 1);
  CHECK(loss() == static_cast<T>(want_loss));
  CHECK_FALSE(p.has_grad());
  backward(loss);
  SHARDEX_REQUIRE_ALL(p.has_grad());
  const auto& g = p.grad();
  CHECK(g.shape() == p.shape());
  CHECK(g.local_shape() == p.local_shape());
  CHECK(count_grad_mismatches(g, expected, 1.0) == 0);

  auto loss2 = forward(p);
  CHECK(loss2() == static_cast<T>(want_loss));
  backward(loss2);
  CHECK(count_grad_mismatches(p.grad(), expected, 2.0) == 0);

  p.zero_grad();
  CHECK_FALSE(p.has_grad());
  backward(forward(p));
  SHARDEX_REQUIRE_ALL(p.has_grad());
  CHECK(count_grad_mismatches(p.grad(), expected, 1.0) == 0);
}

#define SHARDEX_REFERENCE_CONFIGS Cfg<float, false>, Cfg<double, false>, Cfg<float, true>, Cfg<double, true>

/// The reference's lowering for all_gather/reduce_scatter is `padded`, its
/// *_by_group_call is `per_root`; v_collective and automatic are shardex's.
constexpr Strategy gather_scatter_strategies[] = {Strategy::padded, Strategy::per_root, Strategy::v_collective,
                                                  Strategy::automatic};
constexpr Strategy all_to_all_strategies[] = {Strategy::padded, Strategy::v_collective, Strategy::send_recv,
                                              Strategy::automatic};

}  // namespace

TEST_CASE_TEMPLATE("reference: all_gather and all_gather_by_group_call", C, SHARDEX_REFERENCE_CONFIGS) {
  using T = typename C::value_type;
  using S1 = Sh<C, 1, 1, 2, 3, 4>;
  const auto& comm = world();
  SHARDEX_REQUIRE_ALL(comm.size() == 4);
  const int r = comm.rank();
  for (Strategy s : gather_scatter_strategies) {
    CAPTURE(strategy_name(s));
    // self.p = ones(5, rank + 1); all_gather(self.p, 1, [1,2,3,4], rank).sum() / 4
    auto p = Tensor<T, typename S1::layout>::ones(comm, {5, 10}, S1::mapping()).requires_grad();
    CHECK(p.local_shape() == Shape{5, r + 1});
    const auto forward = [s](const auto& x) {
      auto y = eager::all_gather(x, s);
      static_assert(std::same_as<decltype(y), Tensor<T, Replicated>>);
      return eager::scale(eager::sum(y), 0.25);
    };
    static_assert(std::same_as<decltype(forward(p)), Tensor<T, Replicated>>);
    static_assert(std::same_as<std::remove_cvref_t<decltype(p.grad())>, Tensor<T, typename S1::layout>>);
    // expecting: losses are the same, grads are 1
    check_case(p, forward, 12.5, ones_everywhere);
    CHECK(p.grad().mapping() == p.mapping());
  }
}

TEST_CASE_TEMPLATE("reference: all_reduce", C, SHARDEX_REFERENCE_CONFIGS) {
  using T = typename C::value_type;
  const auto& comm = world();
  SHARDEX_REQUIRE_ALL(comm.size() == 4);
  const int r = comm.rank();
  // self.p = ones(5, 4) * rank; all_reduce(self.p).sum() / 4
  auto p = Tensor<T, Partial>::full(comm, {5, 4}, T(r)).requires_grad();
  const auto forward = [](const auto& x) {
    auto y = eager::all_reduce(x);
    static_assert(std::same_as<decltype(y), Tensor<T, Replicated>>);
    return eager::scale(eager::sum(y), 0.25);
  };
  static_assert(std::same_as<decltype(forward(p)), Tensor<T, Replicated>>);
  static_assert(std::same_as<std::remove_cvref_t<decltype(p.grad())>, Tensor<T, Replicated>>);
  // expecting: losses are the same (5 * 4 * (0 + 1 + 2 + 3) / 4), grads are 1
  check_case(p, forward, 30.0, ones_everywhere);
}

TEST_CASE_TEMPLATE("reference: reduce_scatter and reduce_scatter_by_group_call", C, SHARDEX_REFERENCE_CONFIGS) {
  using T = typename C::value_type;
  using S1 = Sh<C, 1, 1, 2, 3, 4>;
  const auto& comm = world();
  SHARDEX_REQUIRE_ALL(comm.size() == 4);
  const int r = comm.rank();
  for (Strategy s : gather_scatter_strategies) {
    CAPTURE(strategy_name(s));
    // self.p = ones(5, 10); reduce_scatter(self.p, 1, [1,2,3,4], rank).sum()
    auto p = Tensor<T, Partial>::ones(comm, {5, 10}).requires_grad();
    const auto forward = [s](const auto& x) {
      auto y = reduce_scatter_to<S1>(x, s);
      static_assert(std::same_as<decltype(y), Tensor<T, typename S1::layout>>);
      return eager::sum(y);
    };
    static_assert(std::same_as<decltype(forward(p)), Tensor<T, Partial>>);
    static_assert(std::same_as<std::remove_cvref_t<decltype(p.grad())>, Tensor<T, Replicated>>);
    // expecting: losses proportional to rank (5 * (r + 1) columns of 4), grads are 1
    check_case(p, forward, 20.0 * (r + 1), ones_everywhere);
  }
}

TEST_CASE_TEMPLATE("reference: dynamic_slice", C, SHARDEX_REFERENCE_CONFIGS) {
  using T = typename C::value_type;
  using S1 = Sh<C, 1, 1, 2, 3, 4>;
  const auto& comm = world();
  SHARDEX_REQUIRE_ALL(comm.size() == 4);
  const int r = comm.rank();
  // self.p = ones(5, 10); dynamic_slice(self.p, 1, [1,2,3,4], rank).sum()
  auto p = Tensor<T, Replicated>::ones(comm, {5, 10}).requires_grad();
  const auto forward = [](const auto& x) {
    auto y = dynamic_slice_to<S1>(x);
    static_assert(std::same_as<decltype(y), Tensor<T, typename S1::layout>>);
    return eager::sum(y);
  };
  static_assert(std::same_as<decltype(forward(p)), Tensor<T, Partial>>);
  static_assert(std::same_as<std::remove_cvref_t<decltype(p.grad())>, Tensor<T, Partial>>);
  // expecting: losses proportional to rank, grads are 1 in this rank's columns
  // [off_r, off_r + r + 1) and 0 elsewhere
  const std::int64_t lo = S1::offset(r), hi = lo + S1::len(r);
  CHECK(lo == r * (r + 1) / 2);
  check_case(p, forward, 5.0 * (r + 1),
             [lo, hi](std::int64_t, std::int64_t j) { return j >= lo && j < hi ? 1.0 : 0.0; });
  // Spelled out for rank 0 and rank 3, the two ends.
  if (r == 0)
    CHECK(format_local(p.grad()) ==
          "[[1, 0, 0, 0, 0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0, 0, 0], "
          "[1, 0, 0, 0, 0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0, 0, 0], "
          "[1, 0, 0, 0, 0, 0, 0, 0, 0, 0]]");
  if (r == 3)
    CHECK(format_local(p.grad()) ==
          "[[0, 0, 0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0, 1, 1, 1, 1], "
          "[0, 0, 0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0, 1, 1, 1, 1], "
          "[0, 0, 0, 0, 0, 0, 1, 1, 1, 1]]");
}

TEST_CASE_TEMPLATE("reference: all_to_all", C, SHARDEX_REFERENCE_CONFIGS) {
  using T = typename C::value_type;
  using S1 = Sh<C, 1, 1, 2, 3, 4>;
  using S0 = Sh<C, 0, 4, 3, 2, 1>;
  const auto& comm = world();
  SHARDEX_REQUIRE_ALL(comm.size() == 4);
  const int r = comm.rank();
  for (Strategy s : all_to_all_strategies) {
    CAPTURE(strategy_name(s));
    // self.p = ones(10, rank + 1); all_to_all(self.p, 0, 1, [4,3,2,1], [1,2,3,4], rank).sum()
    auto p = Tensor<T, typename S1::layout>::ones(comm, {10, 10}, S1::mapping()).requires_grad();
    CHECK(p.local_shape() == Shape{10, r + 1});
    CHECK(all_to_all_to<S0>(p.detach(), s).local_shape() == Shape{4 - r, 10});
    const auto forward = [s](const auto& x) {
      auto y = all_to_all_to<S0>(x, s);
      static_assert(std::same_as<decltype(y), Tensor<T, typename S0::layout>>);
      return eager::sum(y);
    };
    static_assert(std::same_as<decltype(forward(p)), Tensor<T, Partial>>);
    static_assert(std::same_as<std::remove_cvref_t<decltype(p.grad())>, Tensor<T, typename S1::layout>>);
    // expecting: losses reverse proportional to rank (4 - r rows of 10), grads are 1
    check_case(p, forward, 10.0 * (4 - r), ones_everywhere);
  }
}

TEST_CASE_TEMPLATE("reference: all_to_all with zero lengths", C, SHARDEX_REFERENCE_CONFIGS) {
  using T = typename C::value_type;
  using Cat = Sh<C, 1, 0, 2, 0, 8>;
  using Split = Sh<C, 0, 5, 0, 5, 0>;
  const auto& comm = world();
  SHARDEX_REQUIRE_ALL(comm.size() == 4);
  const int r = comm.rank();
  const std::int64_t cat_len[] = {0, 2, 0, 8}, split_len[] = {5, 0, 5, 0};
  const auto ur = static_cast<std::size_t>(r);
  for (Strategy s : all_to_all_strategies) {
    CAPTURE(strategy_name(s));
    // self.p = ones(10, [0,2,0,8][rank]); all_to_all(self.p, 0, 1, [5,0,5,0], [0,2,0,8], rank)
    auto p = Tensor<T, typename Cat::layout>::ones(comm, {10, 10}, Cat::mapping()).requires_grad();
    auto result = all_to_all_to<Split>(p, s);
    // expecting (rank: p.shape -> result.shape): 0: (10, 0) -> (5, 10), 1: (10, 2) -> (0, 10),
    //                                            2: (10, 0) -> (5, 10), 3: (10, 8) -> (0, 10)
    CHECK(p.local_shape() == Shape{10, cat_len[ur]});
    CHECK(result.local_shape() == Shape{split_len[ur], 10});
    CHECK(result.shape() == Shape{10, 10});
    CHECK(p.size() == 10 * cat_len[ur]);
    CHECK(result.size() == 10 * split_len[ur]);
    int not_one = 0;
    for (auto v : result.local()) not_one += v != T(1);
    CHECK(not_one == 0);
    // Backward too: the ranks holding nothing get empty gradients, the others ones.
    const auto forward = [s](const auto& x) { return eager::sum(all_to_all_to<Split>(x, s)); };
    static_assert(std::same_as<std::remove_cvref_t<decltype(p.grad())>, Tensor<T, typename Cat::layout>>);
    check_case(p, forward, 10.0 * static_cast<double>(split_len[ur]), ones_everywhere);
    CHECK(p.grad().size() == 10 * cat_len[ur]);
    CHECK(p.grad().local().empty() == (cat_len[ur] == 0));
  }
}

TEST_CASE_TEMPLATE("reference: replicate of an Invariant parameter", C, SHARDEX_REFERENCE_CONFIGS) {
  using T = typename C::value_type;
  const auto& comm = world();
  SHARDEX_REQUIRE_ALL(comm.size() == 4);
  // self.p = ones(5, 5); replicate(self.p).sum() / 4
  auto p = Tensor<T, Invariant>::ones(comm, {5, 5}).requires_grad();
  const auto forward = [](const auto& x) {
    auto y = eager::replicate(x);
    static_assert(std::same_as<decltype(y), Tensor<T, Replicated>>);
    return eager::scale(eager::sum(y), 0.25);
  };
  static_assert(std::same_as<decltype(forward(p)), Tensor<T, Replicated>>);
  static_assert(std::same_as<std::remove_cvref_t<decltype(p.grad())>, Tensor<T, Invariant>>);
  // expecting: losses are the same, grads are 1 (the backward all-reduces four contributions of 1/4)
  check_case(p, forward, 6.25, ones_everywhere);
}

}  // namespace shardex_test_reference
