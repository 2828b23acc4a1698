// SPDX-License-Identifier: MIT
// explain(expr): the plan that evaluating expr will run on this rank, asserted
// line by line for the simplification cases of the planner
// (expr/redistribute.hpp), with each collective's resolved strategy and the
// bytes this rank hands the backend to send. Then each expression is evaluated, and
//  - evaluating runs what explain said: the ops recorded in the result's
//    autodiff graph (tensor/grad_node.hpp, Node::op) are the plan's steps;
//  - the values and the gradients equal those of the chain as the user wrote
//    it, one transition per call (the eager spelling, eager/eager.hpp).
//
// Integer-valued data, so that every comparison is exact in float and double.
// Lengths with zeros, two different lists per world size (1 to 4 ranks).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <shardex.hpp>

#include "support/dist.hpp"

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_explain {

using namespace shardex;
using shardex::test::world;

namespace {

using Lens = std::vector<std::int64_t>;
using Index = std::span<const std::int64_t>;
constexpr std::int64_t rows = 6, cols = 6;  // every tensor is rows x cols, sharded along dim 0 or 1

/// Two lengths lists of `rows` for n ranks, zeros included (equal only for n = 1).
Lens lens_a(int n) {
  static const Lens t[] = {{6}, {4, 2}, {1, 0, 5}, {1, 2, 3, 0}};
  return t[n - 1];
}
Lens lens_b(int n) {
  static const Lens t[] = {{6}, {0, 6}, {3, 3, 0}, {0, 4, 0, 2}};
  return t[n - 1];
}
std::string sh(int d, const Lens& ls) { return "S(" + std::to_string(d) + ")" + shardex::to_string(ls); }
std::int64_t at(const Lens& ls, int r) { return ls[static_cast<std::size_t>(r)]; }
std::int64_t max_len(const Lens& ls) { return max_of(std::span<const std::int64_t>(ls)); }
/// Rows rank r holds under both lengths lists (a send/receive reshard keeps them: it does not send them).
std::int64_t kept_rows(const Lens& a, const Lens& b, int r) {
  std::int64_t oa = 0, ob = 0;
  for (int i = 0; i < r; ++i) oa += at(a, i), ob += at(b, i);
  return std::max<std::int64_t>(0, std::min(oa + at(a, r), ob + at(b, r)) - std::max(oa, ob));
}
/// The bytes a reshard a -> b hands the backend on rank r: its rows, less the kept ones with send_recv.
std::int64_t reshard_bytes(const std::string& strategy, const Lens& a, const Lens& b, int r, std::int64_t row) {
  return (at(a, r) - (strategy == "send_recv" ? kept_rows(a, b, r) : 0)) * row;
}

/// The same global values 1 .. 36 for R, I and S tensors; for P, rank r holds
/// (r + 1) times them, so the logical value is n (n + 1) / 2 times them.
double value(Index ix) { return static_cast<double>(ix[0] * cols + ix[1] + 1); }

template <class T, class L>
Tensor<T, L> make(const Lens& ls = {}) {
  const auto& comm = world();
  if constexpr (std::same_as<L, Partial>) {
    const int r = comm.rank();
    return Tensor<T, L>::from_function(comm, {rows, cols}, [r](Index ix) { return (r + 1) * value(ix); });
  } else if constexpr (is_sharded_v<L>) {
    if constexpr (L::has_static_lengths)
      return Tensor<T, L>::from_function(comm, {rows, cols}, value);
    else
      return Tensor<T, L>::from_function(comm, {rows, cols}, value, layout_mapping<L>(ls));
  } else {
    return Tensor<T, L>::from_function(comm, {rows, cols}, value);
  }
}

/// A differentiable copy of x with a graph of its own.
template <class X>
X fresh(const X& x) {
  X y = x.detach().clone();
  y.requires_grad();
  return y;
}

/// What evaluating ran: the ops of the non-leaf nodes of t's graph, inputs first.
template <class X>
std::string ran(const X& t) {
  std::string out;
  if (t.node())
    for (autodiff::Node* n : autodiff::topological_order(t.node().get()))
      if (!n->is_leaf()) out += (out.empty() ? "" : " ") + std::string(n->op);
  return out;
}

/// What explain promised, in the same terms: one op per step; a fused step
/// ("fused add, gelu, scale") records one node named after its last (root) op.
std::string promised(const Plan& p) {
  std::string out;
  for (const auto& s : p.steps) {
    std::string op = s.op;
    if (op.starts_with("fused ")) {
      op = op.substr(6);
      if (const auto k = op.rfind(", "); k != std::string::npos) op = op.substr(k + 2);
    }
    out += (out.empty() ? "" : " ") + op;
  }
  return out;
}

template <class T>
constexpr std::int64_t elem_bytes() {
  return static_cast<std::int64_t>(sizeof(T));
}

/// Local elements that differ (or all of them, if the local shapes differ).
template <class A, class B>
std::int64_t mismatches(const A& a, const B& b) {
  if (a.local_shape() != b.local_shape()) return a.size() + b.size() + 1;
  std::int64_t bad = 0;
  for (std::int64_t k = 0; k < a.size(); ++k) bad += a.data()[k] != b.data()[k];
  return bad;
}

/// Elements whose logical values differ. A Partial tensor's local parts are
/// one of many ways to split its value (the sum over ranks), so two Partial
/// tensors are compared after an all_reduce (every rank calls it).
template <class A, class B>
std::int64_t value_mismatches(const A& a, const B& b) {
  if constexpr (std::same_as<typename A::layout_type, Partial>)
    return mismatches(eager::all_reduce(a), eager::all_reduce(b));
  else
    return mismatches(a, b);
}

/// The core check. On two fresh differentiable copies of x: explain(lazy(x1))
/// must read `want`; evaluating it must run what the plan says (or, for a
/// run-time identity, one reshard that moves nothing); its values and the
/// gradient of a loss of y must equal those of eager(x2), the chain as written.
template <class X, class Lazy, class Eager>
auto check_simplified(const X& x, Lazy&& lazy, Eager&& eager, const std::string& want, bool runtime_identity = false) {
  auto x1 = fresh(x), x2 = fresh(x);
  const auto e = lazy(x1);
  const Plan plan = explain(e);
  CHECK(plan.str() == want);
  auto y1 = eval(e);
  auto y2 = eager(x2);
  static_assert(std::same_as<decltype(y1), decltype(y2)>,
                "the simplified chain has the layout of the chain as written");
  if (runtime_identity) {
    // Run-time lengths: the reshard entry compares them (every rank agrees)
    // and moves nothing: the result is x's storage.
    CHECK(plan.steps.empty());
    CHECK(ran(y1) == "reshard");
    CHECK(y1.data() == x1.data());
  } else {
    CHECK(ran(y1) == promised(plan));
  }
  CHECK(y1.mapping() == y2.mapping());
  CHECK(value_mismatches(y1, y2) == 0);
  // The loss: sum(y * y), or sum(y * w) with w Replicated for a Partial y (P * P has no rule).
  const auto loss = [](const auto& y) {
    if constexpr (std::same_as<typename std::remove_cvref_t<decltype(y)>::layout_type, Partial>)
      return eval(sum(y * make<typename X::value_type, Replicated>()));
    else
      return eval(sum(y * y));
  };
  backward(loss(y1));
  backward(loss(y2));
  SHARDEX_REQUIRE_ALL(x1.has_grad() && x2.has_grad());
  CHECK(value_mismatches(x1.grad(), x2.grad()) == 0);
  return std::tuple{plan, x1, y1};
}

/// "all_gather S(0)[1,2,3,0] -> R  [v_collective, 24 B]\n"
std::string line(const std::string& op, const std::string& from, const std::string& to, const std::string& strategy,
                 std::int64_t bytes) {
  return op + " " + from + " -> " + to + "  [" + strategy + ", " + std::to_string(bytes) + " B]\n";
}
/// What automatic resolves to on MPI for `op` over `lens` (indices of `row_bytes` each).
std::string picked(CollectiveOp op, const std::vector<std::int64_t>& lens, std::int64_t row_bytes,
                   Pieces pieces = Pieces::contiguous) {
  return strategy_name(choose_strategy(op, lens, row_bytes, true, pieces));
}
std::string local_line(const std::string& op, const std::string& from, const std::string& to) {
  return op + " " + from + " -> " + to + "  [local]\n";
}

}  // namespace

TEST_CASE_TEMPLATE("explain: slice after all_gather of the same sharding is the identity", T, float, double) {
  const auto& comm = world();
  const int n = comm.size();
  const Lens a = lens_a(n);
  using S0 = Sharded<0>;
  const auto s = make<T, S0>(a);
  // Run-time lengths: no step, one line; evaluating moves nothing.
  auto [plan, x1, y1] = check_simplified(
      s, [&](const auto& x) { return slice<S0>(all_gather(x), a); },
      [&](const auto& x) { return eager::dynamic_slice<S0>(eager::all_gather(x), a); },
      "simplified: all_gather " + sh(0, a) + " -> R then slice R -> " + sh(0, a) + " => nothing (identity)\n", true);
  CHECK(plan.steps.empty());
  CHECK(plan.collectives() == 0);
  CHECK(plan.collective_names().empty());
  CHECK(plan.simplifications.size() == 1);
  // all_to_all there and back along the same lengths: the identity as well.
  check_simplified(
      s, [&](const auto& x) { return all_to_all<S0>(all_to_all<Sharded<1>>(x, lens_b(n)), a); },
      [&](const auto& x) { return eager::all_to_all<S0>(eager::all_to_all<Sharded<1>>(x, lens_b(n)), a); },
      "simplified: all_to_all " + sh(0, a) + " -> " + sh(1, lens_b(n)) + " then all_to_all " + sh(1, lens_b(n)) +
          " -> " + sh(0, a) + " => nothing (identity)\n",
      true);
  // Static lengths: the identity is known at compile time; the result is x itself, same node.
  if (n == 4) {
    using S = Sharded<0, lengths<1, 2, 3, 0>>;
    const auto st = make<T, S>();
    auto [splan, sx, sy] = check_simplified(
        st, [](const auto& x) { return slice<S>(all_gather(x)); },
        [](const auto& x) { return eager::dynamic_slice<S>(eager::all_gather(x)); },
        "simplified: all_gather S(0)[1,2,3,0] -> R then slice R -> S(0)[1,2,3,0] => nothing (identity)\n");
    CHECK(splan.steps.empty());
    CHECK(sy.node().get() == sx.node().get());
    CHECK(sy.data() == sx.data());
  }
}

TEST_CASE_TEMPLATE("explain: identity transitions vanish", T, float, double) {
  const auto& comm = world();
  const int n = comm.size();
  const auto x = fresh(make<T, Replicated>());
  const auto i = fresh(make<T, Invariant>());
  const Plan pr = explain(redistribute<Replicated>(x));
  CHECK(pr.str() == "simplified: redistribute R -> R => nothing (identity)\n");
  CHECK(pr.steps.empty());
  CHECK(explain(redistribute<Invariant>(i)).str() == "simplified: redistribute I -> I => nothing (identity)\n");
  // Evaluating returns the tensor itself: same storage, same autodiff node.
  Tensor<T, Replicated> y = redistribute<Replicated>(x);
  Tensor<T, Invariant> yi = redistribute<Invariant>(i);
  CHECK(y.data() == x.data());
  CHECK(y.node().get() == x.node().get());
  CHECK(yi.node().get() == i.node().get());
  CHECK(ran(y).empty());
  // Partial -> S(0) -> Partial keeps the logical value (the sum over ranks),
  // though not the local parts: the identity as well, and p itself comes back.
  const auto p = fresh(make<T, Partial>());
  const auto e = zero_pad(reduce_scatter<Sharded<0>>(p, lens_a(n)));
  CHECK(explain(e).str() == "simplified: reduce_scatter P(sum) -> " + sh(0, lens_a(n)) + " then zero_pad " +
                                sh(0, lens_a(n)) + " -> P(sum) => nothing (identity)\n");
  const Tensor<T, Partial> yp = e;
  CHECK(yp.data() == p.data());
  CHECK(ran(yp).empty());
}

TEST_CASE_TEMPLATE("explain: reduce_scatter then all_gather is one all_reduce", T, float, double) {
  const auto& comm = world();
  const int n = comm.size();
  const Lens a = lens_a(n);
  const auto p = make<T, Partial>();
  auto [plan, x1, y1] = check_simplified(
      p, [&](const auto& x) { return all_gather(reduce_scatter<Sharded<0>>(x, a)); },
      [&](const auto& x) { return eager::all_gather(eager::reduce_scatter<Sharded<0>>(x, a)); },
      line("all_reduce", "P(sum)", "R", "all_reduce", rows * cols * std::int64_t(sizeof(T))) +
          "simplified: reduce_scatter P(sum) -> " + sh(0, a) + " then all_gather " + sh(0, a) +
          " -> R => all_reduce P(sum) -> R\n");
  CHECK(plan.collectives() == 1);
  CHECK(plan.collective_names() == "all_reduce");
  SHARDEX_REQUIRE_ALL(plan.steps.size() == 1);
  CHECK(plan.steps[0].communicates);
  CHECK(plan.steps[0].bytes == 36 * std::int64_t(sizeof(T)));
  // The all_reduce's input is p itself: the reduce_scatter never ran.
  SHARDEX_REQUIRE_ALL(y1.node() && y1.node()->inputs.size() == 1);
  CHECK(y1.node()->inputs[0].get() == x1.node().get());
  // And the values are all_reduce(p)'s: n (n + 1) / 2 times the global values.
  CHECK(mismatches(y1, eager::all_reduce(p)) == 0);
  CHECK(y1(5, 5) == T(36 * n * (n + 1) / 2));
}

TEST_CASE_TEMPLATE("explain: all_reduce then slice is one reduce_scatter", T, float, double) {
  const auto& comm = world();
  const int n = comm.size();
  const Lens a = lens_a(n);
  auto [plan, x1, y1] = check_simplified(
      make<T, Partial>(), [&](const auto& x) { return slice<Sharded<0>>(all_reduce(x), a); },
      [&](const auto& x) { return eager::dynamic_slice<Sharded<0>>(eager::all_reduce(x), a); },
      line("reduce_scatter", "P(sum)", sh(0, a),
           picked(CollectiveOp::reduce_scatter, a, cols * std::int64_t(sizeof(T))),
           rows * cols * std::int64_t(sizeof(T))) +
          "simplified: all_reduce P(sum) -> R then slice R -> " + sh(0, a) + " => reduce_scatter P(sum) -> " +
          sh(0, a) + "\n");
  CHECK(plan.collective_names() == "reduce_scatter");
  CHECK(y1.local_shape() == Shape{at(a, comm.rank()), cols});
}

TEST_CASE_TEMPLATE("explain: zero_pad then all_reduce is one all_gather", T, float, double) {
  const auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  const Lens a = lens_a(n);
  auto [plan, x1, y1] = check_simplified(
      make<T, Sharded<0>>(a), [](const auto& x) { return all_reduce(zero_pad(x)); },
      [](const auto& x) { return eager::all_reduce(eager::zero_pad(x)); },
      line("all_gather", sh(0, a), "R", picked(CollectiveOp::all_gather, a, cols * std::int64_t(sizeof(T))),
           at(a, r) * cols * std::int64_t(sizeof(T))) +
          "simplified: zero_pad " + sh(0, a) + " -> P(sum) then all_reduce P(sum) -> R => all_gather " + sh(0, a) +
          " -> R\n");
  CHECK(plan.collective_names() == "all_gather");
  CHECK(y1(3, 2) == T(3 * cols + 2 + 1));
}

TEST_CASE_TEMPLATE("explain: a chain through a sharding of other lengths", T, float, double) {
  const auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  const Lens a = lens_a(n), b = lens_b(n);
  const std::int64_t elem = sizeof(T);
  const auto s = make<T, Sharded<0>>(a);
  // The intermediate reshard to b never runs: one all_gather from a.
  check_simplified(
      s, [&](const auto& x) { return all_gather(redistribute<Sharded<0>>(x, b)); },
      [&](const auto& x) { return eager::all_gather(eager::all_to_all<Sharded<0>>(x, b)); },
      line("all_gather", sh(0, a), "R", picked(CollectiveOp::all_gather, a, cols * elem), at(a, r) * cols * elem) +
          "simplified: redistribute " + sh(0, a) + " -> " + sh(0, b) + " then all_gather " + sh(0, b) +
          " -> R => all_gather " + sh(0, a) + " -> R\n");
  // Nor does an all_to_all to the other dim.
  check_simplified(
      s, [&](const auto& x) { return all_gather(all_to_all<Sharded<1>>(x, b)); },
      [&](const auto& x) { return eager::all_gather(eager::all_to_all<Sharded<1>>(x, b)); },
      line("all_gather", sh(0, a), "R", picked(CollectiveOp::all_gather, a, cols * elem), at(a, r) * cols * elem) +
          "simplified: all_to_all " + sh(0, a) + " -> " + sh(1, b) + " then all_gather " + sh(1, b) +
          " -> R => all_gather " + sh(0, a) + " -> R\n");
  // Three steps in, one out: P -> S(0)[b] -> S(1)[a] -> R is an all_reduce.
  check_simplified(
      make<T, Partial>(),
      [&](const auto& x) { return all_gather(all_to_all<Sharded<1>>(reduce_scatter<Sharded<0>>(x, b), a)); },
      [&](const auto& x) {
        return eager::all_gather(eager::all_to_all<Sharded<1>>(eager::reduce_scatter<Sharded<0>>(x, b), a));
      },
      line("all_reduce", "P(sum)", "R", "all_reduce", rows * cols * elem) + "simplified: reduce_scatter P(sum) -> " +
          sh(0, b) + " then all_to_all " + sh(0, b) + " -> " + sh(1, a) + " then all_gather " + sh(1, a) +
          " -> R => all_reduce P(sum) -> R\n");
  if (n > 1) {  // (on one rank a == b)
    // Gather then slice with other lengths: only the rows that change owner move (a reshard).
    auto [plan, x1, y1] = check_simplified(
        s, [&](const auto& x) { return slice<Sharded<0>>(all_gather(x), b); },
        [&](const auto& x) { return eager::dynamic_slice<Sharded<0>>(eager::all_gather(x), b); },
        line("reshard", sh(0, a), sh(0, b), picked(CollectiveOp::reshard, b, cols * elem),
             reshard_bytes(picked(CollectiveOp::reshard, b, cols * elem), a, b, r, cols * elem)) +
            "simplified: all_gather " + sh(0, a) + " -> R then slice R -> " + sh(0, b) + " => reshard " + sh(0, a) +
            " -> " + sh(0, b) + "\n");
    CHECK(y1.local_shape() == Shape{at(b, r), cols});
    // One transition that is not what the user named: all_to_all along the same dim is a reshard.
    check_simplified(
        s, [&](const auto& x) { return all_to_all<Sharded<0>>(x, b); },
        [&](const auto& x) { return eager::all_to_all<Sharded<0>>(x, b); },
        line("reshard", sh(0, a), sh(0, b), picked(CollectiveOp::reshard, b, cols * elem),
             reshard_bytes(picked(CollectiveOp::reshard, b, cols * elem), a, b, r, cols * elem)) +
            "simplified: all_to_all " + sh(0, a) + " -> " + sh(0, b) + " => reshard " + sh(0, a) + " -> " + sh(0, b) +
            "\n");
  }
}

TEST_CASE_TEMPLATE("explain: a chain with no route from its source runs its last step after the rest", T, float,
                   double) {
  // R -> S -> P: the table has no R -> P, so the chain below zero_pad is
  // planned (and simplified) first, then zero_pad runs.
  const auto& comm = world();
  const int n = comm.size();
  const Lens a = lens_a(n), b = lens_b(n);
  const auto r = make<T, Replicated>();
  auto [plan, x1, y1] = check_simplified(
      r, [&](const auto& x) { return zero_pad(slice<Sharded<0>>(x, a)); },
      [&](const auto& x) { return eager::zero_pad(eager::dynamic_slice<Sharded<0>>(x, a)); },
      local_line("slice", "R", sh(0, a)) + local_line("zero_pad", sh(0, a), "P(sum)"));
  CHECK(plan.simplifications.empty());  // it ran as written
  check_simplified(
      r, [&](const auto& x) { return zero_pad(all_to_all<Sharded<1>>(slice<Sharded<0>>(x, a), b)); },
      [&](const auto& x) {
        return eager::zero_pad(eager::all_to_all<Sharded<1>>(eager::dynamic_slice<Sharded<0>>(x, a), b));
      },
      local_line("slice", "R", sh(1, b)) + local_line("zero_pad", sh(1, b), "P(sum)") + "simplified: slice R -> " +
          sh(0, a) + " then all_to_all " + sh(0, a) + " -> " + sh(1, b) + " then zero_pad " + sh(1, b) +
          " -> P(sum) => slice R -> " + sh(1, b) + " then zero_pad " + sh(1, b) + " -> P(sum)\n");
  // With a route, the same kind of chain is one step: S(0)[a] -> R -> S(0)[b] -> P is zero_pad from a.
  check_simplified(
      make<T, Sharded<0>>(a), [&](const auto& x) { return zero_pad(slice<Sharded<0>>(all_gather(x), b)); },
      [&](const auto& x) { return eager::zero_pad(eager::dynamic_slice<Sharded<0>>(eager::all_gather(x), b)); },
      local_line("zero_pad", sh(0, a), "P(sum)") + "simplified: all_gather " + sh(0, a) + " -> R then slice R -> " +
          sh(0, b) + " then zero_pad " + sh(0, b) + " -> P(sum) => zero_pad " + sh(0, a) + " -> P(sum)\n");
}

TEST_CASE_TEMPLATE("explain: replicate then slice is one slice", T, float, double) {
  const auto& comm = world();
  const int n = comm.size();
  const Lens a = lens_a(n);
  auto [plan, x1, y1] = check_simplified(
      make<T, Invariant>(), [&](const auto& x) { return slice<Sharded<0>>(replicate(x), a); },
      [&](const auto& x) { return eager::dynamic_slice<Sharded<0>>(eager::replicate(x), a); },
      local_line("slice", "I", sh(0, a)) + "simplified: replicate I -> R then slice R -> " + sh(0, a) +
          " => slice I -> " + sh(0, a) + "\n");
  CHECK(plan.collectives() == 0);
  SHARDEX_REQUIRE_ALL(plan.steps.size() == 1);
  CHECK_FALSE(plan.steps[0].communicates);
  CHECK(plan.steps[0].strategy.empty());
  CHECK(plan.steps[0].bytes == 0);
  // Its backward (Sharded -> Invariant: an all_gather) gave every rank the whole gradient, 2 x.
  const auto& g = x1.grad();
  static_assert(std::same_as<std::remove_cvref_t<decltype(g)>, Tensor<T, Invariant>>);
  CHECK(g(5, 0) == T(2 * (5 * cols + 1)));
}

TEST_CASE_TEMPLATE("explain: a single step as written has no simplification line", T, float, double) {
  const auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  const Lens a = lens_a(n), b = lens_b(n);
  const std::int64_t elem = sizeof(T), mine = at(a, r) * cols * elem, whole = rows * cols * elem;
  const auto s = make<T, Sharded<0>>(a);
  const auto p = make<T, Partial>();
  const auto rr = make<T, Replicated>();
  const auto i = make<T, Invariant>();
  CHECK(explain(all_gather(s)).str() ==
        line("all_gather", sh(0, a), "R", picked(CollectiveOp::all_gather, a, cols * elem), mine));
  CHECK(explain(all_gather<Invariant>(s)).str() ==
        line("all_gather", sh(0, a), "I", picked(CollectiveOp::all_gather, a, cols * elem), mine));
  CHECK(explain(reduce_scatter<Sharded<0>>(p, a)).str() ==
        line("reduce_scatter", "P(sum)", sh(0, a), picked(CollectiveOp::reduce_scatter, a, cols * elem), whole));
  CHECK(explain(all_reduce(p)).str() == line("all_reduce", "P(sum)", "R", "all_reduce", whole));
  CHECK(explain(all_reduce<Invariant>(p)).str() == line("all_reduce", "P(sum)", "I", "all_reduce", whole));
  CHECK(explain(slice<Sharded<0>>(rr, a)).str() == local_line("slice", "R", sh(0, a)));
  CHECK(explain(dynamic_slice<Sharded<1>>(i, a)).str() == local_line("slice", "I", sh(1, a)));
  const std::string a2a =
      picked(CollectiveOp::all_to_all, b, rows * elem, Pieces::strided);  // send_recv keeps its own piece
  CHECK(explain(all_to_all<Sharded<1>>(s, b)).str() ==
        line("all_to_all", sh(0, a), sh(1, b), a2a, at(a, r) * (cols - (a2a == "send_recv" ? at(b, r) : 0)) * elem));
  CHECK(explain(replicate(i)).str() == local_line("replicate", "I", "R"));
  CHECK(explain(zero_pad(s)).str() == local_line("zero_pad", sh(0, a), "P(sum)"));
  // redistribute<To> asks the planner for the route: no line either.
  CHECK(explain(redistribute<Replicated>(s)).str() ==
        line("all_gather", sh(0, a), "R", picked(CollectiveOp::all_gather, a, cols * elem), mine));
  CHECK(explain(redistribute<Sharded<1>>(p, b)).str() ==
        line("reduce_scatter", "P(sum)", sh(1, b), picked(CollectiveOp::reduce_scatter, b, rows * elem), whole));
  if (n == 4) {  // static lengths print as they are written
    using S1 = Sharded<1, lengths<1, 2, 3, 0>>;
    CHECK(explain(reduce_scatter<S1>(p)).str() == line("reduce_scatter", "P(sum)", "S(1)[1,2,3,0]",
                                                       picked(CollectiveOp::reduce_scatter, {1, 2, 3, 0}, rows * elem),
                                                       whole));
  }
  // And evaluating each runs exactly that one entry.
  const auto ss = fresh(s), pp = fresh(p), ii = fresh(i);
  CHECK(ran(eval(all_gather(ss))) == "all_gather");
  CHECK(ran(eval(reduce_scatter<Sharded<0>>(pp, a))) == "reduce_scatter");
  CHECK(ran(eval(all_reduce<Invariant>(pp))) == "all_reduce");
  CHECK(ran(eval(all_to_all<Sharded<1>>(ss, b))) == "all_to_all");
  CHECK(ran(eval(replicate(ii))) == "replicate");
  CHECK(ran(eval(zero_pad(ss))) == "zero_pad");
  CHECK(ran(eval(slice<Sharded<1>>(ii, a))) == "slice");
}

TEST_CASE_TEMPLATE("explain: the resolved strategy and the bytes this rank contributes", T, float, double) {
  const auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  const Lens a = lens_a(n), b = lens_b(n);
  const std::int64_t elem = sizeof(T), row = cols * elem;  // bytes of one row of a Sharded<0> tensor
  const auto s = make<T, Sharded<0>>(a);
  const auto p = make<T, Partial>();
  const std::string a2a = picked(CollectiveOp::all_to_all, b, rows * elem, Pieces::strided);
  const auto step = [](const auto& e) {
    const Plan pl = explain(e);
    PlanStep none = PlanStep::local("(not one step)", "", "");
    none.bytes = -1;
    return pl.steps.size() == 1 ? pl.steps[0] : none;
  };
  struct Want {
    PlanStep got;
    std::string strategy;
    std::int64_t bytes;
  };
  const Want wants[] = {
      // all_gather: my rows; padded: the longest shard's rows.
      {step(all_gather(s)), picked(CollectiveOp::all_gather, a, row), at(a, r) * row},
      {step(all_gather(s, Strategy::v_collective)), "v_collective", at(a, r) * row},
      {step(all_gather(s, Strategy::per_root)), "per_root", at(a, r) * row},
      {step(all_gather(s, Strategy::padded)), "padded", max_len(a) * row},
      // reduce_scatter: the whole tensor; padded: n blocks of the longest shard.
      {step(reduce_scatter<Sharded<0>>(p, b)), picked(CollectiveOp::reduce_scatter, b, row), rows * row},
      {step(reduce_scatter<Sharded<0>>(p, b, Strategy::per_root)), "per_root", rows * row},
      {step(reduce_scatter<Sharded<0>>(p, b, Strategy::padded)), "padded", n * max_len(b) * row},
      // all_reduce: the whole tensor, one lowering.
      {step(all_reduce(p)), "all_reduce", rows * cols * elem},
      // padded: n slots of max(a) x max(b).
      // all_to_all S(0)[a] -> S(1)[b]: my local part (send_recv keeps my own piece, a[r] x b[r]);
      {step(all_to_all<Sharded<1>>(s, b)), a2a, at(a, r) * (cols - (a2a == "send_recv" ? at(b, r) : 0)) * elem},
      {step(all_to_all<Sharded<1>>(s, b, Strategy::send_recv)), "send_recv", at(a, r) * (cols - at(b, r)) * elem},
      {step(all_to_all<Sharded<1>>(s, b, Strategy::padded)), "padded", n * max_len(a) * max_len(b) * elem},
      // A reshard puts my rows into the exchange, less those I keep.
      {step(redistribute<Sharded<0>>(s, b, Strategy::send_recv)), n > 1 ? "send_recv" : "",
       n > 1 ? reshard_bytes("send_recv", a, b, r, row) : -1},
  };
  for (const auto& w : wants) {
    CAPTURE(w.got.op);
    CAPTURE(w.got.strategy);
    CHECK(w.got.strategy == w.strategy);
    CHECK(w.got.bytes == w.bytes);
    CHECK(w.got.communicates == (w.bytes >= 0));
  }
  // The forced strategies run as explained (same values as the automatic one).
  const auto g0 = eval(all_gather(s));
  CHECK(mismatches(eval(all_gather(s, Strategy::per_root)), g0) == 0);
  CHECK(mismatches(eval(all_gather(s, Strategy::padded)), g0) == 0);
  CHECK(mismatches(eval(reduce_scatter<Sharded<0>>(p, b, Strategy::per_root)),
                   eval(reduce_scatter<Sharded<0>>(p, b))) == 0);
  // A strategy the operation has no lowering for: explain says so, locally, as evaluating would.
  CHECK_THROWS_AS((void)explain(all_gather(s, Strategy::send_recv)), invalid_argument);
  CHECK_THROWS_AS((void)explain(all_to_all<Sharded<1>>(s, b, Strategy::per_root)), invalid_argument);
}

TEST_CASE_TEMPLATE("explain: local steps, and collectives() / collective_names() of a whole expression", T, float,
                   double) {
  const auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  const Lens a = lens_a(n), b = lens_b(n);
  // A column-parallel layer: loss = all_reduce(sum(2 gelu(replicate(x) w + bias))), w: S(1)[a], bias: S(0)[a].
  auto x = Tensor<T, Invariant>::from_function(comm, {2, 3}, [](Index ix) {
             return ix[1] == 0 ? 1.0 : 0.0;
           }).requires_grad();
  auto w =
      Tensor<T, Sharded<1>>::from_function(
          comm, {3, rows}, [](Index ix) { return 0.25 * static_cast<double>(ix[1]); }, layout_mapping<Sharded<1>>(a))
          .requires_grad();
  auto bias =
      Tensor<T, Sharded<0>>::from_function(
          comm, {rows}, [](Index ix) { return -0.5 * static_cast<double>(ix[0]); }, layout_mapping<Sharded<0>>(a))
          .requires_grad();
  const auto e = all_reduce(sum(gelu(add_bias(matmul(replicate(x), w), bias)) * 2.0));
  const Plan plan = explain(e);
  // The matmul names the GEMM kernel of this rank's product (2 x 3 by 3 x its columns).
  const std::string gemm = Host::gemm_kernel<T>(GemmShape::plain(2, 3, a[static_cast<std::size_t>(comm.rank())]));
  CHECK(plan.str() ==
        local_line("replicate", "I", "R") + "matmul R x " + sh(1, a) + " -> " + sh(1, a) + "  [local, " + gemm + "]\n" +
            local_line("fused add, gelu, scale", "(" + sh(1, a) + ", " + sh(0, a) + " bias)", sh(1, a)) +
            local_line("sum", sh(1, a), "P(sum)") + line("all_reduce", "P(sum)", "R", "all_reduce", elem_bytes<T>()));
  CHECK(plan.collectives() == 1);
  CHECK(plan.collective_names() == "all_reduce");
  CHECK(plan.simplifications.empty());
  Tensor<T, Replicated> loss = e;
  CHECK(ran(loss) == promised(plan));
  CHECK(ran(loss) == "replicate matmul scale sum all_reduce");
  // The value: x picks row 0 of w, so column j is 0.25 j - 0.5 j = -0.25 j; summed over the 2 rows.
  double want = 0;
  for (int j = 0; j < rows; ++j) want += 2 * 2 * ops::Gelu{}.f(-0.25 * j);
  CHECK(static_cast<double>(loss()) == doctest::Approx(want).epsilon(std::is_same_v<T, float> ? 1e-5 : 1e-12));

  // Two collectives, one of them simplified, meeting in one fused step.
  const auto s = make<T, Sharded<0>>(a);
  const auto p = make<T, Partial>();
  const auto e2 = all_gather(all_to_all<Sharded<1>>(s, b)) + all_reduce(p);
  const Plan plan2 = explain(e2);
  CHECK(plan2.collectives() == 2);
  CHECK(plan2.collective_names() == "all_gather all_reduce");
  CHECK(plan2.steps.size() == 3);
  CHECK(plan2.simplifications.size() == 1);
  CHECK(plan2.str() == line("all_gather", sh(0, a), "R", picked(CollectiveOp::all_gather, a, cols * elem_bytes<T>()),
                            at(a, r) * cols * elem_bytes<T>()) +
                           line("all_reduce", "P(sum)", "R", "all_reduce", rows * cols * elem_bytes<T>()) +
                           local_line("fused add", "(R, R)", "R") + "simplified: all_to_all " + sh(0, a) + " -> " +
                           sh(1, b) + " then all_gather " + sh(1, b) + " -> R => all_gather " + sh(0, a) + " -> R\n");
  const auto sx = fresh(s), px = fresh(p);
  Tensor<T, Replicated> y2 = all_gather(all_to_all<Sharded<1>>(sx, b)) + all_reduce(px);
  CHECK(ran(y2) == "all_gather all_reduce add");
  CHECK(y2(1, 1) == T((1 + n * (n + 1) / 2) * (cols + 2)));
  // A tensor alone is no step at all.
  CHECK(explain(s).str().empty());
}

TEST_CASE("explain lists the backward transitions: the adjoint entries, in the order backward runs them") {
  const int n = world().size();
  const Lens la = lens_a(n);
  auto x = fresh(make<double, Sharded<0>>(la));
  // zero_pad (S -> P, local), a fused scale, then all_reduce (P -> R).
  const auto e = all_reduce(zero_pad(x) * 2.0);
  const Plan p = explain(e);
  CHECK(p.collective_names() == "all_reduce");
  REQUIRE(p.backward.size() == 2);
  CHECK(p.backward[0].op == "all_reduce");  // the adjoint of P -> R is P -> R
  CHECK(p.backward[0].from == "P(sum)");
  CHECK(p.backward[0].to == "R");
  CHECK(p.backward[1].op == "slice");  // the adjoint of zero_pad (S -> P) is R -> S
  CHECK(p.backward[1].from == "R");
  CHECK(p.backward[1].to == sh(0, la));
  CHECK(p.backward_collective_names() == "all_reduce");
  // The backward pass does run them: its gradient is 2 on this rank's rows.
  Tensor<double, Replicated> y = e;
  backward(sum(y) / double(n));
  for (std::int64_t i = 0; i < x.grad().size(); ++i) CHECK(x.grad().data()[i] == 2.0);

  // Megatron's f and g: replicate's backward all-reduces, all_reduce<Invariant>'s moves nothing.
  auto i = fresh(make<double, Invariant>());
  const Plan f = explain(replicate(i));
  REQUIRE(f.backward.size() == 1);
  CHECK(f.backward[0].op == "all_reduce");
  CHECK(f.backward[0].to == "I");
  CHECK(f.collectives() == 0);
  CHECK(f.backward_collective_names() == "all_reduce");
  const Plan g = explain(all_reduce<Invariant>(make<double, Partial>()));
  REQUIRE(g.backward.size() == 1);
  CHECK(g.backward[0].op == "replicate");
  CHECK(g.backward_collective_names().empty());
  // A simplified chain has a simplified backward: one all_reduce, not an all_gather and a reduce_scatter.
  const Plan c = explain(all_gather(reduce_scatter<Sharded<0>>(make<double, Partial>(), lens_b(n))));
  CHECK(c.backward_collective_names() == "all_reduce");
}

}  // namespace shardex_test_explain
