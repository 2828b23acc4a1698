// SPDX-License-Identifier: MIT
// What runs is what explain said: for every transition of the table, every
// strategy it has, uneven lengths with zeros (support/dist.hpp), sharded
// dims 0 and 1 (contiguous and strided pieces), float and double, at every
// world size. The evidence is the backend calls themselves
// (BackendCallRecorder, core/backend_calls.hpp), not the plan: each call's
// primitive must belong to the lowering explain named for its step, the bytes
// handed to the backend must add up to the step's bytes, and a local step
// (or one that moves nothing) must make no call. Forward, and backward
// against the plan's adjoint steps. Agreements (the cross-rank checks before
// a collective) are left out: they are not steps of the plan.
#include <doctest/doctest.h>

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <shardex.hpp>

#include "support/dist.hpp"

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_plan_runs {

using namespace shardex;

namespace {

using Lens = std::vector<std::int64_t>;

constexpr Strategy gather_strategies[] = {Strategy::padded, Strategy::per_root, Strategy::v_collective,
                                          Strategy::automatic};
constexpr Strategy a2a_strategies[] = {Strategy::padded, Strategy::v_collective, Strategy::send_recv,
                                       Strategy::automatic};
constexpr Strategy reshard_strategies[] = {Strategy::v_collective, Strategy::send_recv, Strategy::automatic};

/// The lowering a backend primitive belongs to (as PlanStep::strategy names it).
std::string_view lowering_of(std::string_view primitive) {
  if (primitive == "all_gather" || primitive == "reduce_scatter" || primitive == "all_to_all") return "padded";
  if (primitive == "all_gather_v" || primitive == "reduce_scatter_v" || primitive == "all_to_all_v" ||
      primitive == "exchange_blocks")
    return "v_collective";
  if (primitive == "broadcast" || primitive == "reduce") return "per_root";
  if (primitive == "send" || primitive == "recv") return "send_recv";
  if (primitive == "all_reduce") return "all_reduce";
  return "(unknown primitive)";
}

/// The backend calls f() makes on this rank, the agreements left out.
template <class F>
std::vector<BackendCall> calls_of(F&& f) {
  BackendCallRecorder rec;
  f();
  std::vector<BackendCall> out;
  for (const BackendCall& c : rec.calls())
    if (std::string_view(c.primitive) != "agreement") out.push_back(c);
  return out;
}

std::string str(const std::vector<BackendCall>& calls) {
  std::string s;
  for (const auto& c : calls)
    s += std::string(s.empty() ? "" : ", ") + c.primitive + " " + std::to_string(c.bytes) + " B";
  return s.empty() ? "(none)" : s;
}

/// How the calls of one transition differ from the one step explain listed
/// for it (none if it moves nothing or is local); empty if they agree.
std::string mismatch(const std::vector<PlanStep>& steps, const std::vector<BackendCall>& calls) {
  std::vector<const PlanStep*> collectives;
  for (const auto& s : steps)
    if (s.communicates) collectives.push_back(&s);
  if (collectives.size() > 1) return "more than one collective step";
  if (collectives.empty()) return calls.empty() ? "" : "a local step made backend calls";
  const PlanStep& step = *collectives[0];
  std::int64_t bytes = 0;
  for (const auto& c : calls) {
    if (lowering_of(c.primitive) != step.strategy)
      return std::string(c.primitive) + " is not a call of the " + step.strategy + " lowering";
    bytes += c.bytes;
  }
  if (bytes != step.bytes)
    return "the calls were handed " + std::to_string(bytes) + " B, not " + std::to_string(step.bytes);
  if (step.bytes > 0 && calls.empty()) return "no call";
  return "";
}

void check_ran(const std::vector<PlanStep>& steps, const std::vector<BackendCall>& calls, const std::string& what) {
  std::string planned;
  for (const auto& s : steps)
    planned += s.op + " " + s.from + " -> " + s.to + " [" + s.strategy + ", " + std::to_string(s.bytes) + " B] ";
  INFO(what, "; explained: ", planned, "; backend calls: ", str(calls));
  CHECK(mismatch(steps, calls) == "");
}

/// Explains `e`, runs it, then backward through it, recording the calls of each pass.
template <class E>
void check_expression(const E& e, const std::string& what) {
  const Plan plan = explain(e);
  std::optional<eval_t<E>> y;
  const auto forward = calls_of([&] { y.emplace(eval(e)); });
  check_ran(plan.steps, forward, what + ", forward");
  const auto loss = eager::sum(*y);
  const auto back = calls_of([&] { backward(loss); });
  check_ran(plan.backward, back, what + ", backward");
}

std::int64_t total(const Lens& ls) {
  std::int64_t s = 0;
  for (auto l : ls) s += l;
  return s;
}

std::string named(const char* op, Strategy s, const Lens& a, const Lens& b, int dim) {
  return std::string(op) + " (" + strategy_name(s) + ") dim " + std::to_string(dim) + " lengths " +
         to_string(std::span(a)) + " -> " + to_string(std::span(b));
}

template <class T, LayoutTag L>
Tensor<T, L> leaf(const Shape& g, layout_mapping<L> m = {}) {
  auto t = Tensor<T, L>::from_function(
      test::world(), g,
      [](std::span<const std::int64_t> i) { return static_cast<T>(1 + i[0] + 2 * (i.size() > 1 ? i[1] : 0)); },
      std::move(m));
  t.requires_grad();
  return t;
}

/// Every entry with a tensor sharded along dim D (lengths a; b and c for its targets).
template <class T, int D>
void cases_along(const Lens& a, const Lens& b, const Lens& c) {
  using S = Sharded<D>;
  const auto shape = [](std::int64_t extent) {
    Shape g{2, 3, 2};
    return g.with(D, extent);
  };
  const layout_mapping<S> ma(a), mb(b), mc(c);
  for (Strategy s : gather_strategies) {
    const auto x = leaf<T, S>(shape(total(a)), ma);
    check_expression(redistribute<Replicated>(x, {}, s), named("all_gather S -> R", s, a, a, D));
    check_expression(redistribute<Invariant>(x, {}, s), named("all_gather S -> I", s, a, a, D));
    const auto p = leaf<T, Partial>(shape(total(b)));
    check_expression(redistribute<S>(p, mb, s), named("reduce_scatter P -> S", s, b, b, D));
  }
  const auto p = leaf<T, Partial>(shape(total(b)));
  check_expression(redistribute<Replicated>(p), named("all_reduce P -> R", Strategy::automatic, b, b, D));
  check_expression(redistribute<Invariant>(p), named("all_reduce P -> I", Strategy::automatic, b, b, D));
  const auto r = leaf<T, Replicated>(shape(total(b)));
  const auto i = leaf<T, Invariant>(shape(total(b)));
  check_expression(redistribute<S>(r, mb), named("slice R -> S", Strategy::automatic, b, b, D));
  check_expression(redistribute<S>(i, mb), named("slice I -> S", Strategy::automatic, b, b, D));
  check_expression(redistribute<Replicated>(i), named("replicate I -> R", Strategy::automatic, b, b, D));
  const auto x = leaf<T, S>(shape(total(a)), ma);
  check_expression(redistribute<Partial>(x), named("zero_pad S -> P", Strategy::automatic, a, a, D));
  for (Strategy s : a2a_strategies) {
    constexpr int other = 1 - D;
    Shape g = shape(total(a)).with(other, total(b));
    const auto y = leaf<T, S>(g, ma);
    check_expression(redistribute<Sharded<other>>(y, layout_mapping<Sharded<other>>(b), s),
                     named("all_to_all", s, a, b, D));
  }
  for (Strategy s : reshard_strategies) {
    check_expression(redistribute<S>(x, mc, s), named("reshard", s, a, c, D));
    check_expression(redistribute<S>(x, ma, s), named("reshard to the same lengths", s, a, a, D));
  }
}

}  // namespace

TEST_CASE_TEMPLATE("what runs is what explain said: every transition, strategy and lengths case", T, float, double) {
  const int n = test::world().size();
  auto rng = test::shared_rng(20261201 + static_cast<std::uint64_t>(n));
  const auto cases = test::lengths_cases(rng, n, {});
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const Lens& a = cases[k];
    const Lens& b = cases[(k + 1) % cases.size()];
    const Lens c = test::random_lengths(rng, n, total(a));  // a's total split again: a reshard target
    cases_along<T, 0>(a, b, c);
    cases_along<T, 1>(a, b, c);
  }
}

