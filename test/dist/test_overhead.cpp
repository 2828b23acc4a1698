// SPDX-License-Identifier: MIT
// What a collective costs beyond the data it moves (shardex::counters), at
// every world size. Copies and zero-fills: the local bytes each lowering copies, on the lengths cases of support/dist.hpp (zeros,
// one rank holding everything, even, all empty). Where the pieces are
// contiguous (the sharded dim outermost) a transition writes its result
// straight from and into the tensors' storage: nothing is copied beyond the
// rank's own piece where a grouped lowering must move it itself, and nothing
// is zero-filled. Where they are strided, MPI's derived datatypes place them
// (v_collective), except that an all_to_all packs the strided pieces it sends
// and a reduction, which cannot take datatypes, packs once.
// Agreements: backward(loss) agrees once for its whole pass, not once per
// collective, and still turns a pass whose collectives differ across ranks
// into an exception on every rank instead of a hang.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include <shardex.hpp>

#include "support/dist.hpp"

using namespace shardex;

namespace {

constexpr std::int64_t cols = 5;
constexpr auto fbytes = static_cast<std::int64_t>(sizeof(float));

/// The counters' change over f(), and f's result.
template <class F>
auto counted(F&& f) {
  const Counters before = counters();
  auto result = f();
  return std::pair{counters() - before, result};
}

std::int64_t sum_of(const std::vector<std::int64_t>& v) {
  std::int64_t s = 0;
  for (auto x : v) s += x;
  return s;
}

bool all_equal(const auto& t, float v) {
  for (float x : t.local())
    if (x != v) return false;
  return true;
}

}  // namespace

TEST_CASE("contiguous shards: every lowering writes straight into its result, without local copies or zero-fill") {
  const auto& comm = test::world();
  const int n = comm.size(), me = comm.rank();
  auto rng = test::shared_rng(7);
  for (const auto& lens : test::lengths_cases(rng, n, {})) {
    CAPTURE(to_string(lens));
    const Shape shape{sum_of(lens), cols};
    const layout_mapping<Sharded<0>> m(lens);
    const std::int64_t own = lens[static_cast<std::size_t>(me)] * cols * fbytes;
    auto x = Tensor<float, Sharded<0>>::ones(comm, shape, m);
    auto p = Tensor<float, Partial>::ones(comm, shape);

    for (Strategy s : {Strategy::v_collective, Strategy::per_root}) {
      CAPTURE(strategy_name(s));
      const auto [g, y] = counted([&] { return apply_transition<Replicated>(x, {}, s); });
      CHECK(all_equal(y, 1.f));
      CHECK(g.bytes_zeroed == 0);
      // MPI_Allgatherv places the own piece itself; one broadcast per root leaves it to us.
      CHECK(g.bytes_copied == (s == Strategy::per_root ? own : 0));

      const auto [r, z] = counted([&] { return apply_transition<Sharded<0>>(p, m, s); });
      CHECK(all_equal(z, float(n)));
      CHECK(r.bytes_copied == 0);
      CHECK(r.bytes_zeroed == 0);
    }
    if (sum_of(lens) % n == 0) {  // even lengths: padded is the plain collective
      const std::vector<std::int64_t> even(static_cast<std::size_t>(n), sum_of(lens) / n);
      auto xe = Tensor<float, Sharded<0>>::ones(comm, shape, layout_mapping<Sharded<0>>(even));
      const auto [g, y] = counted([&] { return apply_transition<Replicated>(xe, {}, Strategy::padded); });
      CHECK(all_equal(y, 1.f));
      CHECK(g.bytes_copied == 0);
      CHECK(g.bytes_zeroed == 0);
    }

    const auto [a, y] = counted([&] { return apply_transition<Replicated>(p, {}); });  // all_reduce, out of place
    CHECK(all_equal(y, float(n)));
    CHECK(a.bytes_copied == 0);
    CHECK(a.bytes_zeroed == 0);

    // reshard to lengths rotated by one rank: only rows that change owner move.
    std::vector<std::int64_t> other(lens.begin() + 1, lens.end());
    other.push_back(lens.front());
    const layout_mapping<Sharded<0>> mo(other);
    for (Strategy s : {Strategy::v_collective, Strategy::send_recv}) {
      CAPTURE(strategy_name(s));
      const auto [c, w] = counted([&] { return apply_transition<Sharded<0>>(x, mo, s); });
      CHECK(all_equal(w, 1.f));
      CHECK(c.bytes_zeroed == 0);
      if (s == Strategy::v_collective)
        CHECK(c.bytes_copied == 0);
      else
        CHECK(c.bytes_copied <= own);  // the rows a rank keeps, copied once
    }
  }
}

