// SPDX-License-Identifier: MIT
// One training step of Megatron's tensor-parallel MLP, exactly the work of
// bench/mlp_step_torch.py: forward and backward, no optimizer step, float32.
//
//   mpirun -n 2 build/bench/bench_mlp_step [--tokens 1024 --hidden 1024 --ffn 4096 --steps 10 --warmup 2]
//
// Y = GeLU(X A + a) B + b with A column-parallel (Sharded<1>), B row-parallel
// (Sharded<0>), the ffn split evenly; X (T x H) requires grad, so the step is
// six GEMMs (12 T H F flops over all ranks) and two all-reduces (g forward,
// f's adjoint backward); loss = sum(Y * G) for a fixed random G.
//
// Prints one JSON object: the median over steps of the slowest rank's step
// time, the part of it spent in backend calls (communication, from
// shardex::counters) and the rest (compute), and the GEMM floor: the step's
// flops per rank over the GEMM rate measured here, in the same run, on every
// rank at once with the step's own shapes: Eigen's, the BLAS's, shardex's and
// the kernel the start-up choice runs (device/host/gemm_kernels.hpp), the floor the fastest. And the timeline trace's cost
// (core/trace.hpp): the measured steps alternate between tracing off and on,
// so both medians come from the same run; off, the cost is the spans a step
// makes times what a span costs with tracing off (timed here too).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <shardex.hpp>

#include "../examples/support/command_line.hpp"
#include "timing.hpp"

using namespace shardex;
using bench::median;

