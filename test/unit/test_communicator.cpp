// The MPI communicator: rank and size, sub-communicators, the primitives, and
// MPI errors turned into backend_error with MPI's own error string.
#include <doctest/doctest.h>

#include <shardex.hpp>

#include "support/dist.hpp"

using namespace shardex;
using shardex::test::world;

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

TEST_CASE("MPI errors become backend_error with MPI's error string, on every rank") {
  const auto& w = world();
  double v = 0;
  // An invalid root is an error on every rank alike, so no rank is left waiting.
  CHECK_THROWS_WITH_AS(w.broadcast(&v, 1, w.size() + 3), doctest::Contains("MPI_Bcast failed: MPI_ERR_ROOT"), backend_error);
  try {
    w.broadcast(&v, 1, -7);
  } catch (const backend_error& e) {
    CHECK(e.code() != MPI_SUCCESS);
  }
  CHECK_THROWS_WITH_AS(mpi::to_count(std::int64_t(1) << 40, "MPI_Allgather"), doctest::Contains("does not fit MPI's int counts"),
                       invalid_argument);
  mpi::Communicator empty;
  CHECK_THROWS_WITH_AS(empty.barrier(), doctest::Contains("the communicator is empty"), error);
  w.barrier();  // still usable afterwards
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