TEST_CASE("strided shards: placed by MPI's derived datatypes, except a reduction's one pack pass") {
  const auto& comm = test::world();
  const int n = comm.size(), me = comm.rank();
  auto rng = test::shared_rng(11);
  for (const auto& lens : test::lengths_cases(rng, n, {})) {
    CAPTURE(to_string(lens));
    const Shape shape{3, sum_of(lens)};  // sharded along the last dim: pieces are strided
    const layout_mapping<Sharded<1>> m(lens);
    auto x = Tensor<float, Sharded<1>>::ones(comm, shape, m);
    auto p = Tensor<float, Partial>::ones(comm, shape);
    const std::int64_t whole = shape.numel() * fbytes;

    // v_collective: a derived datatype per piece, no unpack; per_root: one unpack pass.
    const auto [g, y] = counted([&] { return apply_transition<Replicated>(x, {}, Strategy::v_collective); });
    CHECK(all_equal(y, 1.f));
    CHECK(g.bytes_copied == 0);
    CHECK(g.bytes_zeroed == 0);
    const auto [gr, yr] = counted([&] { return apply_transition<Replicated>(x, {}, Strategy::per_root); });
    CHECK(all_equal(yr, 1.f));
    CHECK(gr.bytes_copied == whole + 3 * lens[static_cast<std::size_t>(me)] * fbytes);  // own piece staged, then unpack

    // A reduction takes one datatype for both sides: the pieces are packed once.
    const auto [r, z] = counted([&] { return apply_transition<Sharded<1>>(p, m, Strategy::v_collective); });
    CHECK(all_equal(z, float(n)));
    CHECK(r.bytes_copied == whole);
    CHECK(r.bytes_zeroed == 0);

    // all_to_all S(1) -> S(0): the pieces sent are row blocks of x's local
    // part (contiguous), those received strided column blocks of the result,
    // placed by datatypes: no copy. A reshard along the strided dim: in place.
    const auto rows = test::random_lengths(rng, n, 3);
    const auto [c, w] = counted(
        [&] { return apply_transition<Sharded<0>>(x, layout_mapping<Sharded<0>>(rows), Strategy::v_collective); });
    CHECK(all_equal(w, 1.f));
    CHECK(c.bytes_copied == 0);
    CHECK(c.bytes_zeroed == 0);
    // The way back, S(0) -> S(1): the pieces sent are strided column blocks,
    // packed once (unless this rank holds a single row); received in place.
    const auto [k, u] = counted([&] { return apply_transition<Sharded<1>>(w, m, Strategy::v_collective); });
    const std::int64_t my_rows = rows[static_cast<std::size_t>(me)];
    CHECK(all_equal(u, 1.f));
    CHECK(k.bytes_copied == (my_rows == 1 ? 0 : my_rows * sum_of(lens) * fbytes));
    CHECK(k.bytes_zeroed == 0);
    std::vector<std::int64_t> other(lens.begin() + 1, lens.end());
    other.push_back(lens.front());
    const auto [h, v] = counted(
        [&] { return apply_transition<Sharded<1>>(x, layout_mapping<Sharded<1>>(other), Strategy::v_collective); });
    CHECK(all_equal(v, 1.f));
    CHECK(h.bytes_copied == 0);
  }
}

