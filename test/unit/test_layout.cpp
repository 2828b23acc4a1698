// SPDX-License-Identifier: MIT
// Layouts, lengths, dual and the transition table: compile-time facts checked
// with static_assert, run-time mapping checks with doctest.
#include <doctest/doctest.h>

#include <shardex.hpp>

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_layout {

using namespace shardex;

// ---- static lengths: facts are constant expressions ---------------------------
using L1234 = lengths<1, 2, 3, 4>;
static_assert(L1234::count == 4 && L1234::sum == 10 && L1234::max == 4);
static_assert(L1234::offsets[0] == 0 && L1234::offsets[1] == 1 && L1234::offsets[3] == 6 && L1234::offsets[4] == 10);
static_assert(!L1234::is_even && lengths<3, 3, 3>::is_even);
static_assert(lengths<5, 0, 5, 0>::sum == 10 && lengths<0, 0>::max == 0);
static_assert(is_static_lengths_v<L1234> && !is_static_lengths_v<dynamic_lengths>);

// ---- layouts and dual ------------------------------------------------------------
static_assert(LayoutTag<Invariant> && LayoutTag<Replicated> && LayoutTag<Partial> && LayoutTag<Sharded<2>>);
static_assert(!LayoutTag<int> && !LayoutTag<L1234>);
static_assert(std::same_as<dual_t<Invariant>, Invariant>);
static_assert(std::same_as<dual_t<Replicated>, Partial>);
static_assert(std::same_as<dual_t<Partial>, Replicated>);
static_assert(std::same_as<dual_t<Sharded<1, L1234>>, Sharded<1, L1234>>);
template <class L>
constexpr bool dual_is_involution = std::same_as<dual_t<dual_t<L>>, L>;
static_assert(dual_is_involution<Invariant> && dual_is_involution<Replicated> && dual_is_involution<Partial> &&
              dual_is_involution<Sharded<0>>);
static_assert(Sharded<1, L1234>::has_static_lengths && !Sharded<1>::has_static_lengths && Sharded<3>::dim == 3);
static_assert(Partial::needs_reduction() && !Replicated::needs_reduction() && !Sharded<0>::is_always_whole());

// A static mapping costs nothing inside a tensor.
static_assert(std::is_empty_v<layout_mapping<Sharded<1, L1234>>> && std::is_empty_v<layout_mapping<Partial>>);

// ---- the transition table and its derived adjoints ---------------------------------
using S1 = Sharded<1, L1234>;
using S0 = Sharded<0, lengths<4, 3, 2, 1>>;
template <class F, class T>
constexpr bool adjoint_is = std::same_as<adjoint_t<F, T>, transition<dual_t<T>, dual_t<F>>>&& adjoint_t<F, T>::exists;
// The six operations of the contract (docs/concepts/transitions.md), each
// with the adjoint it must have.
static_assert(std::same_as<adjoint_t<S1, Replicated>, transition<Partial, S1>>);  // all_gather <-> reduce_scatter
static_assert(std::same_as<adjoint_t<Partial, S1>, transition<S1, Replicated>>);  // reduce_scatter <-> all_gather
static_assert(std::same_as<adjoint_t<Partial, Replicated>, transition<Partial, Replicated>>);  // all_reduce
static_assert(std::same_as<adjoint_t<Replicated, S1>, transition<S1, Partial>>);               // slice <-> zero-pad
static_assert(std::same_as<adjoint_t<S1, S0>, transition<S0, S1>>);                            // all_to_all back
static_assert(
    std::same_as<adjoint_t<Invariant, Replicated>, transition<Partial, Invariant>>);  // replicate <-> all_reduce
// ... and the ones that follow from the same rule.
static_assert(std::same_as<adjoint_t<Partial, Invariant>, transition<Invariant, Replicated>>);  // Megatron's g
static_assert(std::same_as<adjoint_t<S1, Invariant>, transition<Invariant, S1>>);  // gather into I <-> slice
static_assert(adjoint_is<S1, Replicated> && adjoint_is<Partial, S1> && adjoint_is<Partial, Replicated> &&
              adjoint_is<Replicated, S1> && adjoint_is<S1, Partial> && adjoint_is<S1, S0> &&
              adjoint_is<Invariant, Replicated> && adjoint_is<Partial, Invariant> && adjoint_is<S1, Invariant> &&
              adjoint_is<Invariant, S1>);
// Pairs no single lowering connects are not in the table.
static_assert(!has_transition_v<Replicated, Invariant> && !has_transition_v<Replicated, Partial> &&
              !has_transition_v<Invariant, Partial>);
static_assert(std::string_view(transition<S1, Replicated>::name) == "all_gather" &&
              std::string_view(transition<Invariant, Replicated>::name) == "replicate");

TEST_CASE("layout names follow the notation of the docs") {
  CHECK(layout_name<Invariant>() == "I");
  CHECK(layout_name<Replicated>() == "R");
  CHECK(layout_name<Partial>() == "P(sum)");
  CHECK(layout_name<S1>() == "S(1)[1,2,3,4]");
  CHECK(layout_name<Sharded<0>>() == "S(0)[dyn]");
}

TEST_CASE("dynamic lengths live in the mapping and are checked against the communicator") {
  layout_mapping<Sharded<0>> m({2, 0, 3});
  CHECK(m.lengths().size() == 3);
  CHECK(offsets_of(m.lengths()) == std::vector<std::int64_t>{0, 2, 2, 5});
  CHECK_NOTHROW(check_mapping<Sharded<0>>(m, Shape{5, 7}, 3, 1, "test"));
  CHECK_THROWS_WITH_AS(check_mapping<Sharded<0>>(m, Shape{5, 7}, 4, 1, "test"),
                       doctest::Contains("has 3 entries but the communicator has 4 ranks"), invalid_argument);
  CHECK_THROWS_WITH_AS(check_mapping<Sharded<0>>(m, Shape{6, 7}, 3, 1, "test"),
                       doctest::Contains("sum to 5 but the global extent of dim 0 is 6"), invalid_argument);
  layout_mapping<Sharded<0>> neg({2, -1, 4});
  CHECK_THROWS_WITH_AS(check_mapping<Sharded<0>>(neg, Shape{5}, 3, 0, "test"),
                       doctest::Contains("length of rank 1 is negative"), invalid_argument);
  layout_mapping<Sharded<2>> far({5});
  CHECK_THROWS_WITH_AS(check_mapping<Sharded<2>>(far, Shape{5, 7}, 1, 0, "test"),
                       doctest::Contains("sharded dim 2 is out of range for a 2-d tensor"), invalid_argument);
}

TEST_CASE("Shape and DimView") {
  const Shape s{2, 3, 4};
  CHECK(s.numel() == 24);
  CHECK(s.outer(1) == 2);
  CHECK(s.inner(1) == 4);
  CHECK(s.with(1, 0).numel() == 0);
  CHECK(s.str() == "(2, 3, 4)");
  const DimView v = DimView::of(s, 2);
  CHECK((v.outer == 6 && v.extent == 4 && v.inner == 1));
  CHECK(Shape{}.numel() == 1);
}

TEST_CASE("the cost model picks v collectives on MPI, and without them an equal-count collective for even lengths") {
  const std::vector<std::int64_t> even{3, 3, 3, 3}, uneven{1, 2, 3, 4}, skewed{0, 0, 0, 100}, two{1, 3};
  CHECK(choose_strategy(CollectiveOp::reduce_scatter, even, 64, true) == Strategy::v_collective);
  CHECK(choose_strategy(CollectiveOp::all_gather, even, 1 << 20, false) == Strategy::padded);
  CHECK(choose_strategy(CollectiveOp::all_gather, two, 64, true) == Strategy::v_collective);
  CHECK(choose_strategy(CollectiveOp::all_gather, uneven, 1 << 20, true) == Strategy::v_collective);
  // The measured exceptions on MPI: small all_gathers over 3-8 ranks as one
  // broadcast per root, small exchanges as send/receive.
  CHECK(choose_strategy(CollectiveOp::all_gather, uneven, 64, true) == Strategy::per_root);
  CHECK(choose_strategy(CollectiveOp::all_to_all, uneven, 64, true) == Strategy::send_recv);
  CHECK(choose_strategy(CollectiveOp::reshard, uneven, 1 << 20, true) == Strategy::v_collective);
  // ... and MPI_Reduce_scatter's fresh temporaries lose to one reduce per root above 8 MiB.
  CHECK(choose_strategy(CollectiveOp::reduce_scatter, even, 512 << 10, true) == Strategy::v_collective);
  CHECK(choose_strategy(CollectiveOp::reduce_scatter, even, 1 << 20, true) == Strategy::per_root);
  // Without v collectives: one large piece wastes 3x in padding -> per-root.
  CHECK(choose_strategy(CollectiveOp::reduce_scatter, skewed, 1 << 20, false) == Strategy::per_root);
  CHECK(choose_strategy(CollectiveOp::all_to_all, skewed, 1 << 20, false) == Strategy::send_recv);
  // Tiny messages: latency dominates -> one padded call.
  CHECK(choose_strategy(CollectiveOp::all_gather, uneven, 4, false) == Strategy::padded);
  // Strided pieces (an inner sharded dim) on MPI: small all_gathers as one
  // broadcast per root (on 2 ranks, smaller still, padded), large ones as the
  // v collective's datatypes; all_to_all as send/receive up to 256 KiB.
  const std::vector<std::int64_t> pair{100, 28};
  CHECK(choose_strategy(CollectiveOp::all_gather, uneven, 64, true, Pieces::strided) == Strategy::per_root);
  CHECK(choose_strategy(CollectiveOp::all_gather, pair, 64, true, Pieces::strided) == Strategy::padded);
  CHECK(choose_strategy(CollectiveOp::all_gather, pair, 256, true, Pieces::strided) == Strategy::per_root);
  CHECK(choose_strategy(CollectiveOp::all_gather, pair, 256, true) == Strategy::v_collective);
  CHECK(choose_strategy(CollectiveOp::all_gather, uneven, 16 << 10, true, Pieces::strided) == Strategy::v_collective);
  CHECK(choose_strategy(CollectiveOp::all_gather, uneven, 16 << 10, true) == Strategy::per_root);
  CHECK(choose_strategy(CollectiveOp::all_to_all, uneven, 25 << 10, true, Pieces::strided) == Strategy::send_recv);
  CHECK(choose_strategy(CollectiveOp::all_to_all, uneven, 100 << 10, true, Pieces::strided) == Strategy::v_collective);
  CHECK(choose_strategy(CollectiveOp::reshard, uneven, 25 << 10, true) == Strategy::v_collective);
  CHECK(pieces_along(Shape{4, 6}, 0) == Pieces::contiguous);
  CHECK(pieces_along(Shape{4, 6}, 1) == Pieces::strided);
  CHECK(pieces_along(Shape{1, 6}, 1) == Pieces::contiguous);
  CHECK(pieces_along(Shape{1, 1, 6}, 2) == Pieces::contiguous);
  CHECK(pieces_along(Shape{2, 1, 6}, 2) == Pieces::strided);
  CHECK_THROWS_AS(resolve_strategy(Strategy::per_root, CollectiveOp::all_to_all, uneven, 4, true), invalid_argument);
  CHECK_THROWS_AS(resolve_strategy(Strategy::v_collective, CollectiveOp::all_gather, uneven, 4, false),
                  invalid_argument);
}

}  // namespace shardex_test_layout
