// SPDX-License-Identifier: MIT
// The MPI communicator: rank and size, sub-communicators, the primitives, and
// MPI errors turned into backend_error with MPI's own error string.
#include <doctest/doctest.h>

#include <limits>
#include <shardex.hpp>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "shardex/core/watchdog.hpp"

#include "support/dist.hpp"

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_communicator {

using namespace shardex;
using shardex::test::world;

#if SHARDEX_WITH_MPI
TEST_CASE("world() is a duplicate of MPI_COMM_WORLD with the same rank and size") {
  int r = -1, n = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  CHECK(world().rank() == r);
  CHECK(world().size() == n);
  int cmp = MPI_UNEQUAL;
  MPI_Comm_compare(world().native(), MPI_COMM_WORLD, &cmp);
  CHECK(cmp == MPI_CONGRUENT);  // same group, distinct context: our traffic never mixes with the user's
}
#else
TEST_CASE("without MPI, world() is the one-rank world") {
  CHECK(world().rank() == 0);
  CHECK(world().size() == 1);
  CHECK(mpi::Environment::active());
}
#endif

TEST_CASE("split makes sub-communicators whose collectives stay inside them") {
  const auto& w = world();
  auto half = w.split(w.rank() % 2, w.rank());
  const int expected_size = (w.size() + 1 - w.rank() % 2) / 2;
  CHECK(half.size() == expected_size);
  CHECK(half.rank() == w.rank() / 2);
  double v = 1.0 + w.rank();
  half.all_reduce(&v, 1);
  double want = 0;
  for (int r = w.rank() % 2; r < w.size(); r += 2) want += 1.0 + r;
  CHECK(v == want);
  // A sharded tensor over the sub-communicator: each half gathers its own ranks' parts.
  std::vector<std::int64_t> lens(static_cast<std::size_t>(half.size()), 1);
  auto x = Tensor<double, Sharded<0>>::full(half, {half.size()}, double(w.rank()), layout_mapping<Sharded<0>>(lens));
  Tensor<double, Replicated> y = all_gather(x);
  for (int i = 0; i < half.size(); ++i) CHECK(y.data()[i] == double(w.rank() % 2 + 2 * i));
  auto node = w.split_node_local();
  CHECK(node.size() >= 1);
}

TEST_CASE_TEMPLATE("all_reduce_max: the element-wise maximum over ranks, in place and out of place", T, float, double,
                   std::int64_t) {
  const auto& w = world();
  const int n = w.size(), me = w.rank();
  // Element i's maximum sits on rank i % n; the others hold smaller values,
  // negative ones (and -inf for the floating types) among them.
  constexpr std::int64_t count = 7;
  std::vector<T> mine(count), want(count);
  for (std::int64_t i = 0; i < count; ++i) {
    const int owner = static_cast<int>(i % n);
    const T top = static_cast<T>(3 * i - 10);
    want[static_cast<std::size_t>(i)] = top;
    T other = static_cast<T>(top - 1 - me);
    if constexpr (std::is_floating_point_v<T>)
      if (i == 2) other = -std::numeric_limits<T>::infinity();
    mine[static_cast<std::size_t>(i)] = me == owner ? top : other;
  }
  std::vector<T> out(count, T(99));
  BackendCallRecorder rec;
  w.all_reduce_max(mine.data(), out.data(), count);
  CHECK(out == want);
  CHECK(mine[0] == (me == 0 ? want[0] : static_cast<T>(want[0] - 1 - me)));  // the send buffer is untouched
  std::vector<T> buf = mine;
  w.all_reduce_max(buf.data(), count);
  CHECK(buf == want);
  // The recorder sees both calls as the max all-reduce, with the bytes each rank sends.
  REQUIRE(rec.calls().size() == 2);
  for (const auto& c : rec.calls()) {
    CHECK(std::string(c.primitive) == "all_reduce_max");
    CHECK(c.bytes == count * static_cast<std::int64_t>(sizeof(T)));
  }
  // Zero elements move nothing and return at once on every rank.
  w.all_reduce_max(buf.data(), 0);
  CHECK(buf == want);
  // A sub-communicator's maximum is over its own ranks only.
  auto half = w.split(me % 2, me);
  T v = static_cast<T>(me);
  half.all_reduce_max(&v, 1);
  int top = me % 2;
  while (top + 2 < n) top += 2;
  CHECK(v == static_cast<T>(top));
  mpi::Communicator empty;
  CHECK_THROWS_WITH_AS(empty.all_reduce_max(&v, 1), doctest::Contains("the communicator is empty"), error);
}

#if SHARDEX_WITH_MPI
TEST_CASE("MPI errors become backend_error with MPI's error string, on every rank") {
  const auto& w = world();
  double v = 0;
  // An invalid root is an error on every rank alike, so no rank is left waiting.
  CHECK_THROWS_WITH_AS(w.broadcast(&v, 1, w.size() + 3), doctest::Contains("MPI_Bcast failed: MPI_ERR_ROOT"),
                       backend_error);
  try {
    w.broadcast(&v, 1, -7);
  } catch (const backend_error& e) {
    CHECK(e.code() != MPI_SUCCESS);
  }
  CHECK_THROWS_WITH_AS(mpi::to_count(std::int64_t(1) << 40, "MPI_Allgather"),
                       doctest::Contains("does not fit MPI's int counts"), invalid_argument);
  w.barrier();  // still usable afterwards
}
#endif

TEST_CASE("an empty (default-constructed) communicator refuses every call") {
  mpi::Communicator empty;
  CHECK_THROWS_WITH_AS(empty.barrier(), doctest::Contains("the communicator is empty"), error);
  double v = 0;
  CHECK_THROWS_WITH_AS(empty.all_reduce(&v, 1), doctest::Contains("the communicator is empty"), error);
  world().barrier();  // the world is still usable afterwards
}

TEST_CASE("grouped broadcasts and point-to-point complete together at end()") {
  const auto& w = world();
  const int n = w.size(), me = w.rank();
  std::vector<double> buf(static_cast<std::size_t>(n), -1.0);
  buf[static_cast<std::size_t>(me)] = 10.0 * me;
  {
    auto g = w.group();
    for (int root = 0; root < n; ++root) g.broadcast(&buf[static_cast<std::size_t>(root)], 1, root);
    g.end();
  }
  for (int r = 0; r < n; ++r) CHECK(buf[static_cast<std::size_t>(r)] == 10.0 * r);
  double got = -1, mine = me;
  auto g = w.group();
  g.recv(&got, 1, (me - 1 + n) % n);
  g.send(&mine, 1, (me + 1) % n);
  g.end();
  CHECK(got == double((me - 1 + n) % n));
}

#if SHARDEX_WITH_MPI
TEST_CASE("a group left by an error cancels its receives at once and refuses grouped traffic afterwards") {
  const auto& w = world();
  const int n = w.size(), me = w.rank();
  auto c = w.split(0, me);                  // a communicator of its own: the world stays usable
  c.set_timeout(std::chrono::seconds(20));  // a wait for the receive would end the test run here
  std::vector<double> never(8, -1.0);
  double mine = me;
  const auto t0 = std::chrono::steady_clock::now();
  // Every rank posts a receive nobody sends, then fails on an invalid peer:
  // the group's destructor must cancel the receive, not wait for it.
  CHECK_THROWS_WITH_AS(
      {
        auto g = c.group();
        g.recv(never.data(), 8, (me + 1) % n);
        g.send(&mine, 1, n + 3);
        g.end();
      },
      doctest::Contains("MPI_Isend failed"), backend_error);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK_MESSAGE(waited < 5.0, "the group's destructor waited " << waited << " s for a receive nobody sends");
  CHECK(never[0] == -1.0);  // cancelled, not filled
  // A message meant for the cancelled receive could still arrive: grouped
  // traffic on c is refused, with the reason; collectives still work.
  CHECK_THROWS_WITH_AS(c.group().recv(never.data(), 1, (me + 1) % n), doctest::Contains("was cancelled after an error"),
                       error);
  double v = 1.0;
  c.all_reduce(&v, 1);
  CHECK(v == double(n));
  // The world's groups were never touched.
  double got = -1;
  auto g = w.group();
  g.recv(&got, 1, (me - 1 + n) % n);
  g.send(&mine, 1, (me + 1) % n);
  g.end();
  CHECK(got == double((me - 1 + n) % n));
}
#endif

#if !SHARDEX_WITH_MPI
TEST_CASE("without MPI, collectives are copies and a root or peer other than 0 is refused") {
  const auto& w = world();
  std::vector<double> a{1, 2, 3, 4}, b(4, -1.0);
  w.all_gather(a.data(), b.data(), 4);
  CHECK(b == a);
  b.assign(4, -1.0);
  w.reduce_scatter(a.data(), b.data(), 4);
  CHECK(b == a);
  b.assign(4, -1.0);
  w.all_to_all(a.data(), b.data(), 4);
  CHECK(b == a);
  w.all_reduce(a.data(), 4);
  w.broadcast(a.data(), 4, 0);
  CHECK(a == std::vector<double>{1, 2, 3, 4});
  // v collectives: one count and one displacement, for rank 0.
  b.assign(4, -1.0);
  const std::int64_t two[] = {2}, one[] = {1}, zero[] = {0};
  w.all_gather_v(a.data(), 2, b.data(), two, one);
  CHECK(b == std::vector<double>{-1, 1, 2, -1});
  b.assign(4, -1.0);
  w.reduce_scatter_v(a.data(), b.data(), two);
  CHECK(b == std::vector<double>{1, 2, -1, -1});
  b.assign(4, -1.0);
  w.all_to_all_v(a.data(), two, one, b.data(), two, zero);
  CHECK(b == std::vector<double>{2, 3, -1, -1});
  CHECK_THROWS_WITH_AS(w.all_gather_v(a.data(), 3, b.data(), two, one), doctest::Contains("all_gather_v"),
                       invalid_argument);
  std::int64_t m[] = {5, -2};
  w.all_reduce_min(m, 2);
  CHECK(m[1] == -2);
  CHECK_THROWS_WITH_AS(w.broadcast(a.data(), 1, 1), doctest::Contains("broadcast: root 1"), invalid_argument);
  CHECK_THROWS_WITH_AS(w.broadcast(a.data(), -1, 0), doctest::Contains("negative"), invalid_argument);
  auto half = w.split(3, 7);
  CHECK(half.rank() == 0);
  CHECK(half.size() == 1);
}

TEST_CASE("without MPI, a group's sends to rank 0 reach its receives from rank 0, in order") {
  const auto& w = world();
  double x = 1, y = 2, got[3] = {-1, -1, -1};
  {
    auto g = w.group();
    g.recv(&got[0], 1, 0);  // issued before its send, as the lowering plans may do
    g.send(&x, 1, 0);
    g.send(&y, 1, 0);
    g.recv(&got[1], 2, 0);  // receiving fewer than offered is fine, as with MPI
    g.end();
  }
  CHECK(got[0] == 1);
  CHECK(got[1] == 2);
  CHECK(got[2] == -1);
  {
    double s[] = {3, 4}, r[] = {0, 0};
    auto g = w.group();
    g.reduce(s, r, 2, 0);
    g.broadcast(s, 2, 0);
    g.end();
    CHECK(r[0] == 3);
    CHECK(r[1] == 4);
  }
  {
    auto g = w.group();
    CHECK_THROWS_WITH_AS(g.send(&x, 1, 1), doctest::Contains("Group::send: peer 1"), invalid_argument);
    CHECK_THROWS_WITH_AS(g.reduce(&x, &y, 1, 2), doctest::Contains("Group::reduce: root 2"), invalid_argument);
    g.send(&x, 1, 0);
    CHECK_THROWS_WITH_AS(g.end(), doctest::Contains("no partner"), invalid_argument);
  }
  {
    double two_values[] = {5, 6}, one_value = 0;
    auto g = w.group();
    g.send(two_values, 2, 0);
    CHECK_THROWS_WITH_AS(g.recv(&one_value, 1, 0), doctest::Contains("truncated"), invalid_argument);
  }
}
#endif

TEST_CASE(
    "the watchdog's deadline: per communicator handle, shared by its copies, positive, SHARDEX_TIMEOUT by default") {
  auto c = world().split(0, world().rank());
  CHECK(c.timeout() == watchdog::default_timeout());
  CHECK(c.timeout().count() > 0);
  CHECK(std::string(c.description()).find("communicator") != std::string::npos);
  const auto copy = c;
  c.set_timeout(std::chrono::milliseconds(1500));
  CHECK(copy.timeout() == std::chrono::milliseconds(1500));
  CHECK(world().timeout() == watchdog::default_timeout());
  CHECK_THROWS_AS(c.set_timeout(std::chrono::milliseconds(0)), invalid_argument);
  CHECK_THROWS_AS(c.set_timeout(std::chrono::milliseconds(-5)), invalid_argument);
  CHECK_THROWS_AS(mpi::Communicator().set_timeout(std::chrono::seconds(1)), error);
  CHECK(std::string(mpi::Communicator().description()) == "an empty communicator");
}

TEST_CASE("calls under a short deadline that return in time are not ended, nested or not") {
  auto c = world().split(0, world().rank());
  c.set_timeout(std::chrono::milliseconds(300));
  {
    // An outer deadline far away, inner calls under 300 ms: the inner scope's
    // end restores the outer deadline instead of disarming.
    const watchdog::Armed outer("an outer call", "the test", std::chrono::seconds(30));
    for (int i = 0; i < 50; ++i) {
      c.barrier();
      std::vector<double> v(4, 1.0);
      c.all_reduce(v.data(), 4);
      CHECK(v[0] == double(c.size()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(600));  // past the inner deadline, still inside the outer one
  }
  c.barrier();
  CHECK(c.timeout() == std::chrono::milliseconds(300));
}

}  // namespace shardex_test_communicator