TEST_CASE("backward agrees once for its whole pass, not once per collective") {
  const auto& comm = test::world();
  const int n = comm.size();
  std::vector<std::int64_t> lens(static_cast<std::size_t>(n), 2);
  lens.back() = 0;  // a rank holding nothing
  const Shape shape{sum_of(lens), cols};
  auto x = Tensor<float, Sharded<0>>::ones(comm, shape, layout_mapping<Sharded<0>>(lens)).requires_grad();
  auto w = Tensor<float, Invariant>::ones(comm, {cols}).requires_grad();
  // Two collectives backward: all_gather's reduce_scatter and replicate's all_reduce.
  Tensor<float, Replicated> loss = sum(add_bias(all_gather(x), replicate(w))) / double(n);
  const Counters before = counters();
  backward(loss);
  const Counters d = counters() - before;
  CHECK(d.agreements == (n > 1 ? 1 : 0));
  CHECK(all_equal(x.grad(), 1.f));
  CHECK(all_equal(w.grad(), float(sum_of(lens))));
}

// Needs two ranks whose passes differ: skipped (and said so) at one rank.
TEST_CASE("a backward pass whose collectives differ across ranks throws on every rank instead of hanging" *
          doctest::skip(test::launched_ranks() < 2)) {
  const auto& comm = test::world();
  REQUIRE(comm.size() >= 2);
  auto w = Tensor<float, Invariant>::ones(comm, {3}).requires_grad();
  // Nothing communicates forward; backward, replicate's adjoint is an
  // all_reduce on rank 0 only: without the pass's agreement rank 0 would wait
  // in it forever.
  if (comm.rank() == 0) {
    Tensor<float, Replicated> loss = sum(replicate(w));
    CHECK_THROWS_AS(backward(loss), invalid_argument);
  } else {
    Tensor<float, Invariant> loss = sum(w);
    CHECK_THROWS_AS(backward(loss), invalid_argument);
  }
}

TEST_CASE(
    "an element-wise result or an all-reduce goes into an operand the evaluation made and nobody else holds, never a named one") {
  const auto& comm = test::world();
  const float n = float(comm.size());
  const auto acquired = [] {  // blocks of storage handed out so far
    const host::PoolStats s = host::pool_stats();
    return s.hits + s.misses;
  };
  const auto all_equal_to = [](const auto& t, float v) {
    for (float x : t.local())
      if (x != v) return false;
    return true;
  };
  for (const Shape& shape : {Shape{5, 7}, Shape{1, 64}}) {
    CAPTURE(shape.str());
    auto p = Tensor<float, Partial>::ones(comm, shape);
    auto q = Tensor<float, Invariant>::full(comm, shape, 3.0f);
    // The all-reduce's fresh result (p is named: out of place) then takes the sum: one block in all.
    const auto before = acquired();
    const Tensor<float, Invariant> y = all_reduce<Invariant>(p) + q;
    CHECK(acquired() - before == 1);
    CHECK(all_equal_to(y, n + 3));
    CHECK(all_equal_to(p, 1.0f));
    CHECK(all_equal_to(q, 3.0f));
    // The expression's own intermediate (p * 2) is all-reduced in its storage: one block in all.
    const auto before_doubled = acquired();
    const Tensor<float, Invariant> doubled = all_reduce<Invariant>(p * 2.0f);
    CHECK(acquired() - before_doubled == 1);
    CHECK(all_equal_to(doubled, 2 * n));
    // Named operands only: fresh storage, the operands unchanged.
    const Tensor<float, Invariant> z = q + q * 2.0f;
    CHECK((z.data() != q.data() && all_equal_to(z, 9.0f) && all_equal_to(q, 3.0f)));

    // With gradients: a sum takes the operand the evaluation made (its gradient reads no value) ...
    auto w = Tensor<float, Invariant>::full(comm, shape, 0.5f);
    w.requires_grad();
    const auto before_sum = acquired();
    const Tensor<float, Invariant> s = all_reduce<Invariant>(p) + w;
    CHECK(acquired() - before_sum == 1);
    backward(sum(s));
    CHECK(all_equal_to(w.grad(), 1.0f));
    w.zero_grad();
    // ... a product does not: exp's and the product's gradients read the operands' values.
    const auto before_exp = acquired();
    const Tensor<float, Invariant> e = exp(all_reduce<Invariant>(p) * w);
    CHECK(acquired() - before_exp == 2);
    backward(sum(e));
    CHECK(all_equal_to(w.grad(), n * std::exp(n * 0.5f)));
  }
}
