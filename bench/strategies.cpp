// Benchmark of the lowering strategies of the uneven collectives, measured
// side by side in one run (the machines are shared and noisy: compare the
// ratios, not the absolute times).
//
//   mpirun -n 4 build/bench/strategies [--max-mib 16] [--reps 20]
//
// Prints one JSON object per measurement:
//   {"op":"all_gather","pattern":"1:2:3:4","bytes":..,"strategy":"padded",
//    "median_us":..,"vs_best":1.35,"auto":"v_collective"}
// "vs_best" is the median time over the fastest strategy's for the same op,
// pattern and size; "auto" is what Strategy::automatic picks there, so the
// rows show whether the cost model picks well (its pick should have vs_best
// close to 1).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <shardex.hpp>

using namespace shardex;

namespace {

struct Pattern {
  std::string name;
  std::vector<std::int64_t> weights;  // relative lengths per rank
};

std::vector<std::int64_t> lengths_for(const Pattern& p, int n, std::int64_t total) {
  std::vector<std::int64_t> w(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) w[static_cast<std::size_t>(r)] = p.weights[static_cast<std::size_t>(r) % p.weights.size()];
  std::int64_t wsum = 0;
  for (auto x : w) wsum += x;
  std::vector<std::int64_t> ls(w.size());
  std::int64_t given = 0;
  for (std::size_t r = 0; r < w.size(); ++r) given += ls[r] = total * w[r] / wsum;
  for (std::size_t r = 0; given < total; r = (r + 1) % w.size())
    if (w[r] > 0) ++ls[r], ++given;
  return ls;
}

template <class F>
double median_us(const mpi::Communicator& comm, int reps, F&& f) {
  f();  // warm-up (allocations, first-touch)
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    comm.all_reduce(&us, 1);  // the slowest rank counts: report the mean over ranks of each rep
    t.push_back(us / comm.size());
  }
  std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
  return t[static_cast<std::size_t>(reps / 2)];
}

}  // namespace

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  auto comm = mpi::Communicator::world();
  int max_mib = 16, reps = 15;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--max-mib") max_mib = std::atoi(argv[i + 1]);
    else if (a == "--reps") reps = std::atoi(argv[i + 1]);
  }
  const int n = comm.size();
  const std::vector<Pattern> patterns = {{"even", {1}}, {"1:2:3:4", {1, 2, 3, 4}}, {"0:0:0:1", {0, 0, 0, 1}}};
  const std::int64_t cols = 256;  // one row = 256 doubles = 2 KiB
  for (const auto& pat : patterns) {
    for (std::int64_t bytes = 4096; bytes <= std::int64_t(max_mib) << 20; bytes *= 8) {
      const std::int64_t rows = std::max<std::int64_t>(bytes / (cols * 8), n);  // global rows
      const auto lens = lengths_for(pat, n, rows);
      const Shape shape{rows, cols};
      const layout_mapping<Sharded<0>> m(lens);
      auto xs = Tensor<double, Sharded<0>>::ones(comm, shape, m);
      auto xp = Tensor<double, Partial>::ones(comm, shape);
      const layout_mapping<Sharded<1>> mc(lengths_for({"even", {1}}, n, cols));
      auto xc = Tensor<double, Sharded<1>>::ones(comm, shape, mc);

      struct Row { std::string op; Strategy s; double us; };
      std::vector<Row> rows_out;
      for (Strategy s : {Strategy::padded, Strategy::per_root, Strategy::v_collective})
        rows_out.push_back({"all_gather", s, median_us(comm, reps, [&] { (void)transit<Replicated>(xs, {}, s); })});
      for (Strategy s : {Strategy::padded, Strategy::per_root, Strategy::v_collective})
        rows_out.push_back({"reduce_scatter", s, median_us(comm, reps, [&] { (void)transit<Sharded<0>>(xp, m, s); })});
      for (Strategy s : {Strategy::padded, Strategy::send_recv, Strategy::v_collective})
        rows_out.push_back({"all_to_all", s, median_us(comm, reps, [&] { (void)transit<Sharded<0>>(xc, m, s); })});

      std::map<std::string, double> best;
      for (const auto& r : rows_out) best[r.op] = best.count(r.op) ? std::min(best[r.op], r.us) : r.us;
      if (comm.rank() == 0) {
        for (const auto& r : rows_out) {
          const CollectiveOp op = r.op == "all_gather" ? CollectiveOp::all_gather
                                  : r.op == "reduce_scatter" ? CollectiveOp::reduce_scatter
                                                             : CollectiveOp::all_to_all;
          const Strategy pick = choose_strategy(op, lens, cols * 8, true);
          const Strategy pick_no_v = choose_strategy(op, lens, cols * 8, false);
          std::cout << "{\"op\":\"" << r.op << "\",\"ranks\":" << n << ",\"pattern\":\"" << pat.name
                    << "\",\"bytes\":" << rows * cols * 8 << ",\"strategy\":\"" << strategy_name(r.s)
                    << "\",\"median_us\":" << r.us << ",\"vs_best\":" << r.us / best[r.op] << ",\"auto\":\""
                    << strategy_name(pick) << "\",\"auto_without_v\":\"" << strategy_name(pick_no_v) << "\"}\n";
        }
      }
    }
  }
  return 0;
}