namespace {

double max_over_ranks(const mpi::Communicator& comm, double v) { return bench::max_over_ranks(comm.native(), v); }

}  // namespace

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  auto comm = mpi::Communicator::world();
  const int n = comm.size();
  std::int64_t T = 1024, H = 1024, F = 4096, steps = 10, warmup = 2;
  CLI::App app("bench_mlp_step: one training step of Megatron's tensor-parallel MLP (bench/mlp_step_torch.py's work)",
               "bench_mlp_step");
  command_line::configure(app);
  using command_line::integer;
  app.add_option("--tokens", T, "rows of X (T)")->transform(integer(1, 1 << 20));
  app.add_option("--hidden", H, "width of the model (H)")->transform(integer(1, 1 << 20));
  app.add_option("--ffn", F, "width of the hidden layer (F, split evenly over the ranks)")
      ->transform(integer(1, 1 << 24));
  app.add_option("--steps", steps, "measured steps with tracing off (as many again with it on)")
      ->transform(integer(1, 1 << 20));
  app.add_option("--warmup", warmup, "steps run first, not measured")->transform(integer(0, 1 << 20));
  if (const auto code = command_line::parse(app, argc, argv, comm.rank())) return *code;
  return command_line::run("bench_mlp_step", comm.rank(), [&] {
    std::vector<std::int64_t> lens(static_cast<std::size_t>(n), F / n);
    for (std::int64_t r = 0; r < F % n; ++r) ++lens[static_cast<std::size_t>(r)];
    const layout_mapping<Sharded<1>> col(lens);
    const layout_mapping<Sharded<0>> row(lens);
    using T32 = float;
    auto X = Tensor<T32, Invariant>::normal(comm, {T, H}, 1).requires_grad();
    auto A = Tensor<T32, Sharded<1>>::normal(comm, {H, F}, 2, 0.f, 0.03f, col).requires_grad();
    auto a = Tensor<T32, Sharded<0>>::normal(comm, {F}, 3, 0.f, 0.1f, row).requires_grad();
    auto B = Tensor<T32, Sharded<0>>::normal(comm, {F, H}, 4, 0.f, 0.015f, row).requires_grad();
    auto b = Tensor<T32, Invariant>::normal(comm, {H}, 5, 0.f, 0.1f).requires_grad();
    auto G = Tensor<T32, Invariant>::normal(comm, {T, H}, 6);

    // The GEMM rate of this machine, all ranks at once, on the step's first
    // product: with each kernel (device/host/gemm_kernels.hpp), and with the one
    // the start-up choice runs for it. The floor takes the fastest kernel.
    const std::int64_t f_me = lens[static_cast<std::size_t>(comm.rank())];
    const GemmShape first = GemmShape::plain(T, H, f_me);
    auto gemm_rate = [&](auto&& run) {
      auto out = Host::allocate<T32>(T * f_me);
      std::vector<double> ts;
      for (int i = 0; i < 4; ++i) {
        comm.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        run(out.get());
        ts.push_back(
            max_over_ranks(comm, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
      }
      return 2.0 * double(T) * double(H) * double(f_me) / *std::min_element(ts.begin() + 1, ts.end()) / 1e9;
    };
    auto with = [&](host::GemmKernel k) {
      return gemm_rate([&](T32* out) { host::gemm_with(k, first, 1.f, X.data(), A.data(), 0.f, out); });
    };
    const double eigen_gflops = with(host::GemmKernel::eigen);
    const double blas_gflops = host::have_blas() ? with(host::GemmKernel::blas) : 0.0;
    const double own_gflops = host::kernel_available(host::GemmKernel::own, 4) ? with(host::GemmKernel::own) : 0.0;
    const double chosen_gflops = gemm_rate([&](T32* out) { Host::gemm(first, 1.f, X.data(), A.data(), 0.f, out); });
    const double gflops_per_s = std::max({eigen_gflops, blas_gflops, own_gflops});  // per rank
    const double flops_per_rank = 12.0 * double(T) * double(H) * double(f_me);
    const double floor_ms = flops_per_rank / (gflops_per_s * 1e9) * 1e3;

    // Tracing on for every other measured step (recorded to a scratch file, not kept).
    trace::start("/tmp/shardex_bench_mlp_step_trace.json");
    trace::detail::enabled_flag().store(false);
    std::int64_t spans_on_steps = 0;
    std::vector<double> step_ms, comm_ms, traced_ms;
    for (std::int64_t s = 0; s < warmup + 2 * steps; ++s) {
      const bool traced = s >= warmup && (s - warmup) % 2 == 1;
      trace::detail::enabled_flag().store(traced);
      for (auto* p : {&X}) p->zero_grad();
      A.zero_grad(), a.zero_grad(), B.zero_grad(), b.zero_grad();
      comm.barrier();
#if __has_include("shardex/core/counters.hpp")
      const auto c0 = counters();
#endif
      const auto t0 = std::chrono::steady_clock::now();
      auto y = add_bias(all_reduce<Invariant>(matmul(gelu(add_bias(matmul(replicate(X), A), a)), B)), b);
      Tensor<T32, Invariant> loss = sum(y * G);
      backward(loss);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      double cms = -1;
#if __has_include("shardex/core/counters.hpp")
      cms = (counters() - c0).backend_seconds * 1e3;
#endif
      trace::detail::enabled_flag().store(false);
      if (traced) {
        traced_ms.push_back(max_over_ranks(comm, ms));
        ++spans_on_steps;
      } else if (s >= warmup) {
        step_ms.push_back(max_over_ranks(comm, ms));
        comm_ms.push_back(max_over_ranks(comm, cms));
      }
    }
    trace::detail::enabled_flag().store(true);
    const std::int64_t events = trace::stop();  // every rank's events of the traced steps
    std::remove("/tmp/shardex_bench_mlp_step_trace.json");
    const double spans_per_step = double(events) / double(n) / double(std::max<std::int64_t>(spans_on_steps, 1));
    double span_off_ns = 0;
    {
      const int k = 10'000'000;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < k; ++i) {
        trace::Span sp("local", "off");
        if (sp.on()) sp.set_args("");
      }
      span_off_ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / k;
    }
    if (comm.rank() == 0) {
      const double step = median(step_ms), cm = median(comm_ms);
      std::cout << "{\"bench\":\"mlp_step\",\"impl\":\"shardex\",\"ranks\":" << n
                << ",\"threads_per_rank\":" << host::threads() << ",\"tokens\":" << T << ",\"hidden\":" << H
                << ",\"ffn\":" << F << ",\"dtype\":\"float32\",\"step_ms\":" << step << ",\"comm_ms\":" << cm
                << ",\"compute_ms\":" << (cm >= 0 ? step - cm : -1) << ",\"steps\":" << steps
                << ",\"gflop\":" << 12.0 * double(T) * double(H) * double(F) / 1e9
                << ",\"gemm_gflops_per_rank\":" << gflops_per_s << ",\"gemm_gflops_eigen\":" << eigen_gflops
                << ",\"gemm_gflops_blas\":" << blas_gflops << ",\"gemm_gflops_shardex\":" << own_gflops
                << ",\"gemm_gflops_chosen\":" << chosen_gflops << ",\"gemm_kernel\":\"" << Host::gemm_kernel<T32>(first)
                << "\",\"gemm_floor_ms\":" << floor_ms << ",\"vs_floor\":" << step / floor_ms
                << ",\"traced_step_ms\":" << median(traced_ms) << ",\"trace_on_ratio\":" << median(traced_ms) / step
                << ",\"spans_per_step\":" << spans_per_step << ",\"span_off_ns\":" << span_off_ns
                << ",\"trace_off_fraction\":" << spans_per_step * span_off_ns * 1e-6 / step << "}" << std::endl;
    }
    return 0;
  });
}
