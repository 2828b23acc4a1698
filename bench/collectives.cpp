// SPDX-License-Identifier: MIT
// Every communicating transition x every strategy, side by side in one run
// with the raw MPI call that makes the same movement (these machines are
// shared and noisy: compare the ratios, not the absolute times).
//
//   mpirun -n 2 build/bench/bench_collectives [--min-kib 4] [--max-mib 64] [--ops all_gather,...]
//          [--patterns even,1:2:3:4,zero,1:1:1:13] [--dims outer,inner] [--budget-ms 400]
//
// A case is (op, lengths pattern, sharded dim, size). `bytes` is the size of
// the global float32 tensor: what all_gather produces and reduce_scatter and
// all_reduce consume on every rank; all_to_all and reshard move each rank's
// part of it. The tensor is (rows, 64) sharded along rows ("outer": every
// piece is contiguous) or (64, rows) sharded along its last dim ("inner":
// pieces are strided). The raw call for each op, on buffers allocated once:
//   all_gather      MPI_Allgatherv of the same counts
//   reduce_scatter  MPI_Reduce_scatter of the same counts
//   all_reduce      MPI_Allreduce (out of place)
//   all_to_all      MPI_Alltoallv of the same piece sizes (S(1) -> S(0))
//   reshard         MPI_Alltoallv of the rows that change owner (pattern -> even)
// Each repetition runs every variant once, in turn, after a barrier; a
// variant's time is the slowest rank's, and the median over repetitions is
// reported. One JSON object per variant and case:
//   {"bench":"collectives","op":"all_gather","ranks":2,"pattern":"1:2:3:4","dim":"outer","bytes":65536,
//    "variant":"v_collective","median_us":12.3,"raw_us":11.8,"vs_raw":1.04,"auto":"v_collective","best":"v_collective"}
// then a table (lines starting with '#'): per case, the raw call, the strategy
// `automatic` picks with its ratio to the raw call, and the fastest strategy.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <shardex.hpp>

#include "../examples/support/command_line.hpp"

using namespace shardex;