TEST_CASE("what runs is what explain said: simplified chains") {
  using T = double;
  const int n = test::world().size();
  auto rng = test::shared_rng(7);
  for (const Lens& a : test::lengths_cases(rng, n, {})) {
    const auto p = leaf<T, Partial>(Shape{total(a), 3});
    // reduce_scatter then all_gather: one all_reduce, forward and backward.
    check_expression(all_gather(reduce_scatter<Sharded<0>>(p, a)),
                     "all_gather(reduce_scatter(p)) lengths " + to_string(std::span(a)));
    const auto r = leaf<T, Replicated>(Shape{total(a), 3});
    // slice then zero_pad of a Replicated tensor: no route R -> P, so the chain runs step by step (no collective).
    check_expression(zero_pad(slice<Sharded<0>>(r, a)), "zero_pad(slice(r)) lengths " + to_string(std::span(a)));
  }
}

TEST_CASE("the comparison fails on a plan that is not what ran") {
  const auto& comm = test::world();
  const auto x =
      Tensor<double, Sharded<0>>::ones(comm, {2 * comm.size(), 3}, layout_mapping<Sharded<0>>(Lens(comm.size(), 2)));
  const auto e = all_gather(x, Strategy::v_collective);
  const Plan plan = explain(e);
  const auto calls = calls_of([&] { (void)eval(e); });
  REQUIRE(plan.steps.size() == 1);
  CHECK(mismatch(plan.steps, calls) == "");
  auto more = plan.steps;
  more[0].bytes += 1;
  CHECK(mismatch(more, calls) != "");
  auto other = plan.steps;
  other[0].strategy = "per_root";
  CHECK(mismatch(other, calls) != "");
  auto local = plan.steps;
  local[0].communicates = false;
  CHECK(mismatch(local, calls) != "");
}

TEST_CASE("the recorder sees the backend's calls, and only while it lives") {
  const auto& comm = test::world();
  const auto p = Tensor<float, Partial>::ones(comm, {4, 3});
  BackendCallRecorder outer;
  {
    BackendCallRecorder inner;
    Tensor<float, Replicated> y = all_reduce(p);
    std::int64_t reduced = 0;
    for (const auto& c : inner.calls())
      if (std::string_view(c.primitive) == "all_reduce") reduced += c.bytes;
    CHECK(reduced == 4 * 3 * 4);
  }
  CHECK(outer.calls().empty());  // the inner recorder took them
  Tensor<float, Replicated> y = all_reduce(p);
  CHECK(!outer.calls().empty());
  CHECK(std::string_view(outer.calls().back().primitive) == "all_reduce");
}

}  // namespace shardex_test_plan_runs
