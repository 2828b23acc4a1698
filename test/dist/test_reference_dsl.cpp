// SPDX-License-Identifier: MIT
// The four-rank test of the reference module (shared/reference/collectives.py,
// test()) in the lazy DSL spelling: each loss is an expression assigned to a
// tensor whose layout is in its type (`Tensor<float, Replicated> loss =
// sum(all_gather(p, s)) / 4.0;`), which evaluates it. For every case: each
// rank's exact loss, every element of the gradient, and the layouts
// (static_assert). test_reference.cpp checks the same values in the eager
// spelling (eager/eager.hpp), with more lowerings and element types.
//
// The reference's all_gather / reduce_scatter lower `padded`; its
// *_by_group_call are Strategy::per_root; automatic is shardex's choice.
// World size 4 only (the reference's lengths are for four ranks).
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <type_traits>

#include <shardex.hpp>

#include "support/dist.hpp"

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_reference_dsl {

using namespace shardex;
using shardex::test::world;

namespace {

template <std::int64_t... Ls>
using S0 = Sharded<0, lengths<Ls...>>;
template <std::int64_t... Ls>
using S1 = Sharded<1, lengths<Ls...>>;
template <class X, class L>
inline constexpr bool is_layout = std::same_as<typename std::remove_cvref_t<X>::layout_type, L>;

/// Local elements of a 2-d gradient that differ from want(i, j) at the global index (i, j).
template <class G>
int mismatches(const G& g, const std::function<double(std::int64_t, std::int64_t)>& want) {
  std::int64_t row0 = 0, col0 = 0;
  if constexpr (is_sharded_v<typename G::layout_type>) (G::layout_type::dim == 0 ? row0 : col0) = g.global_offset();
  int bad = 0;
  for (std::int64_t i = 0; i < g.local_shape()[0]; ++i)
    for (std::int64_t j = 0; j < g.local_shape()[1]; ++j)
      bad += g(i, j) != static_cast<float>(want(row0 + i, col0 + j));
  return bad;
}
const auto ones = [](std::int64_t, std::int64_t) { return 1.0; };

constexpr Strategy gather_scatter[] = {Strategy::padded, Strategy::per_root, Strategy::automatic};

}  // namespace

TEST_CASE("reference (DSL): all_gather and all_gather_by_group_call") {
  const auto& comm = world();
  SHARDEX_REQUIRE_ALL(comm.size() == 4);
  for (Strategy s : gather_scatter) {
    CAPTURE(strategy_name(s));
    // self.p = ones(5, rank + 1); all_gather(self.p, 1, [1,2,3,4], rank).sum() / 4
    auto p = Tensor<float, S1<1, 2, 3, 4>>::ones(comm, shape_c<5, 10>).requires_grad();
    static_assert(is_layout<decltype(all_gather(p, s)), Replicated>);
    Tensor<float, Replicated> loss = sum(all_gather(p, s)) / 4.0;
    CHECK(loss() == 12.5f);  // expecting: losses are the same, grads are 1
    backward(loss);
    static_assert(is_layout<decltype(p.grad()), S1<1, 2, 3, 4>>);
    CHECK(p.grad().local_shape() == Shape{5, comm.rank() + 1});
    CHECK(mismatches(p.grad(), ones) == 0);
  }
}

TEST_CASE("reference (DSL): all_reduce") {
  const auto& comm = world();
  SHARDEX_REQUIRE_ALL(comm.size() == 4);
  // self.p = ones(5, 4) * rank; all_reduce(self.p).sum() / 4
  auto p = Tensor<float, Partial>::full(comm, shape_c<5, 4>, float(comm.rank())).requires_grad();
  static_assert(is_layout<decltype(all_reduce(p)), Replicated>);
  Tensor<float, Replicated> loss = sum(all_reduce(p)) / 4.0;
  CHECK(loss() == 30.0f);  // expecting: losses are the same (20 * (0 + 1 + 2 + 3) / 4), grads are 1
  backward(loss);
  static_assert(is_layout<decltype(p.grad()), Replicated>);
  CHECK(mismatches(p.grad(), ones) == 0);
}

TEST_CASE("reference (DSL): reduce_scatter and reduce_scatter_by_group_call") {
  const auto& comm = world();
  SHARDEX_REQUIRE_ALL(comm.size() == 4);
  const int r = comm.rank();
  for (Strategy s : gather_scatter) {
    CAPTURE(strategy_name(s));
    // self.p = ones(5, 10); reduce_scatter(self.p, 1, [1,2,3,4], rank).sum()
    auto p = Tensor<float, Partial>::ones(comm, shape_c<5, 10>).requires_grad();
    static_assert(is_layout<decltype(reduce_scatter<S1<1, 2, 3, 4>>(p, s)), S1<1, 2, 3, 4>>);
    Tensor<float, Partial> loss = sum(reduce_scatter<S1<1, 2, 3, 4>>(p, s));
    CHECK(loss() == float(20 * (r + 1)));  // expecting: losses proportional to rank, grads are 1
    backward(loss);
    static_assert(is_layout<decltype(p.grad()), Replicated>);
    CHECK(mismatches(p.grad(), ones) == 0);
  }
}

TEST_CASE("reference (DSL): dynamic_slice") {
  const auto& comm = world();
  SHARDEX_REQUIRE_ALL(comm.size() == 4);
  const int r = comm.rank();
  // self.p = ones(5, 10); dynamic_slice(self.p, 1, [1,2,3,4], rank).sum()
  auto p = Tensor<float, Replicated>::ones(comm, shape_c<5, 10>).requires_grad();
  static_assert(is_layout<decltype(slice<S1<1, 2, 3, 4>>(p)), S1<1, 2, 3, 4>>);
  Tensor<float, Partial> loss = sum(slice<S1<1, 2, 3, 4>>(p));
  CHECK(loss() == float(5 * (r + 1)));  // expecting: losses proportional to rank, grads are partially 1
  backward(loss);
  static_assert(is_layout<decltype(p.grad()), Partial>);
  // 1 in this rank's columns [r (r + 1) / 2, that + r + 1), 0 elsewhere.
  const std::int64_t lo = r * (r + 1) / 2, hi = lo + r + 1;
  CHECK(mismatches(p.grad(), [&](std::int64_t, std::int64_t j) { return j >= lo && j < hi ? 1.0 : 0.0; }) == 0);
  // The reference's name spells the same expression.
  Tensor<float, Partial> loss2 = sum(dynamic_slice<S1<1, 2, 3, 4>>(p.detach()));
  CHECK(loss2() == loss());
}

TEST_CASE("reference (DSL): all_to_all") {
  const auto& comm = world();
  SHARDEX_REQUIRE_ALL(comm.size() == 4);
  const int r = comm.rank();
  // self.p = ones(10, rank + 1); all_to_all(self.p, 0, 1, [4,3,2,1], [1,2,3,4], rank).sum()
  auto p = Tensor<float, S1<1, 2, 3, 4>>::ones(comm, shape_c<10, 10>).requires_grad();
  static_assert(is_layout<decltype(all_to_all<S0<4, 3, 2, 1>>(p)), S0<4, 3, 2, 1>>);
  const Tensor<float, S0<4, 3, 2, 1>> y = all_to_all<S0<4, 3, 2, 1>>(p);
  CHECK(y.local_shape() == Shape{4 - r, 10});
  Tensor<float, Partial> loss = sum(y);
  CHECK(loss() == float(10 * (4 - r)));  // expecting: losses reverse proportional to rank, grads are 1
  backward(loss);
  static_assert(is_layout<decltype(p.grad()), S1<1, 2, 3, 4>>);
  CHECK(p.grad().local_shape() == Shape{10, r + 1});
  CHECK(mismatches(p.grad(), ones) == 0);
}

TEST_CASE("reference (DSL): all_to_all with zero lengths") {
  const auto& comm = world();
  SHARDEX_REQUIRE_ALL(comm.size() == 4);
  const auto r = static_cast<std::size_t>(comm.rank());
  const std::int64_t cat[] = {0, 2, 0, 8}, split[] = {5, 0, 5, 0};
  // self.p = ones(10, [0,2,0,8][rank]); all_to_all(self.p, 0, 1, [5,0,5,0], [0,2,0,8], rank)
  auto p = Tensor<float, S1<0, 2, 0, 8>>::ones(comm, shape_c<10, 10>).requires_grad();
  const Tensor<float, S0<5, 0, 5, 0>> result = all_to_all<S0<5, 0, 5, 0>>(p);
  // expecting (p.shape -> result.shape): (10, 0) -> (5, 10), (10, 2) -> (0, 10), (10, 0) -> (5, 10), (10, 8) -> (0, 10)
  CHECK(p.local_shape() == Shape{10, cat[r]});
  CHECK(result.local_shape() == Shape{split[r], 10});
  CHECK(mismatches(result, ones) == 0);
  // Beyond the reference: its backward, zero-sized gradients included.
  Tensor<float, Partial> loss = sum(result);
  CHECK(loss() == float(10 * split[r]));
  backward(loss);
  static_assert(is_layout<decltype(p.grad()), S1<0, 2, 0, 8>>);
  CHECK(p.grad().local_shape() == Shape{10, cat[r]});
  CHECK(mismatches(p.grad(), ones) == 0);
}

TEST_CASE("reference (DSL): replicate of an Invariant parameter") {
  const auto& comm = world();
  SHARDEX_REQUIRE_ALL(comm.size() == 4);
  // self.p = ones(5, 5); replicate(self.p).sum() / 4
  auto p = Tensor<float, Invariant>::ones(comm, shape_c<5, 5>).requires_grad();
  static_assert(is_layout<decltype(replicate(p)), Replicated>);
  Tensor<float, Replicated> loss = sum(replicate(p)) / 4.0;
  CHECK(loss() == 6.25f);  // expecting: losses are the same, grads are 1 (an all-reduce of four 1/4)
  backward(loss);
  static_assert(is_layout<decltype(p.grad()), Invariant>);
  CHECK(mismatches(p.grad(), ones) == 0);
}

}  // namespace shardex_test_reference_dsl
