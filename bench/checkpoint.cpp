// SPDX-License-Identifier: MIT
// Checkpoint throughput (issue #14): save and load of a model's tensors in one
// safetensors file, every rank writing (reading) its own piece with MPI-IO,
// side by side in one run with rank 0 alone writing (reading) the same
// tensors whole through the same code on a one-rank communicator (the
// baseline a single writer gets). Throughput = the file's size / the time.
//
//   mpirun -n 4 build/bench/bench_checkpoint [--mib 64] [--repeats 5] [--dir /tmp]
//
// One JSON object per measurement: {"bench":"checkpoint","op":"save",
// "writers":4,"mib":64,"seconds":...,"mib_per_s":...}; then one line of
// ratios (parallel / single rank) on rank 0.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <shardex.hpp>
#include <shardex/io/safetensors.hpp>

#include "../examples/support/command_line.hpp"

using namespace shardex;

namespace {

std::vector<std::int64_t> even(std::int64_t total, int n) {
  std::vector<std::int64_t> ls(static_cast<std::size_t>(n), total / n);
  ls.back() += total % n;
  return ls;
}

template <class F>
double median_seconds(const mpi::Communicator& comm, int repeats, F&& f) {
  std::vector<double> ts;
  for (int r = 0; r < repeats; ++r) {
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    comm.barrier();
    ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  const auto comm = mpi::Communicator::world();
  const int n = comm.size();
  CLI::App app(
      "bench_checkpoint: save and load throughput of one safetensors file, every rank writing its piece, "
      "against rank 0 alone",
      "bench_checkpoint");
  command_line::configure(app);
  std::int64_t mib = 64;
  int repeats = 5;
  std::string dir;  // empty: the system's (TMPDIR), looked up after parsing, so that --help does not depend on it
  app.add_option("--mib", mib, "size of the two weights, in MiB")->transform(command_line::integer(1, 1 << 20));
  app.add_option("--repeats", repeats, "timed runs of each (the median is reported)")
      ->transform(command_line::integer(1, 1000));
  app.add_option("--dir", dir, "directory of the two scratch files; empty: the temporary directory")
      ->check(CLI::ExistingDirectory);
  if (const auto code = command_line::parse(app, argc, argv, comm.rank())) return *code;
  return command_line::run("bench_checkpoint", comm.rank(), [&] {
    if (dir.empty()) dir = std::filesystem::temp_directory_path().string();
    // A Megatron MLP's two weights: A (hidden, ffn) column-parallel, B (ffn, hidden) row-parallel, float32.
    const std::int64_t hidden = 1024, ffn = std::max<std::int64_t>(1, mib * 1024 * 1024 / (2 * hidden * 4));
    const auto A = Tensor<float, Sharded<1>>::normal(comm, {hidden, ffn}, 1, 0.f, 1.f, even(ffn, n));
    const auto B = Tensor<float, Sharded<0>>::normal(comm, {ffn, hidden}, 2, 0.f, 1.f, even(ffn, n));
    const std::string par = dir + "/bench_ckpt_parallel.safetensors", one = dir + "/bench_ckpt_single.safetensors";
    const auto self = comm.split(comm.rank(), 0);
    // The single writer holds the whole tensors (gathered once, outside the timing).
    const auto Aw = eager::all_gather<Invariant>(A), Bw = eager::all_gather<Invariant>(B);
    const auto A1 = Tensor<float, Invariant>::from_local(self, Aw.shape(), Aw.local());
    const auto B1 = Tensor<float, Invariant>::from_local(self, Bw.shape(), Bw.local());
    const double t_save = median_seconds(comm, repeats, [&] { save(par, TensorList().add("A", A).add("B", B)); });
    const double t_save1 = median_seconds(comm, repeats, [&] {
      if (comm.rank() == 0) save(one, TensorList().add("A", A1).add("B", B1));
    });
    const double t_load = median_seconds(comm, repeats, [&] {
      auto a = load<float, Sharded<1>>(comm, par, "A", even(ffn, n));
      auto b = load<float, Sharded<0>>(comm, par, "B", even(ffn, n));
    });
    const double t_load1 = median_seconds(comm, repeats, [&] {
      if (comm.rank() == 0) {
        auto a = load<float, Invariant>(self, one, "A");
        auto b = load<float, Invariant>(self, one, "B");
      }
    });
    const double size_mib = static_cast<double>(std::filesystem::file_size(par)) / (1024.0 * 1024.0);
    if (comm.rank() == 0) {
      const auto line = [&](const char* op, int writers, double s) {
        std::cout << "{\"bench\":\"checkpoint\",\"op\":\"" << op << "\",\"ranks\":" << writers
                  << ",\"mib\":" << size_mib << ",\"seconds\":" << s << ",\"mib_per_s\":" << size_mib / s << "}\n";
      };
      line("save", n, t_save);
      line("save", 1, t_save1);
      line("load", n, t_load);
      line("load", 1, t_load1);
      std::cout << "checkpoint of " << size_mib << " MiB on " << n << " ranks: save " << size_mib / t_save << " MiB/s ("
                << t_save1 / t_save << "x one rank's " << size_mib / t_save1 << "), load " << size_mib / t_load
                << " MiB/s (" << t_load1 / t_load << "x one rank's " << size_mib / t_load1 << ")\n";
    }
    comm.barrier();
    if (comm.rank() == 0) std::filesystem::remove(par), std::filesystem::remove(one);
    return 0;
  });
}
