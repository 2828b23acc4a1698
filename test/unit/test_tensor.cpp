// SPDX-License-Identifier: MIT
// Tensor construction and access, and the basics of autodiff on one tensor:
// zeros/ones/full, from_function, from_local/view_local, clone, the local
// geometry of static and dynamic lengths (1-d to 4-d, zero-length parts),
// describe(), operator(), format_local; sum and scale with their layout rules,
// gradients, grad() before backward, detach(), and a tensor used twice.
// Runs at every world size; nothing here depends on a particular one.
#include <doctest/doctest.h>

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <shardex.hpp>

#include "support/dist.hpp"

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_tensor {

using namespace shardex;
using shardex::test::world;

namespace {

/// Uneven lengths with zeros among them (from 2 ranks on): 2, 0, 4, 5, 6, 0, ...
std::vector<std::int64_t> uneven(int n) {
  std::vector<std::int64_t> ls;
  for (int r = 0; r < n; ++r) ls.push_back(r % 3 == 1 ? 0 : r + 2);
  return ls;
}

std::int64_t sum_of(std::span<const std::int64_t> ls) {
  std::int64_t s = 0;
  for (auto l : ls) s += l;
  return s;
}

/// Calls f(lengths<...>{}) with a static lengths list for the world size n
/// (zeros included from 2 ranks on); returns false if there is none for n.
template <class F>
bool with_static_lengths(int n, F&& f) {
  switch (n) {
    case 1:
      f(lengths<3>{});
      return true;
    case 2:
      f(lengths<0, 3>{});
      return true;
    case 3:
      f(lengths<2, 0, 5>{});
      return true;
    case 4:
      f(lengths<1, 2, 3, 4>{});
      return true;
    default:
      return false;
  }
}

/// The global function the from_function tests sample: distinct for every
/// global index (digits of the index, 1-based so that no value is 0).
double global_value(std::span<const std::int64_t> idx) {
  double v = 0;
  for (auto i : idx) v = v * 100 + static_cast<double>(i + 1);
  return v;
}

/// The global index of the local element at flat index i of tensor t.
template <class X>
std::vector<std::int64_t> global_index_of(const X& t, std::int64_t i) {
  const Shape& ls = t.local_shape();
  std::vector<std::int64_t> idx(static_cast<std::size_t>(ls.rank()), 0);
  for (int d = ls.rank() - 1; d >= 0; --d) {
    idx[static_cast<std::size_t>(d)] = i % ls[d];
    i /= ls[d];
  }
  if constexpr (is_sharded_v<typename X::layout_type>)
    idx[static_cast<std::size_t>(X::layout_type::dim)] += t.global_offset();
  return idx;
}

/// Number of local elements of t that differ from f(global index).
template <class X, class F>
int count_mismatches(const X& t, F&& f) {
  int bad = 0;
  for (std::int64_t i = 0; i < t.size(); ++i) {
    const auto idx = global_index_of(t, i);
    if (t.data()[i] != static_cast<typename X::value_type>(f(std::span<const std::int64_t>(idx)))) ++bad;
  }
  return bad;
}

template <class X>
int count_not_equal(const X& t, typename X::value_type v) {
  int bad = 0;
  for (auto e : t.local()) bad += e != v;
  return bad;
}

/// A global shape of rank R: extents 2, 3, 4, 5 in order, with dim D set to `extent_d`.
template <int R>
Shape shape_of_rank(int d, std::int64_t extent_d) {
  static_assert(R >= 1 && R <= 4);
  const std::int64_t ext[] = {2, 3, 4, 5};
  Shape s = R == 1   ? Shape{ext[0]}
            : R == 2 ? Shape{ext[0], ext[1]}
            : R == 3 ? Shape{ext[0], ext[1], ext[2]}
                     : Shape{2, 3, 4, 5};
  return s.with(d, extent_d);
}

/// A test-local binary op (shardex has no elementwise add yet): the sum of two
/// scalars of the same layout, recorded in the graph with the rule
/// d(a + b)/da = d(a + b)/db = 1. It lets one tensor reach a loss twice.
template <class T, class L>
Tensor<T, L> add_scalars(const Tensor<T, L>& a, const Tensor<T, L>& b) {
  auto y = Tensor<T, L>::full(a.comm(), Shape{}, a.data()[0] + b.data()[0]);
  std::vector<std::shared_ptr<autodiff::Node>> inputs;
  if (a.node()) inputs.push_back(a.node());
  if (b.node()) inputs.push_back(b.node());
  if (!inputs.empty())
    y.record("add", std::move(inputs), [na = a.node(), nb = b.node()](const Tensor<T, dual_t<L>>& g) {
      if (na) na->accumulate(g);
      if (nb) nb->accumulate(g);
    });
  return y;
}

}  // namespace

// ---- layout rules of sum and scale (compile time) -------------------------------
using S1s = Sharded<1, lengths<1, 2, 3, 4>>;
static_assert(std::same_as<sum_layout_t<Invariant>, Invariant>);
static_assert(std::same_as<sum_layout_t<Replicated>, Replicated>);
static_assert(std::same_as<sum_layout_t<Partial>, Partial>);
static_assert(std::same_as<sum_layout_t<S1s>, Partial>);
static_assert(std::same_as<sum_layout_t<Sharded<0>>, Partial>);
static_assert(std::same_as<decltype(eager::sum(std::declval<Tensor<float, S1s>>())), Tensor<float, Partial>>);
static_assert(std::same_as<decltype(eager::sum(std::declval<Tensor<double, Sharded<2>>>())), Tensor<double, Partial>>);
static_assert(std::same_as<decltype(eager::sum(std::declval<Tensor<float, Replicated>>())), Tensor<float, Replicated>>);
static_assert(std::same_as<decltype(eager::sum(std::declval<Tensor<float, Invariant>>())), Tensor<float, Invariant>>);
static_assert(std::same_as<decltype(eager::sum(std::declval<Tensor<float, Partial>>())), Tensor<float, Partial>>);
// Scaling is linear: it keeps every layout, static lengths included.
static_assert(std::same_as<eval_t<decltype(std::declval<Tensor<float, S1s>>() * 3.0f)>, Tensor<float, S1s>>);
static_assert(std::same_as<eval_t<decltype(2.0 * std::declval<Tensor<double, Partial>>())>, Tensor<double, Partial>>);
static_assert(
    std::same_as<eval_t<decltype(std::declval<Tensor<float, Replicated>>() / 4.0f)>, Tensor<float, Replicated>>);
static_assert(
    std::same_as<decltype(eager::scale(std::declval<Tensor<float, Invariant>>(), 2.0f)), Tensor<float, Invariant>>);
// Gradients take the dual layout.
static_assert(std::same_as<Tensor<float, Replicated>::grad_type, Tensor<float, Partial>>);
static_assert(std::same_as<Tensor<float, Partial>::grad_type, Tensor<float, Replicated>>);
static_assert(std::same_as<Tensor<float, Invariant>::grad_type, Tensor<float, Invariant>>);
static_assert(std::same_as<Tensor<double, S1s>::grad_type, Tensor<double, S1s>>);
// A static mapping costs nothing: a statically sharded tensor is no bigger than a whole one.
static_assert(sizeof(Tensor<float, S1s>) == sizeof(Tensor<float, Replicated>));
static_assert(sizeof(Tensor<float, Sharded<1>>) > sizeof(Tensor<float, Replicated>));

// ---- construction ---------------------------------------------------------------

TEST_CASE_TEMPLATE("zeros, ones and full fill every local element of whole layouts", T, float, double) {
  const auto& comm = world();
  auto z = Tensor<T, Replicated>::zeros(comm, {3, 4});
  auto o = Tensor<T, Partial>::ones(comm, {3, 4});
  auto f = Tensor<T, Invariant>::full(comm, {2, 3, 2}, T(2.5));
  CHECK(z.shape() == Shape{3, 4});
  CHECK(z.local_shape() == Shape{3, 4});
  CHECK(z.size() == 12);
  CHECK(count_not_equal(z, T(0)) == 0);
  CHECK(count_not_equal(o, T(1)) == 0);
  CHECK(o.size() == 12);
  CHECK(f.local_shape() == Shape{2, 3, 2});
  CHECK(count_not_equal(f, T(2.5)) == 0);
  CHECK(f.global_offset() == 0);
  CHECK_FALSE(z.is_view());
  CHECK(z.rank() == comm.rank());
  CHECK(z.world_size() == comm.size());
  // A 0-d tensor holds one element.
  auto s = Tensor<T, Replicated>::full(comm, Shape{}, T(7));
  CHECK(s.size() == 1);
  CHECK(s.local_shape().rank() == 0);
  CHECK(s() == T(7));
}

TEST_CASE_TEMPLATE("zeros, ones and full give each rank its slice of a sharded tensor", T, float, double) {
  const auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  const auto ls = uneven(n);
  const layout_mapping<Sharded<0>> m(ls);
  auto z = Tensor<T, Sharded<0>>::zeros(comm, {sum_of(ls), 3}, m);
  auto o = Tensor<T, Sharded<0>>::ones(comm, {sum_of(ls), 3}, m);
  auto f = Tensor<T, Sharded<0>>::full(comm, {sum_of(ls), 3}, T(-1.5), m);
  CHECK(z.shape() == Shape{sum_of(ls), 3});
  CHECK(z.local_shape() == Shape{ls[static_cast<std::size_t>(r)], 3});
  CHECK(o.size() == ls[static_cast<std::size_t>(r)] * 3);
  CHECK(count_not_equal(z, T(0)) == 0);
  CHECK(count_not_equal(o, T(1)) == 0);
  CHECK(count_not_equal(f, T(-1.5)) == 0);
  CHECK(std::vector<std::int64_t>(o.lengths().begin(), o.lengths().end()) == ls);
  CHECK(o.mapping() == m);
}

TEST_CASE_TEMPLATE("from_function: each rank holds its part of the global function, 1-d to 4-d", T, float, double) {
  const auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  const auto ls = uneven(n);
  const std::int64_t total = sum_of(ls);
  const auto off = offsets_of(ls);
  const auto run = [&]<int R, int D>() {
    CAPTURE(R);
    CAPTURE(D);
    const Shape global = shape_of_rank<R>(D, total);
    auto t = Tensor<T, Sharded<D>>::from_function(comm, global, global_value, layout_mapping<Sharded<D>>(ls));
    CHECK(t.shape() == global);
    CHECK(t.local_shape() == global.with(D, ls[static_cast<std::size_t>(r)]));
    CHECK(t.global_offset() == off[static_cast<std::size_t>(r)]);
    CHECK(t.size() == global.with(D, ls[static_cast<std::size_t>(r)]).numel());
    CHECK(count_mismatches(t, global_value) == 0);
    // Whole layouts hold the whole function on every rank.
    auto w = Tensor<T, Replicated>::from_function(comm, global, global_value);
    CHECK(w.local_shape() == global);
    CHECK(count_mismatches(w, global_value) == 0);
  };
  run.template operator()<1, 0>();
  run.template operator()<2, 0>();
  run.template operator()<2, 1>();
  run.template operator()<3, 0>();
  run.template operator()<3, 1>();
  run.template operator()<3, 2>();
  run.template operator()<4, 0>();
  run.template operator()<4, 2>();
  run.template operator()<4, 3>();
}

TEST_CASE("from_function: spot values at known global indices") {
  const auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  // Rank r holds columns [2r, 2r + 2) of a 3 x 2n matrix whose element (i, j) is 10 i + j.
  const std::vector<std::int64_t> ls(static_cast<std::size_t>(n), 2);
  auto t = Tensor<double, Sharded<1>>::from_function(
      comm, {3, 2 * n}, [](std::span<const std::int64_t> ij) { return 10 * ij[0] + ij[1]; },
      layout_mapping<Sharded<1>>(ls));
  SHARDEX_REQUIRE_ALL((t.local_shape() == Shape{3, 2}));
  CHECK(t(0, 0) == 2 * r);
  CHECK(t(0, 1) == 2 * r + 1);
  CHECK(t(2, 0) == 20 + 2 * r);
  CHECK(t(2, 1) == 21 + 2 * r);
}

TEST_CASE("static and dynamic lengths give the same local geometry") {
  const auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  const bool have = with_static_lengths(
      n, [&]<std::int64_t... Ls>(lengths<Ls...>) {
        using Lens = lengths<Ls...>;
        const std::vector<std::int64_t> ls{Ls...};
        const auto rr = static_cast<std::size_t>(r);
        auto s = Tensor<float, Sharded<1, Lens>>::from_function(comm, {2, Lens::sum, 3}, global_value);
        auto d = Tensor<float, Sharded<1>>::from_function(comm, {2, Lens::sum, 3}, global_value,
                                                          layout_mapping<Sharded<1>>(ls));
        CHECK(s.shape() == d.shape());
        CHECK(s.local_shape() == Shape{2, Lens::values[rr], 3});
        CHECK(s.local_shape() == d.local_shape());
        CHECK(s.global_offset() == Lens::offsets[rr]);
        CHECK(s.global_offset() == d.global_offset());
        CHECK(std::vector<std::int64_t>(s.lengths().begin(), s.lengths().end()) == ls);
        CHECK(std::vector<std::int64_t>(d.lengths().begin(), d.lengths().end()) == ls);
        CHECK(count_mismatches(s, global_value) == 0);
        CHECK(count_mismatches(d, global_value) == 0);
        SHARDEX_REQUIRE_ALL(s.size() == d.size());
        int differ = 0;
        for (std::int64_t i = 0; i < s.size(); ++i) differ += s.data()[i] != d.data()[i];
        CHECK(differ == 0);
      });
  if (!have) MESSAGE("no static lengths list for world size " << n << "; the dynamic cases cover it");
}

TEST_CASE("zero-length local parts") {
  const auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  // Everything on the last rank: every other rank holds nothing.
  std::vector<std::int64_t> ls(static_cast<std::size_t>(n), 0);
  ls.back() = 3;
  auto t = Tensor<float, Sharded<0>>::ones(comm, {3, 2}, layout_mapping<Sharded<0>>(ls));
  const bool last = r == n - 1;
  CHECK(t.local_shape() == Shape{last ? 3 : 0, 2});
  CHECK(t.size() == (last ? 6 : 0));
  CHECK(t.local().size() == static_cast<std::size_t>(last ? 6 : 0));
  CHECK(t.global_offset() == 0);
  CHECK(format_local(t) == (last ? "[[1, 1], [1, 1], [1, 1]]" : "[[]]"));
  // A zero global extent: every rank holds nothing.
  auto e = Tensor<double, Sharded<1>>::zeros(
      comm, {4, 0}, layout_mapping<Sharded<1>>(std::vector<std::int64_t>(static_cast<std::size_t>(n), 0)));
  CHECK(e.size() == 0);
  CHECK(e.local_shape() == Shape{4, 0});
  CHECK(eager::sum(e)() == 0.0);
  CHECK(e.clone().size() == 0);
}

// ---- from_local, view_local, clone ---------------------------------------------------

TEST_CASE_TEMPLATE("from_local copies each rank's part; the global shape follows from the lengths", T, float, double) {
  const auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  const auto ls = uneven(n);
  const std::int64_t mine = ls[static_cast<std::size_t>(r)];
  std::vector<T> buf(static_cast<std::size_t>(2 * mine));
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = T(100 * r) + T(i);
  auto t = Tensor<T, Sharded<1>>::from_local(comm, {2, mine}, buf, layout_mapping<Sharded<1>>(ls));
  CHECK(t.shape() == Shape{2, sum_of(ls)});
  CHECK(t.local_shape() == Shape{2, mine});
  CHECK_FALSE(t.is_view());
  SHARDEX_REQUIRE_ALL(t.size() == static_cast<std::int64_t>(buf.size()));
  int differ = 0;
  for (std::size_t i = 0; i < buf.size(); ++i) differ += t.data()[i] != buf[i];
  CHECK(differ == 0);
  if (!buf.empty()) {
    CHECK(t.data() != buf.data());
    buf[0] = T(-1);  // the tensor holds its own copy
    CHECK(t.data()[0] == T(100 * r));
  }
  // Whole layouts: the local shape is the global shape.
  std::vector<T> whole{1, 2, 3, 4, 5, 6};
  auto w = Tensor<T, Replicated>::from_local(comm, {3, 2}, whole);
  CHECK(w.shape() == Shape{3, 2});
  CHECK(w(2, 1) == T(6));
  CHECK(w(1, 0) == T(3));
}

TEST_CASE("view_local shares memory with the user's buffer, both ways") {
  const auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  std::vector<float> buf(6);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = float(i);
  // Two rows per rank: the global shape is (2n, 3).
  auto v = Tensor<float, Sharded<0>>::view_local(
      comm, {2, 3}, buf.data(), buf.size(),
      layout_mapping<Sharded<0>>(std::vector<std::int64_t>(static_cast<std::size_t>(n), 2)));
  CHECK(v.is_view());
  CHECK(v.data() == buf.data());
  CHECK(v.shape() == Shape{2 * n, 3});
  CHECK(v.global_offset() == 2 * r);
  v(1, 2) = 42.0f;  // through the tensor ...
  CHECK(buf[5] == 42.0f);
  buf[0] = -7.0f;  // ... and through the buffer
  CHECK(v(0, 0) == -7.0f);
  // A copy of the handle shares the same storage.
  auto same = v;
  same(0, 1) = 9.0f;
  CHECK(buf[1] == 9.0f);
  // A clone of a view owns its data.
  auto c = v.clone();
  CHECK_FALSE(c.is_view());
  CHECK(c.data() != buf.data());
  c(0, 0) = 1000.0f;
  CHECK(buf[0] == -7.0f);
  CHECK(c(1, 2) == 42.0f);
}

TEST_CASE_TEMPLATE("clone is deep; a copy is a shared handle", T, float, double) {
  const auto& comm = world();
  auto a = Tensor<T, Replicated>::from_function(comm, {2, 3}, global_value);
  auto shared = a;
  auto deep = a.clone();
  CHECK(deep.shape() == a.shape());
  CHECK(deep.local_shape() == a.local_shape());
  CHECK(deep.data() != a.data());
  CHECK(shared.data() == a.data());
  deep(1, 1) = T(-1);
  shared(0, 0) = T(-2);
  CHECK(a(1, 1) == T(global_value(std::vector<std::int64_t>{1, 1})));
  CHECK(a(0, 0) == T(-2));
  CHECK(deep(0, 0) == T(global_value(std::vector<std::int64_t>{0, 0})));
  // A sharded clone keeps its mapping.
  const auto ls = uneven(comm.size());
  auto s = Tensor<T, Sharded<0>>::ones(comm, {sum_of(ls)}, layout_mapping<Sharded<0>>(ls));
  auto sc = s.clone();
  CHECK(sc.mapping() == s.mapping());
  CHECK(sc.global_offset() == s.global_offset());
  CHECK(count_not_equal(sc, T(1)) == 0);
}

// ---- observers and text ----------------------------------------------------------------

TEST_CASE("describe() names dtype, layout, global and local shapes, rank and world size") {
  const auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  const std::string on = " on rank " + std::to_string(r) + " of " + std::to_string(n);
  CHECK(Tensor<float, Replicated>::zeros(comm, {2, 3}).describe() ==
        "Tensor<float32, R> global (2, 3), local (2, 3)" + on);
  CHECK(Tensor<double, Partial>::zeros(comm, {4}).describe() == "Tensor<float64, P(sum)> global (4), local (4)" + on);
  CHECK(Tensor<float, Invariant>::zeros(comm, Shape{}).describe() == "Tensor<float32, I> global (), local ()" + on);
  const auto ls = uneven(n);
  const std::string mine = std::to_string(ls[static_cast<std::size_t>(r)]);
  CHECK(Tensor<double, Sharded<1>>::zeros(comm, {5, sum_of(ls)}, layout_mapping<Sharded<1>>(ls)).describe() ==
        "Tensor<float64, S(1)[dyn]> global (5, " + std::to_string(sum_of(ls)) + "), local (5, " + mine + ")" + on);
  with_static_lengths(
      n, [&]<std::int64_t... Ls>(lengths<Ls...>) {
        using Lens = lengths<Ls...>;
        CHECK(Tensor<float, Sharded<0, Lens>>::zeros(comm, {Lens::sum, 2}).describe() ==
              "Tensor<float32, S(0)" + to_string(Lens::values) + "> global (" + std::to_string(Lens::sum) +
                  ", 2), local (" + std::to_string(Lens::values[static_cast<std::size_t>(r)]) + ", 2)" + on);
      });
}

TEST_CASE("operator() indexes the local part row-major; a wrong index count throws") {
  const auto& comm = world();
  auto t = Tensor<float, Replicated>::zeros(comm, {2, 3, 4});
  t(1, 2, 3) = 5.0f;
  t(0, 1, 0) = 6.0f;
  CHECK(t.data()[1 * 12 + 2 * 4 + 3] == 5.0f);
  CHECK(t.data()[4] == 6.0f);
  CHECK(t(1, 2, 3) == 5.0f);
  CHECK(t.array().sum() == 11.0f);
  CHECK_THROWS_WITH_AS((void)t(1, 2), doctest::Contains("2 indices for a 3-d local shape (2, 3, 4)"), invalid_argument);
  CHECK_THROWS_AS((void)t(0, 0, 0, 0), invalid_argument);
  auto v = Tensor<double, Replicated>::from_function(comm, {4}, global_value);
  CHECK(v(3) == 4.0);
}

TEST_CASE("format_local prints the local part with nested brackets") {
  const auto& comm = world();
  const auto iota = [](std::span<const std::int64_t> idx) {
    double v = 0;
    for (auto i : idx) v = v * 2 + static_cast<double>(i);
    return v;
  };
  CHECK(format_local(Tensor<float, Replicated>::from_function(comm, {2, 2}, iota)) == "[[0, 1], [2, 3]]");
  CHECK(format_local(Tensor<float, Replicated>::from_function(comm, {4}, iota)) == "[0, 1, 2, 3]");
  CHECK(format_local(Tensor<double, Replicated>::from_function(comm, {2, 1, 2}, iota)) == "[[[0, 1]], [[4, 5]]]");
  CHECK(format_local(Tensor<float, Invariant>::full(comm, Shape{}, 2.25f)) == "2.25");
  CHECK(format_local(Tensor<double, Partial>::full(comm, {1, 3}, -0.5)) == "[[-0.5, -0.5, -0.5]]");
  CHECK(format_local(Tensor<float, Replicated>::zeros(comm, {0})) == "[]");
  CHECK(format_local(Tensor<float, Replicated>::zeros(comm, {3, 0})) == "[[]]");
}

// ---- autodiff basics -----------------------------------------------------------------------

TEST_CASE_TEMPLATE("eager::sum(x * 3): the loss and a gradient of 3 in the dual layout, for every layout", T, float,
                   double) {
  const auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  const auto ls = uneven(n);
  const std::int64_t mine = ls[static_cast<std::size_t>(r)];

  SUBCASE("Sharded: loss Partial, gradient Sharded") {
    auto x = Tensor<T, Sharded<0>>::ones(comm, {sum_of(ls), 2}, layout_mapping<Sharded<0>>(ls)).requires_grad();
    auto loss = eager::sum(x * T(3));
    static_assert(std::same_as<decltype(loss), Tensor<T, Partial>>);
    static_assert(std::same_as<std::remove_cvref_t<decltype(x.grad())>, Tensor<T, Sharded<0>>>);
    CHECK(loss() == T(3 * 2 * mine));
    backward(loss);
    SHARDEX_REQUIRE_ALL(x.has_grad());
    CHECK(x.grad().local_shape() == x.local_shape());
    CHECK(x.grad().mapping() == x.mapping());
    CHECK(count_not_equal(x.grad(), T(3)) == 0);
  }
  SUBCASE("Replicated: loss Replicated, gradient Partial") {
    auto x = Tensor<T, Replicated>::full(comm, {2, 3}, T(2)).requires_grad();
    auto loss = eager::sum(T(3) * x);
    static_assert(std::same_as<decltype(loss), Tensor<T, Replicated>>);
    static_assert(std::same_as<std::remove_cvref_t<decltype(x.grad())>, Tensor<T, Partial>>);
    CHECK(loss() == T(36));
    backward(loss);
    CHECK(x.grad().local_shape() == Shape{2, 3});
    CHECK(count_not_equal(x.grad(), T(3)) == 0);
  }
  SUBCASE("Partial: loss Partial, gradient Replicated") {
    auto x = Tensor<T, Partial>::full(comm, {4}, T(r)).requires_grad();
    auto loss = eager::sum(x * T(3));
    static_assert(std::same_as<decltype(loss), Tensor<T, Partial>>);
    static_assert(std::same_as<std::remove_cvref_t<decltype(x.grad())>, Tensor<T, Replicated>>);
    CHECK(loss() == T(12 * r));
    backward(loss);
    CHECK(count_not_equal(x.grad(), T(3)) == 0);
  }
  SUBCASE("Invariant: loss Invariant, gradient Invariant") {
    auto x = Tensor<T, Invariant>::ones(comm, {3}).requires_grad();
    auto loss = eager::sum(x * T(3));
    static_assert(std::same_as<decltype(loss), Tensor<T, Invariant>>);
    static_assert(std::same_as<std::remove_cvref_t<decltype(x.grad())>, Tensor<T, Invariant>>);
    CHECK(loss() == T(9));
    backward(loss);
    CHECK(count_not_equal(x.grad(), T(3)) == 0);
  }
  SUBCASE("chained scales multiply, division divides") {
    auto x = Tensor<T, Replicated>::ones(comm, {5}).requires_grad();
    auto loss = eager::sum((x * T(3)) / T(4) * T(2));
    CHECK(loss() == T(7.5));
    backward(loss);
    CHECK(count_not_equal(x.grad(), T(1.5)) == 0);
  }
}

TEST_CASE("grad() before backward, and of a tensor outside the graph, throws a clear error") {
  const auto& comm = world();
  auto x = Tensor<float, Replicated>::ones(comm, {2, 2}).requires_grad();
  CHECK(x.is_differentiable());
  CHECK_FALSE(x.has_grad());
  CHECK_THROWS_WITH_AS((void)x.grad(), doctest::Contains("has no gradient yet; call backward(loss)"), shardex::error);
  CHECK_THROWS_WITH_AS((void)x.grad(), doctest::Contains("Tensor<float32, R> global (2, 2)"), shardex::error);
  auto plain = Tensor<float, Replicated>::ones(comm, {2, 2});
  CHECK_FALSE(plain.is_differentiable());
  CHECK_THROWS_WITH_AS((void)plain.grad(), doctest::Contains("is not differentiable; call requires_grad()"),
                       shardex::error);
  // A loss that depends on nothing differentiable, and a loss with more than one element.
  CHECK_THROWS_WITH_AS(backward(eager::sum(plain)),
                       doctest::Contains("does not depend on any tensor that requires_grad()"), shardex::error);
  CHECK_THROWS_WITH_AS(backward(x * 2.0f), doctest::Contains("the loss must hold one element"), invalid_argument);
  CHECK_FALSE(x.has_grad());
  // After backward the gradient is there, and zero_grad forgets it.
  backward(eager::sum(x));
  CHECK(x.has_grad());
  CHECK(count_not_equal(x.grad(), 1.0f) == 0);
  x.zero_grad();
  CHECK_FALSE(x.has_grad());
  CHECK(x.is_differentiable());
}

TEST_CASE("detach() leaves the graph and keeps the data") {
  const auto& comm = world();
  auto x = Tensor<double, Replicated>::full(comm, {3}, 2.0).requires_grad();
  auto d = x.detach();
  CHECK_FALSE(d.is_differentiable());
  CHECK(d.data() == x.data());   // same storage, no copy
  CHECK(x.is_differentiable());  // the original stays in the graph
  auto y = eager::scale(x, 4.0);
  CHECK(y.is_differentiable());
  auto yd = y.detach();
  CHECK_FALSE(yd.is_differentiable());
  CHECK(eager::sum(yd)() == 24.0);
  // A loss through the detached tensor does not reach x.
  CHECK_FALSE(eager::sum(yd * 2.0).is_differentiable());
  CHECK_THROWS_AS(backward(eager::sum(yd * 2.0)), shardex::error);
  CHECK_FALSE(x.has_grad());
  // Mixing a detached path and a live one: only the live one contributes.
  backward(add_scalars(eager::sum(yd * 5.0), eager::sum(x * 7.0)));
  CHECK(count_not_equal(x.grad(), 7.0) == 0);
}

TEST_CASE_TEMPLATE("a tensor used twice accumulates both contributions", T, float, double) {
  const auto& comm = world();
  const auto ls = uneven(comm.size());
  SUBCASE("a leaf reached along two paths") {
    auto x = Tensor<T, Sharded<0>>::ones(comm, {sum_of(ls)}, layout_mapping<Sharded<0>>(ls)).requires_grad();
    auto loss = add_scalars(eager::sum(x * T(2)), eager::sum(x * T(3)));
    backward(loss);
    CHECK(count_not_equal(x.grad(), T(5)) == 0);
  }
  SUBCASE("an intermediate reached along two paths") {
    auto x = Tensor<T, Replicated>::ones(comm, {2, 2}).requires_grad();
    auto y = x * T(10);  // its gradient is 2 + 3 before it flows to x
    auto loss = add_scalars(eager::sum(y * T(2)), eager::sum(y * T(3)));
    CHECK(loss() == T(200));
    backward(loss);
    CHECK(count_not_equal(x.grad(), T(50)) == 0);
  }
  SUBCASE("the same tensor twice in one call") {
    auto x = Tensor<T, Invariant>::full(comm, {3}, T(1)).requires_grad();
    auto s = eager::sum(x);
    backward(add_scalars(s, s));
    CHECK(count_not_equal(x.grad(), T(2)) == 0);
  }
  SUBCASE("a gradient handed to two nodes is not overwritten when one of them sums") {
    // loss = (a + b) + a: the loss's gradient reaches `a` and `a + b` as the same
    // tensor; `a` then gets a second contribution, which must not change the
    // gradient that `a + b` passes on to b.
    auto x = Tensor<T, Replicated>::ones(comm, {3}).requires_grad();
    auto a = eager::sum(x);
    auto b = eager::sum(x * T(5));
    auto loss = add_scalars(add_scalars(a, b), a);
    CHECK(loss() == T(21));
    backward(loss);
    CHECK(count_not_equal(x.grad(), T(2 + 5)) == 0);
  }
  SUBCASE("two backward passes add up on the leaf") {
    auto x = Tensor<T, Partial>::ones(comm, {4}).requires_grad();
    backward(eager::sum(x * T(2)));
    backward(eager::sum(x * T(3)));
    CHECK(count_not_equal(x.grad(), T(5)) == 0);
    x.zero_grad();
    backward(eager::sum(x * T(4)));
    CHECK(count_not_equal(x.grad(), T(4)) == 0);
  }
}

}  // namespace shardex_test_tensor