namespace {

/// Rows per rank for a pattern: "even", "zero" (rank 0 holds nothing),
/// "1:2:3:4" or "1:1:1:13" (weights repeated over the ranks).
std::vector<std::int64_t> lengths_for(const std::string& pattern, int n, std::int64_t total) {
  std::vector<std::int64_t> w(static_cast<std::size_t>(n), 1);
  if (pattern == "zero") {
    w[0] = 0;
    if (n == 1) w[0] = 1;
  } else if (pattern != "even") {
    std::vector<std::int64_t> ws;
    std::stringstream in(pattern);
    for (std::string item; std::getline(in, item, ':');) ws.push_back(std::stoll(item));
    for (int r = 0; r < n; ++r) w[static_cast<std::size_t>(r)] = ws[static_cast<std::size_t>(r) % ws.size()];
    // On fewer ranks than weights, the last rank takes the rest (1:1:1:13 on 2 ranks is 1:13).
    if (n < static_cast<int>(ws.size())) {
      std::int64_t rest = 0;
      for (std::size_t r = static_cast<std::size_t>(n) - 1; r < ws.size(); ++r) rest += ws[r];
      w[static_cast<std::size_t>(n) - 1] = rest;
    }
  }
  std::int64_t wsum = 0;
  for (auto x : w) wsum += x;
  std::vector<std::int64_t> ls(w.size());
  std::int64_t given = 0;
  for (std::size_t r = 0; r < w.size(); ++r) given += ls[r] = total * w[r] / wsum;
  for (std::size_t r = w.size() - 1; given < total; r = (r + w.size() - 1) % w.size())
    if (w[r] > 0) ++ls[r], ++given;
  return ls;
}

std::vector<int> counts_of(const std::vector<std::int64_t>& lens, std::int64_t per_row) {
  std::vector<int> c;
  for (auto l : lens) c.push_back(static_cast<int>(l * per_row));
  return c;
}
std::vector<int> displs_of(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  for (std::size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

/// A block of a row-major matrix: `rows` x `cols` floats starting at
/// `offset`, rows `ld` floats apart.
struct Block {
  std::int64_t offset = 0, rows = 0, cols = 0, ld = 0;
  std::int64_t size() const { return rows * cols; }
  bool contiguous() const { return rows <= 1 || cols == ld; }
};

/// Copies `b` of `from` to `to` as one contiguous run (pack), or back (unpack).
void pack(const float* from, const Block& b, float* to) {
  for (std::int64_t r = 0; r < b.rows; ++r) std::copy_n(from + b.offset + r * b.ld, b.cols, to + r * b.cols);
}
void unpack(const float* from, const Block& b, float* to) {
  for (std::int64_t r = 0; r < b.rows; ++r) std::copy_n(from + r * b.cols, b.cols, to + b.offset + r * b.ld);
}

/// What a hand-written MPI program does to move strided blocks (an inner
/// sharded dim): `send[i]` of the input goes to rank i's `recv[me]` of its
/// output. Two ways, each with its datatypes and staging built once:
///   typed   one MPI_Alltoallw with a vector datatype per strided block;
///   packed  pack the strided blocks, one contiguous collective (MPI_Allgatherv
///           when every rank sends the same block to all, else MPI_Alltoallv),
///           unpack.
/// The faster of the two is the reference a lowering is measured against.
class RawExchange {
public:
  RawExchange(std::vector<Block> send, std::vector<Block> recv, bool gather)
      : send_(std::move(send)), recv_(std::move(recv)), gather_(gather) {
    const std::size_t n = send_.size();
    for (std::size_t i = 0; i < n; ++i) {
      stypes_.push_back(type_of(send_[i]));
      rtypes_.push_back(type_of(recv_[i]));
      scounts_.push_back(count_of(send_[i]));
      rcounts_.push_back(count_of(recv_[i]));
      sbytes_.push_back(static_cast<int>(send_[i].offset * 4));
      rbytes_.push_back(static_cast<int>(recv_[i].offset * 4));
      sc_.push_back(static_cast<int>(send_[i].size()));
      rc_.push_back(static_cast<int>(recv_[i].size()));
      pack_send_ = pack_send_ || !send_[i].contiguous();
      unpack_recv_ = unpack_recv_ || !recv_[i].contiguous();
    }
    sd_ = displs_of(sc_);
    rd_ = displs_of(rc_);
    if (!pack_send_)
      for (std::size_t i = 0; i < n; ++i) sd_[i] = static_cast<int>(send_[i].offset);
    if (!unpack_recv_)
      for (std::size_t i = 0; i < n; ++i) rd_[i] = static_cast<int>(recv_[i].offset);
    sstage_.assign(static_cast<std::size_t>(std::max(sd_.back() + sc_.back(), 1)), 0.f);
    rstage_.assign(static_cast<std::size_t>(std::max(rd_.back() + rc_.back(), 1)), 0.f);
  }
  RawExchange(const RawExchange&) = delete;
  RawExchange& operator=(const RawExchange&) = delete;
  ~RawExchange() {
    for (auto* ts : {&stypes_, &rtypes_})
      for (auto& t : *ts)
        if (t != MPI_FLOAT) MPI_Type_free(&t);
  }

  void typed(const float* in, float* out, MPI_Comm comm) const {
    MPI_Alltoallw(in, scounts_.data(), sbytes_.data(), stypes_.data(), out, rcounts_.data(), rbytes_.data(),
                  rtypes_.data(), comm);
  }
  void packed(const float* in, float* out, MPI_Comm comm) {
    const float* src = in;
    if (pack_send_) {
      for (std::size_t i = 0; i < send_.size(); ++i) pack(in, send_[i], sstage_.data() + sd_[i]);
      src = sstage_.data();
    }
    float* dst = unpack_recv_ ? rstage_.data() : out;
    if (gather_)
      MPI_Allgatherv(src, sc_[0], MPI_FLOAT, dst, rc_.data(), rd_.data(), MPI_FLOAT, comm);
    else
      MPI_Alltoallv(src, sc_.data(), sd_.data(), MPI_FLOAT, dst, rc_.data(), rd_.data(), MPI_FLOAT, comm);
    if (unpack_recv_)
      for (std::size_t i = 0; i < recv_.size(); ++i) unpack(rstage_.data() + rd_[i], recv_[i], out);
  }

private:
  // A contiguous block goes as plain floats, a strided one as one vector.
  static int count_of(const Block& b) { return b.size() == 0 || b.contiguous() ? static_cast<int>(b.size()) : 1; }
  static MPI_Datatype type_of(const Block& b) {
    if (b.size() == 0 || b.contiguous()) return MPI_FLOAT;
    MPI_Datatype t;
    MPI_Type_vector(static_cast<int>(b.rows), static_cast<int>(b.cols), static_cast<int>(b.ld), MPI_FLOAT, &t);
    MPI_Type_commit(&t);
    return t;
  }
  std::vector<Block> send_, recv_;
  bool gather_;
  bool pack_send_ = false, unpack_recv_ = false;
  std::vector<MPI_Datatype> stypes_, rtypes_;
  std::vector<int> scounts_, rcounts_, sbytes_, rbytes_, sc_, sd_, rc_, rd_;
  std::vector<float> sstage_, rstage_;
};

struct Variant {
  std::string name;  // "raw" or a strategy
  std::function<void()> run;
  double median_us = 0;
};

/// Runs every variant once per repetition, in turn, and sets each one's
/// median (over repetitions) of the slowest rank's time.
void measure(const mpi::Communicator& comm, std::vector<Variant>& vs, double budget_ms) {
  const std::size_t k = vs.size();
  std::vector<double> warm(k);
  for (std::size_t i = 0; i < k; ++i) {  // warm-up: first touch, pools, connections
    vs[i].run();
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    vs[i].run();
    warm[i] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  double total = 0;
  for (auto w : warm) total += w;
  MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_DOUBLE, MPI_MAX, comm.native());
  const int reps = std::clamp(static_cast<int>(budget_ms / std::max(total, 1e-3)), 7, 101);
  std::vector<double> t(k * static_cast<std::size_t>(reps));
  for (int r = 0; r < reps; ++r)
    for (std::size_t i = 0; i < k; ++i) {
      comm.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      vs[i].run();
      t[static_cast<std::size_t>(r) * k + i] =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    }
  MPI_Allreduce(MPI_IN_PLACE, t.data(), static_cast<int>(t.size()), MPI_DOUBLE, MPI_MAX, comm.native());
  for (std::size_t i = 0; i < k; ++i) {
    std::vector<double> mine;
    for (int r = 0; r < reps; ++r) mine.push_back(t[static_cast<std::size_t>(r) * k + i]);
    std::nth_element(mine.begin(), mine.begin() + reps / 2, mine.end());
    vs[i].median_us = mine[static_cast<std::size_t>(reps / 2)];
  }
}

std::string human(std::int64_t bytes) {
  if (bytes >= (1 << 20)) return std::to_string(bytes >> 20) + "M";
  return std::to_string(bytes >> 10) + "K";
}

// ---- the command line and the cases ----

struct Options {
  std::int64_t min_kib = 4, max_mib = 64;
  double budget_ms = 400;
  std::vector<std::string> ops = {"all_gather", "reduce_scatter", "all_reduce", "all_to_all", "reshard"};
  std::vector<std::string> patterns = {"even", "1:2:3:4", "zero", "1:1:1:13"};
  std::vector<std::string> dims = {"outer", "inner"};
};

/// A lengths pattern of lengths_for: "even", "zero", or whole weights >= 0
/// joined by ':' (at least one > 0); an error message, or empty.
std::string check_pattern(const std::string& s) {
  if (s == "even" || s == "zero") return {};
  const auto items = command_line::split(s, ':');
  bool positive = false;
  for (const auto& item : items) {
    const auto w = command_line::read_integer(item);
    if (!w || *w < 0 || *w > 1'000'000)
      return "'" + s + "' is not even, zero or weights W:W:... (whole numbers 0..1000000)";
    positive = positive || *w > 0;
  }
  if (!positive) return "'" + s + "' gives no rank anything: at least one weight must be > 0";
  return {};
}

/// Reads the flags into `o`: the code to exit with now (after --help or a bad
/// flag, printed by rank 0), or nothing to go on.
std::optional<int> parse_options(int argc, char** argv, int rank, Options& o) {
  CLI::App app(
      "bench_collectives: every communicating transition x strategy against the raw MPI call making the same "
      "movement",
      "bench_collectives");
  command_line::configure(app);
  app.add_option("--min-kib", o.min_kib, "smallest global tensor, in KiB (each next size 4x)")
      ->transform(command_line::integer(1, 1 << 20));
  app.add_option("--max-mib", o.max_mib, "largest global tensor, in MiB")->transform(command_line::integer(0, 1024));
  app.add_option("--budget-ms", o.budget_ms, "time for the repetitions of one case (7 to 101 of them), in ms")
      ->check(command_line::real(0, false));
  const auto list = [&](const char* name, std::vector<std::string>& items, const char* help,
                        const CLI::Validator& each) {
    app.add_option(name, items, help)
        ->delimiter(',')
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
        ->check(each);
  };
  list("--ops", o.ops, "the transitions measured", CLI::IsMember(o.ops));
  list("--patterns", o.patterns, "lengths: even, zero (rank 0 holds nothing) or weights W:W:... over the ranks",
       CLI::Validator(check_pattern, "PATTERN", "PATTERN"));
  list("--dims", o.dims, "outer: (rows, 64) sharded along rows; inner: (64, rows) along its last dim",
       CLI::IsMember(o.dims));
  return command_line::parse(app, argc, argv, rank);
}

/// One measurement: an op on a lengths pattern and a sharded dim, at a size
/// (`bytes` of the global float32 tensor).
struct Case {
  std::string op, pattern, dim;
  std::int64_t bytes;
};

/// Every case of the options, in the order measured: op, pattern, dim, size.
std::vector<Case> case_list(const Options& o) {
  std::vector<Case> cases;
  for (const auto& op : o.ops)
    for (const auto& pattern : o.patterns)
      for (const auto& dim : o.dims) {
        // all_reduce has no lengths and no sharded dim: one pattern, one dim.
        if (op == "all_reduce" && (pattern != o.patterns.front() || dim != o.dims.front())) continue;
        for (std::int64_t bytes = o.min_kib << 10; bytes <= (o.max_mib << 20); bytes *= 4)
          cases.push_back({op, pattern, dim, bytes});
      }
  return cases;
}

// ---- one case: its tensors, the raw calls and the strategies ----

constexpr std::int64_t width = 64;  // floats per row of the sharded dim

/// Values that differ by rank and position, so that the check of the raw
/// movement sees a piece in the wrong place (the timings do not depend on them).
template <class X>
void fill(X& t, int me) {
  for (std::int64_t k = 0; k < t.size(); ++k) t.data()[k] = static_cast<float>((me * 7919 + k) % 4093);
}

template <class X>
std::vector<float> values(const X& t) {
  return std::vector<float>(t.data(), t.data() + t.size());
}

/// What one case measures: its tensors, the raw calls' buffers (allocated
/// once) and the variants, whose functions refer to all of these (so a Setup
/// stays where it was made).
struct Setup {
  Setup(const mpi::Communicator& world, const Case& c)
      : comm(world),
        raw(world.native()),
        n(world.size()),
        me(world.rank()),
        um(static_cast<std::size_t>(me)),
        rows(c.bytes / (width * 4)),
        outer(c.dim == "outer"),
        shape(outer ? Shape{rows, width} : Shape{width, rows}),
        lens(lengths_for(c.pattern, n, rows)),
        even(lengths_for("even", n, rows)),
        m0(lens),
        m1(lens),
        off(offsets_of(std::span<const std::int64_t>(lens))),
        s0(Tensor<float, Sharded<0>>::ones(comm, {rows, width}, m0)),
        s1(Tensor<float, Sharded<1>>::ones(comm, {width, rows}, m1)),
        p(Tensor<float, Partial>::ones(comm, shape)),
        local(outer ? s0.size() : s1.size()),
        local_data(outer ? s0.data() : s1.data()) {
    fill(s0, me), fill(s1, me), fill(p, me);
  }
  Setup(const Setup&) = delete;
  Setup& operator=(const Setup&) = delete;

  const mpi::Communicator& comm;
  const MPI_Comm raw;
  const int n, me;
  const std::size_t um;
  const std::int64_t rows;
  const bool outer;
  const Shape shape;  // of the Partial input
  const std::vector<std::int64_t> lens, even;
  const layout_mapping<Sharded<0>> m0;
  const layout_mapping<Sharded<1>> m1;
  const std::vector<std::int64_t> off;
  // (rows, 64) sharded along rows and (64, rows) sharded along its last dim.
  Tensor<float, Sharded<0>> s0;
  Tensor<float, Sharded<1>> s1;
  Tensor<float, Sharded<1>> a2a_in;
  Tensor<float, Partial> p;
  const std::int64_t local;
  const float* local_data;

  std::vector<Variant> vs;
  std::vector<Strategy> strategies;
  CollectiveOp cop = CollectiveOp::all_gather;
  // Buffers of the raw calls, allocated once.
  std::vector<float> rin, rout, stage;
  std::vector<int> sc, sd, rc, rd;
  std::unique_ptr<RawExchange> ex;  // the hand-written movement of strided pieces
  // shardex's result of the strided cases, which the hand-written movement must match.
  std::function<std::vector<float>()> shardex_out;
};

void add_all_gather(Setup& u) {
  u.cop = CollectiveOp::all_gather;
  u.strategies = {Strategy::padded, Strategy::per_root, Strategy::v_collective};
  u.rout.assign(static_cast<std::size_t>(u.rows * width), 0.f);
  u.rc = counts_of(u.lens, width);
  u.rd = displs_of(u.rc);
  u.vs.push_back({u.outer ? "raw" : "raw_contiguous", [&u] {
                    MPI_Allgatherv(u.local_data, static_cast<int>(u.local), MPI_FLOAT, u.rout.data(), u.rc.data(),
                                   u.rd.data(), MPI_FLOAT, u.raw);
                  }});
  if (!u.outer) {  // column blocks of (64, rows): each rank's piece lands strided
    std::vector<Block> send, recv;
    for (std::size_t i = 0; i < u.lens.size(); ++i) {
      send.push_back({0, width, u.lens[u.um], u.lens[u.um]});
      recv.push_back({u.off[i], width, u.lens[i], u.rows});
    }
    u.ex = std::make_unique<RawExchange>(send, recv, true);
    u.shardex_out = [&u] { return values(apply_transition<Replicated>(u.s1, {})); };
  }
  for (Strategy s : u.strategies)
    u.vs.push_back({strategy_name(s), [&u, s] {
                      if (u.outer)
                        (void)apply_transition<Replicated>(u.s0, {}, s);
                      else
                        (void)apply_transition<Replicated>(u.s1, {}, s);
                    }});
}

void add_reduce_scatter(Setup& u) {
  u.cop = CollectiveOp::reduce_scatter;
  u.strategies = {Strategy::padded, Strategy::per_root, Strategy::v_collective};
  u.rc = counts_of(u.lens, width);
  u.rout.assign(static_cast<std::size_t>(std::max(u.rc[u.um], 1)), 0.f);
  u.vs.push_back({u.outer ? "raw" : "raw_contiguous",
                  [&u] { MPI_Reduce_scatter(u.p.data(), u.rout.data(), u.rc.data(), MPI_FLOAT, MPI_SUM, u.raw); }});
  if (!u.outer) {  // pack the column blocks of (64, rows) rank after rank, then reduce-scatter
    u.stage.assign(static_cast<std::size_t>(u.rows * width), 0.f);
    u.vs.push_back({"raw_packed", [&u] {
                      for (std::size_t i = 0; i < u.lens.size(); ++i)
                        pack(u.p.data(), {u.off[i], width, u.lens[i], u.rows}, u.stage.data() + u.off[i] * width);
                      MPI_Reduce_scatter(u.stage.data(), u.rout.data(), u.rc.data(), MPI_FLOAT, MPI_SUM, u.raw);
                    }});
    u.shardex_out = [&u] { return values(apply_transition<Sharded<1>>(u.p, u.m1)); };
  }
  for (Strategy s : u.strategies)
    u.vs.push_back({strategy_name(s), [&u, s] {
                      if (u.outer)
                        (void)apply_transition<Sharded<0>>(u.p, u.m0, s);
                      else
                        (void)apply_transition<Sharded<1>>(u.p, u.m1, s);
                    }});
}

void add_all_reduce(Setup& u) {
  u.rout.assign(static_cast<std::size_t>(u.rows * width), 0.f);
  u.vs.push_back({"raw", [&u] {
                    MPI_Allreduce(u.p.data(), u.rout.data(), static_cast<int>(u.rows * width), MPI_FLOAT, MPI_SUM,
                                  u.raw);
                  }});
  u.vs.push_back({"all_reduce", [&u] { (void)apply_transition<Replicated>(u.p, {}); }});
}

void add_all_to_all(Setup& u) {
  // A (rows, 64) tensor. "outer": S(1)[even] -> S(0)[pattern], the pieces
  // sent are contiguous row blocks, those received strided column blocks;
  // "inner": S(0)[pattern] -> S(1)[even], the reverse.
  u.cop = CollectiveOp::all_to_all;
  u.strategies = {Strategy::padded, Strategy::send_recv, Strategy::v_collective};
  const auto cols = lengths_for("even", u.n, width);
  const auto& lens = u.lens;
  const std::size_t um = u.um;
  for (int i = 0; i < u.n; ++i) {
    const auto ui = static_cast<std::size_t>(i);
    u.sc.push_back(static_cast<int>(u.outer ? lens[ui] * cols[um] : lens[um] * cols[ui]));
    u.rc.push_back(static_cast<int>(u.outer ? lens[um] * cols[ui] : lens[ui] * cols[um]));
  }
  u.sd = displs_of(u.sc);
  u.rd = displs_of(u.rc);
  u.a2a_in =
      u.outer ? Tensor<float, Sharded<1>>::ones(u.comm, {u.rows, width}, layout_mapping<Sharded<1>>(cols)) : u.s1;
  u.rin.assign(static_cast<std::size_t>(std::max(u.sd.back() + u.sc.back(), 1)), 1.f);
  u.rout.assign(static_cast<std::size_t>(std::max(u.rd.back() + u.rc.back(), 1)), 0.f);
  u.vs.push_back({"raw_contiguous", [&u] {
                    MPI_Alltoallv(u.rin.data(), u.sc.data(), u.sd.data(), MPI_FLOAT, u.rout.data(), u.rc.data(),
                                  u.rd.data(), MPI_FLOAT, u.raw);
                  }});
  // The same movement with its strided side: column blocks received
  // ("outer") or sent ("inner").
  const auto coff = offsets_of(std::span<const std::int64_t>(cols));
  std::vector<Block> send, recv;
  for (std::size_t i = 0; i < lens.size(); ++i) {
    const Block rowblock_in{u.off[i] * cols[um], lens[i], cols[um], cols[um]};
    if (u.outer) {
      send.push_back(rowblock_in);
      recv.push_back({coff[i], lens[um], cols[i], width});
    } else {
      send.push_back({coff[i], lens[um], cols[i], width});
      recv.push_back(rowblock_in);
    }
  }
  u.ex = std::make_unique<RawExchange>(send, recv, false);
  if (u.outer) fill(u.a2a_in, u.me);
  u.local_data = u.outer ? u.a2a_in.data() : u.s0.data();
  const layout_mapping<Sharded<1>> c1(cols);
  u.shardex_out = [&u, c1] {
    return u.outer ? values(apply_transition<Sharded<0>>(u.a2a_in, u.m0))
                   : values(apply_transition<Sharded<1>>(u.s0, c1));
  };
  for (Strategy s : u.strategies)
    u.vs.push_back({strategy_name(s), [&u, s, c1] {
                      if (u.outer)
                        (void)apply_transition<Sharded<0>>(u.a2a_in, u.m0, s);
                      else
                        (void)apply_transition<Sharded<1>>(u.s0, c1, s);
                    }});
}

void add_reshard(Setup& u) {
  u.cop = CollectiveOp::reshard;
  u.strategies = {Strategy::send_recv, Strategy::v_collective};
  const layout_mapping<Sharded<0>> e0(u.even);
  const layout_mapping<Sharded<1>> e1(u.even);
  const int n = u.n, me = u.me;
  const std::size_t um = u.um;
  // raw: the overlap of my old interval with every rank's new one
  const auto a = offsets_of(std::span<const std::int64_t>(u.lens)),
             c = offsets_of(std::span<const std::int64_t>(u.even));
  const std::int64_t per_row = width;  // elements per index of the sharded dim, either way
  u.sc.assign(static_cast<std::size_t>(n), 0);
  u.rc.assign(static_cast<std::size_t>(n), 0);
  for (int i = 0; i < n; ++i) {
    const auto ov = [&](int p_old, int q_new) {
      const std::int64_t lo = std::max(a[static_cast<std::size_t>(p_old)], c[static_cast<std::size_t>(q_new)]);
      const std::int64_t hi = std::min(a[static_cast<std::size_t>(p_old) + 1], c[static_cast<std::size_t>(q_new) + 1]);
      return std::max<std::int64_t>(hi - lo, 0);
    };
    u.sc[static_cast<std::size_t>(i)] = static_cast<int>(ov(me, i) * per_row);
    u.rc[static_cast<std::size_t>(i)] = static_cast<int>(ov(i, me) * per_row);
  }
  u.sd = displs_of(u.sc);
  u.rd = displs_of(u.rc);
  u.rout.assign(static_cast<std::size_t>(std::max<std::int64_t>(u.even[um] * width, 1)), 0.f);
  u.vs.push_back({u.outer ? "raw" : "raw_contiguous", [&u] {
                    MPI_Alltoallv(u.local_data, u.sc.data(), u.sd.data(), MPI_FLOAT, u.rout.data(), u.rc.data(),
                                  u.rd.data(), MPI_FLOAT, u.raw);
                  }});
  if (!u.outer) {  // the columns that change owner, strided on both sides
    std::vector<Block> send, recv;
    for (int i = 0; i < n; ++i) {
      const auto ui = static_cast<std::size_t>(i);
      const std::int64_t slo = std::max(a[um], c[ui]), shi = std::min(a[um + 1], c[ui + 1]);
      const std::int64_t rlo = std::max(a[ui], c[um]), rhi = std::min(a[ui + 1], c[um + 1]);
      send.push_back({shi > slo ? slo - a[um] : 0, width, std::max<std::int64_t>(shi - slo, 0), u.lens[um]});
      recv.push_back({rhi > rlo ? rlo - c[um] : 0, width, std::max<std::int64_t>(rhi - rlo, 0), u.even[um]});
    }
    u.ex = std::make_unique<RawExchange>(send, recv, false);
    u.shardex_out = [&u, e1] { return values(apply_transition<Sharded<1>>(u.s1, e1)); };
  }
  for (Strategy s : u.strategies)
    u.vs.push_back({strategy_name(s), [&u, s, e0, e1] {
                      if (u.outer)
                        (void)apply_transition<Sharded<0>>(u.s0, e0, s);
                      else
                        (void)apply_transition<Sharded<1>>(u.s1, e1, s);
                    }});
}

/// The variants of the hand-written movement of strided pieces (RawExchange),
/// right after the contiguous raw call; their output goes to `stage`, and
/// rout keeps the contiguous call's.
void add_raw_exchange(Setup& u) {
  if (!u.ex) return;
  u.stage.assign(static_cast<std::size_t>(std::max<std::int64_t>(u.rows * width, 1)), 0.f);
  u.vs.insert(u.vs.begin() + 1, {{"raw_typed", [&u] { u.ex->typed(u.local_data, u.stage.data(), u.raw); }},
                                 {"raw_packed", [&u] { u.ex->packed(u.local_data, u.stage.data(), u.raw); }}});
}

/// Whether the hand-written movement leaves what shardex leaves, on every rank
/// (collective); true where there is nothing to compare.
bool raw_matches_shardex(Setup& u) {
  if (!u.shardex_out) return true;
  const auto want = u.shardex_out();
  int bad = 0;
  for (auto& v : u.vs)
    if (v.name == "raw_typed" || v.name == "raw_packed") {
      std::fill(u.stage.begin(), u.stage.end(), -1.f);
      std::fill(u.rout.begin(), u.rout.end(), -1.f);
      v.run();
      const auto& got = u.ex ? u.stage : u.rout;
      bad |= got.size() < want.size() || !std::equal(want.begin(), want.end(), got.begin());
    }
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, u.raw);
  return bad == 0;
}

/// The name of the variant `automatic` picks for the case.
std::string automatic_pick(const Setup& u, const Case& c) {
  if (u.strategies.empty()) return "all_reduce";
  const std::int64_t row_bytes = width * 4;  // one index along the sharded dim, either way
  return strategy_name(choose_strategy(u.cop, u.lens, row_bytes, true,
                                       u.outer && c.op != "all_to_all" ? Pieces::contiguous : Pieces::strided));
}

/// automatic's pick once more without the cross-rank agreement
/// (CheckLevel::local): what the lowering costs apart from the check.
void add_unchecked(std::vector<Variant>& vs, const std::string& auto_name) {
  for (const auto& v : vs)
    if (v.name == auto_name) {
      vs.push_back({"unchecked", [run = v.run] {
                      set_check_level(CheckLevel::local);
                      run();
                      set_check_level(CheckLevel::communicating);
                    }});
      break;
    }
}

/// A case's measured variants against each other.
struct Summary {
  double raw_us = 0;  // the reference
  std::string best;   // the fastest strategy
  double best_us = 0, auto_us = 0;
};

/// The reference: the raw call for contiguous pieces; for strided ones the
/// faster hand-written movement (the contiguous call, which leaves the pieces
/// where they do not belong, is reported as a lower bound). Puts a "raw"
/// variant with its time first where there is none.
Summary summarize(std::vector<Variant>& vs, const std::string& auto_name) {
  Summary s;
  bool have_raw = false;
  for (const auto& v : vs)
    if (v.name == "raw" || v.name == "raw_typed" || v.name == "raw_packed")
      s.raw_us = have_raw ? std::min(s.raw_us, v.median_us) : v.median_us, have_raw = true;
  if (vs.front().name != "raw") vs.insert(vs.begin(), Variant{"raw", {}, s.raw_us});
  const auto is_raw = [](const Variant& v) { return v.name.rfind("raw", 0) == 0 || v.name == "unchecked"; };
  for (const auto& v : vs) {
    if (is_raw(v)) continue;
    if (s.best.empty() || v.median_us < s.best_us) s.best_us = v.median_us, s.best = v.name;
    if (v.name == auto_name) s.auto_us = v.median_us;
  }
  return s;
}

/// One JSON object per variant of the case (rank 0).
void print_case(const Case& c, int n, const std::vector<Variant>& vs, const Summary& s, const std::string& auto_name) {
  for (const auto& v : vs)
    std::cout << "{\"bench\":\"collectives\",\"op\":\"" << c.op << "\",\"ranks\":" << n << ",\"pattern\":\""
              << c.pattern << "\",\"dim\":\"" << c.dim << "\",\"bytes\":" << c.bytes << ",\"variant\":\"" << v.name
              << "\",\"median_us\":" << v.median_us << ",\"raw_us\":" << s.raw_us
              << ",\"vs_raw\":" << v.median_us / s.raw_us << ",\"auto\":\"" << auto_name << "\",\"best\":\"" << s.best
              << "\"}" << std::endl;
}

/// The case's line of the closing table.
std::string table_line(const Case& c, const Summary& s, const std::string& auto_name) {
  char line[256];
  std::snprintf(line, sizeof line,
                "# %-14s %-8s %-5s %5s  raw %9.1f us  auto %-12s %9.1f us  %5.2fx raw  best %-12s %5.2fx", c.op.c_str(),
                c.pattern.c_str(), c.dim.c_str(), human(c.bytes).c_str(), s.raw_us, auto_name.c_str(), s.auto_us,
                s.auto_us / s.raw_us, s.best.c_str(), s.auto_us / s.best_us);
  return line;
}

/// Measures one case and prints it (rank 0, which also adds its table line);
/// false if the hand-written movement does not leave what shardex leaves.
bool run_case(const mpi::Communicator& comm, const Case& c, double budget_ms, std::vector<std::string>& table) {
  Setup u(comm, c);
  if (c.op == "all_gather")
    add_all_gather(u);
  else if (c.op == "reduce_scatter")
    add_reduce_scatter(u);
  else if (c.op == "all_reduce")
    add_all_reduce(u);
  else if (c.op == "all_to_all")
    add_all_to_all(u);
  else if (c.op == "reshard")
    add_reshard(u);
  add_raw_exchange(u);
  if (!raw_matches_shardex(u)) {
    if (u.me == 0)
      std::cerr << "bench_collectives: the hand-written " << c.op << " (" << c.pattern << ", " << c.dim << ", "
                << c.bytes << " bytes) does not match shardex's result\n";
    return false;
  }
  const std::string auto_name = automatic_pick(u, c);
  add_unchecked(u.vs, auto_name);
  measure(comm, u.vs, budget_ms);
  const Summary s = summarize(u.vs, auto_name);
  if (u.me == 0) {
    print_case(c, u.n, u.vs, s, auto_name);
    table.push_back(table_line(c, s, auto_name));
  }
  return true;
}

/// The per-call overhead when nothing moves: an all_gather of a tensor with
/// zero rows everywhere, against MPI_Allgatherv of zero counts, with the
/// cross-rank agreement (the default) and without it (CheckLevel::local).
void measure_overhead(const mpi::Communicator& comm, double budget_ms, std::vector<std::string>& table) {
  const int n = comm.size();
  const MPI_Comm raw = comm.native();
  const std::vector<std::int64_t> zeros(static_cast<std::size_t>(n), 0);
  auto e = Tensor<float, Sharded<0>>::zeros(comm, {0, width}, layout_mapping<Sharded<0>>(zeros));
  std::vector<int> zc(static_cast<std::size_t>(n), 0);
  float dummy = 0;
  std::vector<Variant> vs = {
      {"raw", [&] { MPI_Allgatherv(&dummy, 0, MPI_FLOAT, &dummy, zc.data(), zc.data(), MPI_FLOAT, raw); }},
      // The same raw call armed with the watchdog, as every shardex call is: its cost alone.
      {"raw_watched",
       [&] {
         const watchdog::Armed armed("MPI_Allgatherv", comm.description(), comm.timeout());
         MPI_Allgatherv(&dummy, 0, MPI_FLOAT, &dummy, zc.data(), zc.data(), MPI_FLOAT, raw);
       }},
      {"checked", [&] { (void)apply_transition<Replicated>(e, {}); }},
      {"local_checks", [&] {
         set_check_level(CheckLevel::local);
         (void)apply_transition<Replicated>(e, {});
         set_check_level(CheckLevel::communicating);
       }}};
  measure(comm, vs, budget_ms);
  if (comm.rank() != 0) return;
  for (const auto& v : vs)
    std::cout << "{\"bench\":\"overhead\",\"op\":\"all_gather\",\"ranks\":" << n << ",\"bytes\":0,\"variant\":\""
              << v.name << "\",\"median_us\":" << v.median_us << ",\"raw_us\":" << vs[0].median_us << "}" << std::endl;
  char line[256];
  std::snprintf(
      line, sizeof line,
      "# overhead of a call that moves nothing: raw %.2f us (%.2f us watched), shardex %.2f us (%.2f us without the agreement)",
      vs[0].median_us, vs[1].median_us, vs[2].median_us, vs[3].median_us);
  table.push_back(line);
}

void print_table(int n, const std::vector<std::string>& table) {
  std::cout << "# " << n << " ranks: op, lengths, sharded dim, global bytes; the raw MPI call; what automatic picks, "
            << "its time and ratio to the raw call; the fastest strategy and automatic's ratio to it\n";
  for (const auto& l : table) std::cout << l << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  const auto comm = mpi::Communicator::world();
  Options o;
  if (const auto code = parse_options(argc, argv, comm.rank(), o)) return *code;
  return command_line::run("bench_collectives", comm.rank(), [&] {
    std::vector<std::string> table;
    for (const Case& c : case_list(o))
      if (!run_case(comm, c, o.budget_ms, table)) return command_line::as_int(command_line::exit_code::error);
    measure_overhead(comm, o.budget_ms, table);
    if (comm.rank() == 0) print_table(comm.size(), table);
    return 0;
  });
}
