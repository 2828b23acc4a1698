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
#include <sstream>
#include <string>
#include <vector>

#include <shardex.hpp>

using namespace shardex;

namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

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

}  // namespace

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  auto comm = mpi::Communicator::world();
  const MPI_Comm raw = comm.native();
  const int n = comm.size(), me = comm.rank();
  std::int64_t min_kib = 4, max_mib = 64;
  double budget_ms = 400;
  std::vector<std::string> ops = {"all_gather", "reduce_scatter", "all_reduce", "all_to_all", "reshard"};
  std::vector<std::string> patterns = {"even", "1:2:3:4", "zero", "1:1:1:13"};
  std::vector<std::string> dims = {"outer", "inner"};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--min-kib")
      min_kib = std::stoll(v);
    else if (a == "--max-mib")
      max_mib = std::stoll(v);
    else if (a == "--budget-ms")
      budget_ms = std::stod(v);
    else if (a == "--ops")
      ops = split_list(v);
    else if (a == "--patterns")
      patterns = split_list(v);
    else if (a == "--dims")
      dims = split_list(v);
    else {
      if (me == 0) std::cerr << "bench_collectives: unknown flag " << a << "\n";
      return 2;
    }
  }
  const std::int64_t width = 64;  // floats per row of the sharded dim
  std::vector<std::string> table;
  for (const auto& op : ops)
    for (const auto& pattern : patterns)
      for (const auto& dim : dims) {
        // all_reduce has no lengths and no sharded dim: one pattern, one dim.
        if (op == "all_reduce" && (pattern != patterns.front() || dim != dims.front())) continue;
        for (std::int64_t bytes = min_kib << 10; bytes <= (max_mib << 20); bytes *= 4) {
          const std::int64_t rows = bytes / (width * 4);
          const bool outer = dim == "outer";
          const Shape shape = outer ? Shape{rows, width} : Shape{width, rows};  // of the Partial input
          const auto lens = lengths_for(pattern, n, rows);
          const auto even = lengths_for("even", n, rows);
          const layout_mapping<Sharded<0>> m0(lens);
          const layout_mapping<Sharded<1>> m1(lens);
          std::vector<Variant> vs;
          std::vector<Strategy> strategies;
          CollectiveOp cop = CollectiveOp::all_gather;
          // Buffers of the raw calls, allocated once.
          std::vector<float> rin, rout, stage;
          std::vector<int> sc, sd, rc, rd;
          std::unique_ptr<RawExchange> ex;  // the hand-written movement of strided pieces
          const auto off = offsets_of(std::span<const std::int64_t>(lens));
          const auto um = static_cast<std::size_t>(me);

          // (rows, 64) sharded along rows and (64, rows) sharded along its last dim.
          auto s0 = Tensor<float, Sharded<0>>::ones(comm, {rows, width}, m0);
          auto s1 = Tensor<float, Sharded<1>>::ones(comm, {width, rows}, m1);
          Tensor<float, Sharded<1>> a2a_in;
          auto p = Tensor<float, Partial>::ones(comm, shape);
          const std::int64_t local = outer ? s0.size() : s1.size();
          const float* local_data = outer ? s0.data() : s1.data();
          // Values that differ by rank and position, so that the check below
          // sees a piece in the wrong place (the timings do not depend on them).
          const auto fill = [me](auto& t) {
            for (std::int64_t k = 0; k < t.size(); ++k) t.data()[k] = static_cast<float>((me * 7919 + k) % 4093);
          };
          fill(s0), fill(s1), fill(p);
          // shardex's result of the strided cases, which the hand-written movement must match.
          std::function<std::vector<float>()> shardex_out;
          const auto values = [](const auto& t) { return std::vector<float>(t.data(), t.data() + t.size()); };

          if (op == "all_gather") {
            cop = CollectiveOp::all_gather;
            strategies = {Strategy::padded, Strategy::per_root, Strategy::v_collective};
            rout.assign(static_cast<std::size_t>(rows * width), 0.f);
            rc = counts_of(lens, width);
            rd = displs_of(rc);
            vs.push_back({outer ? "raw" : "raw_contiguous", [&] {
                            MPI_Allgatherv(local_data, static_cast<int>(local), MPI_FLOAT, rout.data(), rc.data(),
                                           rd.data(), MPI_FLOAT, raw);
                          }});
            if (!outer) {  // column blocks of (64, rows): each rank's piece lands strided
              std::vector<Block> send, recv;
              for (std::size_t i = 0; i < lens.size(); ++i) {
                send.push_back({0, width, lens[um], lens[um]});
                recv.push_back({off[i], width, lens[i], rows});
              }
              ex = std::make_unique<RawExchange>(send, recv, true);
              shardex_out = [&] { return values(transit<Replicated>(s1, {})); };
            }
            for (Strategy s : strategies)
              vs.push_back({strategy_name(s), [&, s] {
                              if (outer)
                                (void)transit<Replicated>(s0, {}, s);
                              else
                                (void)transit<Replicated>(s1, {}, s);
                            }});
          } else if (op == "reduce_scatter") {
            cop = CollectiveOp::reduce_scatter;
            strategies = {Strategy::padded, Strategy::per_root, Strategy::v_collective};
            rc = counts_of(lens, width);
            rout.assign(static_cast<std::size_t>(std::max(rc[static_cast<std::size_t>(me)], 1)), 0.f);
            vs.push_back({outer ? "raw" : "raw_contiguous",
                          [&] { MPI_Reduce_scatter(p.data(), rout.data(), rc.data(), MPI_FLOAT, MPI_SUM, raw); }});
            if (!outer) {  // pack the column blocks of (64, rows) rank after rank, then reduce-scatter
              stage.assign(static_cast<std::size_t>(rows * width), 0.f);
              vs.push_back({"raw_packed", [&] {
                              for (std::size_t i = 0; i < lens.size(); ++i)
                                pack(p.data(), {off[i], width, lens[i], rows}, stage.data() + off[i] * width);
                              MPI_Reduce_scatter(stage.data(), rout.data(), rc.data(), MPI_FLOAT, MPI_SUM, raw);
                            }});
              shardex_out = [&] { return values(transit<Sharded<1>>(p, m1)); };
            }
            for (Strategy s : strategies)
              vs.push_back({strategy_name(s), [&, s] {
                              if (outer)
                                (void)transit<Sharded<0>>(p, m0, s);
                              else
                                (void)transit<Sharded<1>>(p, m1, s);
                            }});
          } else if (op == "all_reduce") {
            rout.assign(static_cast<std::size_t>(rows * width), 0.f);
            vs.push_back({"raw", [&] {
                            MPI_Allreduce(p.data(), rout.data(), static_cast<int>(rows * width), MPI_FLOAT, MPI_SUM,
                                          raw);
                          }});
            vs.push_back({"all_reduce", [&] { (void)transit<Replicated>(p, {}); }});
          } else if (op == "all_to_all") {
            // A (rows, 64) tensor. "outer": S(1)[even] -> S(0)[pattern], the
            // pieces sent are contiguous row blocks, those received strided
            // column blocks; "inner": S(0)[pattern] -> S(1)[even], the reverse.
            cop = CollectiveOp::all_to_all;
            strategies = {Strategy::padded, Strategy::send_recv, Strategy::v_collective};
            const auto cols = lengths_for("even", n, width);
            for (int i = 0; i < n; ++i) {
              const auto ui = static_cast<std::size_t>(i), um = static_cast<std::size_t>(me);
              sc.push_back(static_cast<int>(outer ? lens[ui] * cols[um] : lens[um] * cols[ui]));
              rc.push_back(static_cast<int>(outer ? lens[um] * cols[ui] : lens[ui] * cols[um]));
            }
            sd = displs_of(sc);
            rd = displs_of(rc);
            a2a_in =
                outer ? Tensor<float, Sharded<1>>::ones(comm, {rows, width}, layout_mapping<Sharded<1>>(cols)) : s1;
            rin.assign(static_cast<std::size_t>(std::max(sd.back() + sc.back(), 1)), 1.f);
            rout.assign(static_cast<std::size_t>(std::max(rd.back() + rc.back(), 1)), 0.f);
            vs.push_back({"raw_contiguous", [&] {
                            MPI_Alltoallv(rin.data(), sc.data(), sd.data(), MPI_FLOAT, rout.data(), rc.data(),
                                          rd.data(), MPI_FLOAT, raw);
                          }});
            // The same movement with its strided side: column blocks received
            // ("outer") or sent ("inner").
            const auto coff = offsets_of(std::span<const std::int64_t>(cols));
            std::vector<Block> send, recv;
            for (std::size_t i = 0; i < lens.size(); ++i) {
              const Block rowblock_in{off[i] * cols[um], lens[i], cols[um], cols[um]};
              if (outer) {
                send.push_back(rowblock_in);
                recv.push_back({coff[i], lens[um], cols[i], width});
              } else {
                send.push_back({coff[i], lens[um], cols[i], width});
                recv.push_back(rowblock_in);
              }
            }
            ex = std::make_unique<RawExchange>(send, recv, false);
            if (outer) fill(a2a_in);
            local_data = outer ? a2a_in.data() : s0.data();
            const layout_mapping<Sharded<1>> c1(cols);
            shardex_out = [&, c1] {
              return outer ? values(transit<Sharded<0>>(a2a_in, m0)) : values(transit<Sharded<1>>(s0, c1));
            };
            for (Strategy s : strategies)
              vs.push_back({strategy_name(s), [&, s, c1] {
                              if (outer)
                                (void)transit<Sharded<0>>(a2a_in, m0, s);
                              else
                                (void)transit<Sharded<1>>(s0, c1, s);
                            }});
          } else if (op == "reshard") {
            cop = CollectiveOp::reshard;
            strategies = {Strategy::send_recv, Strategy::v_collective};
            const layout_mapping<Sharded<0>> e0(even);
            const layout_mapping<Sharded<1>> e1(even);
            // raw: the overlap of my old interval with every rank's new one
            const auto a = offsets_of(std::span<const std::int64_t>(lens)),
                       c = offsets_of(std::span<const std::int64_t>(even));
            const std::int64_t per_row = width;  // elements per index of the sharded dim, either way
            sc.assign(static_cast<std::size_t>(n), 0);
            rc.assign(static_cast<std::size_t>(n), 0);
            for (int i = 0; i < n; ++i) {
              const auto ov = [&](int p_old, int q_new) {
                const std::int64_t lo =
                    std::max(a[static_cast<std::size_t>(p_old)], c[static_cast<std::size_t>(q_new)]);
                const std::int64_t hi =
                    std::min(a[static_cast<std::size_t>(p_old) + 1], c[static_cast<std::size_t>(q_new) + 1]);
                return std::max<std::int64_t>(hi - lo, 0);
              };
              sc[static_cast<std::size_t>(i)] = static_cast<int>(ov(me, i) * per_row);
              rc[static_cast<std::size_t>(i)] = static_cast<int>(ov(i, me) * per_row);
            }
            sd = displs_of(sc);
            rd = displs_of(rc);
            rout.assign(static_cast<std::size_t>(std::max<std::int64_t>(even[static_cast<std::size_t>(me)] * width, 1)),
                        0.f);
            vs.push_back({outer ? "raw" : "raw_contiguous", [&] {
                            MPI_Alltoallv(local_data, sc.data(), sd.data(), MPI_FLOAT, rout.data(), rc.data(),
                                          rd.data(), MPI_FLOAT, raw);
                          }});
            if (!outer) {  // the columns that change owner, strided on both sides
              std::vector<Block> send, recv;
              for (int i = 0; i < n; ++i) {
                const auto ui = static_cast<std::size_t>(i);
                const std::int64_t slo = std::max(a[um], c[ui]), shi = std::min(a[um + 1], c[ui + 1]);
                const std::int64_t rlo = std::max(a[ui], c[um]), rhi = std::min(a[ui + 1], c[um + 1]);
                send.push_back({shi > slo ? slo - a[um] : 0, width, std::max<std::int64_t>(shi - slo, 0), lens[um]});
                recv.push_back({rhi > rlo ? rlo - c[um] : 0, width, std::max<std::int64_t>(rhi - rlo, 0), even[um]});
              }
              ex = std::make_unique<RawExchange>(send, recv, false);
              shardex_out = [&, e1] { return values(transit<Sharded<1>>(s1, e1)); };
            }
            for (Strategy s : strategies)
              vs.push_back({strategy_name(s), [&, s, e0, e1] {
                              if (outer)
                                (void)transit<Sharded<0>>(s0, e0, s);
                              else
                                (void)transit<Sharded<1>>(s1, e1, s);
                            }});
          }
          if (vs.empty()) continue;
          if (ex) {
            // The output of the hand-written movement; rout keeps the contiguous call's.
            stage.assign(static_cast<std::size_t>(std::max<std::int64_t>(rows * width, 1)), 0.f);
            vs.insert(vs.begin() + 1, {{"raw_typed", [&] { ex->typed(local_data, stage.data(), raw); }},
                                       {"raw_packed", [&] { ex->packed(local_data, stage.data(), raw); }}});
          }
          if (shardex_out) {
            // The hand-written movement must leave what shardex leaves.
            const auto want = shardex_out();
            int bad = 0;
            for (auto& v : vs)
              if (v.name == "raw_typed" || v.name == "raw_packed") {
                std::fill(stage.begin(), stage.end(), -1.f);
                std::fill(rout.begin(), rout.end(), -1.f);
                v.run();
                const auto& got = ex ? stage : rout;
                bad |= got.size() < want.size() || !std::equal(want.begin(), want.end(), got.begin());
              }
            MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, raw);
            if (bad) {
              if (me == 0)
                std::cerr << "bench_collectives: the hand-written " << op << " (" << pattern << ", " << dim << ", "
                          << bytes << " bytes) does not match shardex's result\n";
              return 1;
            }
          }
          std::string auto_name = "all_reduce";
          if (!strategies.empty()) {
            const std::int64_t row_bytes = width * 4;  // one index along the sharded dim, either way
            auto_name = strategy_name(choose_strategy(
                cop, lens, row_bytes, true, outer && op != "all_to_all" ? Pieces::contiguous : Pieces::strided));
          }
          // automatic's pick once more without the cross-rank agreement
          // (CheckLevel::local): what the lowering costs apart from the check.
          for (const auto& v : vs)
            if (v.name == auto_name) {
              vs.push_back({"unchecked", [run = v.run] {
                              set_check_level(CheckLevel::local);
                              run();
                              set_check_level(CheckLevel::communicating);
                            }});
              break;
            }
          measure(comm, vs, budget_ms);
          // The reference: the raw call for contiguous pieces; for strided ones
          // the faster hand-written movement (the contiguous call, which leaves
          // the pieces where they do not belong, is reported as a lower bound).
          double raw_us = 0;
          bool have_raw = false;
          for (const auto& v : vs)
            if (v.name == "raw" || v.name == "raw_typed" || v.name == "raw_packed")
              raw_us = have_raw ? std::min(raw_us, v.median_us) : v.median_us, have_raw = true;
          if (vs.front().name != "raw") vs.insert(vs.begin(), Variant{"raw", {}, raw_us});
          const auto is_raw = [](const Variant& v) { return v.name.rfind("raw", 0) == 0 || v.name == "unchecked"; };
          std::string best;
          double best_us = 0, auto_us = 0;
          for (const auto& v : vs) {
            if (is_raw(v)) continue;
            if (best.empty() || v.median_us < best_us) best_us = v.median_us, best = v.name;
            if (v.name == auto_name) auto_us = v.median_us;
          }
          if (me == 0) {
            for (const auto& v : vs)
              std::cout << "{\"bench\":\"collectives\",\"op\":\"" << op << "\",\"ranks\":" << n << ",\"pattern\":\""
                        << pattern << "\",\"dim\":\"" << dim << "\",\"bytes\":" << bytes << ",\"variant\":\"" << v.name
                        << "\",\"median_us\":" << v.median_us << ",\"raw_us\":" << raw_us
                        << ",\"vs_raw\":" << v.median_us / raw_us << ",\"auto\":\"" << auto_name << "\",\"best\":\""
                        << best << "\"}" << std::endl;
            char line[256];
            std::snprintf(line, sizeof line,
                          "# %-14s %-8s %-5s %5s  raw %9.1f us  auto %-12s %9.1f us  %5.2fx raw  best %-12s %5.2fx",
                          op.c_str(), pattern.c_str(), dim.c_str(), human(bytes).c_str(), raw_us, auto_name.c_str(),
                          auto_us, auto_us / raw_us, best.c_str(), auto_us / best_us);
            table.push_back(line);
          }
        }
      }
  // The per-call overhead when nothing moves: an all_gather of a tensor with
  // zero rows everywhere, against MPI_Allgatherv of zero counts, with the
  // cross-rank agreement (the default) and without it (CheckLevel::local).
  {
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
        {"checked", [&] { (void)transit<Replicated>(e, {}); }},
        {"local_checks", [&] {
           set_check_level(CheckLevel::local);
           (void)transit<Replicated>(e, {});
           set_check_level(CheckLevel::communicating);
         }}};
    measure(comm, vs, budget_ms);
    if (me == 0) {
      for (const auto& v : vs)
        std::cout << "{\"bench\":\"overhead\",\"op\":\"all_gather\",\"ranks\":" << n << ",\"bytes\":0,\"variant\":\""
                  << v.name << "\",\"median_us\":" << v.median_us << ",\"raw_us\":" << vs[0].median_us << "}"
                  << std::endl;
      char line[256];
      std::snprintf(
          line, sizeof line,
          "# overhead of a call that moves nothing: raw %.2f us (%.2f us watched), shardex %.2f us (%.2f us without the agreement)",
          vs[0].median_us, vs[1].median_us, vs[2].median_us, vs[3].median_us);
      table.push_back(line);
    }
  }
  if (me == 0) {
    std::cout << "# " << n << " ranks: op, lengths, sharded dim, global bytes; the raw MPI call; what automatic picks, "
              << "its time and ratio to the raw call; the fastest strategy and automatic's ratio to it\n";
    for (const auto& l : table) std::cout << l << "\n";
  }
  return 0;
}
