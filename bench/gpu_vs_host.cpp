// SPDX-License-Identifier: MIT
// The GPU backend against the host, side by side in one run: one training
// step (forward and backward) of a Megatron MLP block and of a multi-head
// attention block, in float, on the Cuda device and on the Host device, same
// data. Prints one JSON object per measurement and the speed-up:
//
//   build/bench/bench_gpu_vs_host [--reps 5] [--batch 64] [--hidden 1024]
//   {"block":"mlp","device":"cuda","median_ms":0.41,"speedup_vs_host":180.2}
//
// Without a usable GPU it says why and exits 77 (nothing to compare).
#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <shardex/cuda.hpp>

#include "../examples/support/command_line.hpp"
#include "timing.hpp"

using namespace shardex;

namespace {

using Clock = std::chrono::steady_clock;

using bench::median;

/// The median time of `step()` over `reps` runs, after one warm-up; `sync`
/// waits for the device so that the time is the work, not its launch.
template <class F, class S>
double time_ms(int reps, F&& step, S&& sync) {
  step();
  sync();
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    step();
    sync();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return median(ms);
}

template <class Dev>
Tensor<float, Replicated, Dev> param(const mpi::Communicator& host, const typename Dev::communicator& comm,
                                     const Shape& s, std::uint64_t seed, float scale) {
  auto h = Tensor<float, Replicated>::normal(host, s, seed, 0.f, scale);
  if constexpr (std::same_as<Dev, Host>)
    return h.requires_grad();
  else
    return to<Dev>(h, comm).requires_grad();
}

/// One forward + backward of y = gelu(x A + a) B, loss = sum(y * y).
template <class Dev>
auto mlp_step(const mpi::Communicator& host, const typename Dev::communicator& comm, std::int64_t batch,
              std::int64_t hidden) {
  auto x = param<Dev>(host, comm, {batch, hidden}, 1, 1.f);
  auto A = param<Dev>(host, comm, {hidden, 4 * hidden}, 2, 0.02f);
  auto a = param<Dev>(host, comm, {4 * hidden}, 3, 0.02f);
  auto B = param<Dev>(host, comm, {4 * hidden, hidden}, 4, 0.02f);
  return [=]() mutable {
    Tensor<float, Replicated, Dev> y = matmul(gelu(add_bias(matmul(x, A), a)), B);
    Tensor<float, Replicated, Dev> loss = sum(y * y);
    A.zero_grad(), a.zero_grad(), B.zero_grad(), x.zero_grad();
    backward(loss);
  };
}

/// One forward + backward of softmax(q k^T / sqrt(dh)) v over (seq, heads, dh).
template <class Dev>
auto attention_step(const mpi::Communicator& host, const typename Dev::communicator& comm, std::int64_t seq,
                    std::int64_t hidden) {
  const std::int64_t heads = std::max<std::int64_t>(1, hidden / 64), dh = hidden / heads;
  auto q = param<Dev>(host, comm, {seq, heads, dh}, 5, 1.f);
  auto k = param<Dev>(host, comm, {seq, heads, dh}, 6, 1.f);
  auto v = param<Dev>(host, comm, {seq, heads, dh}, 7, 1.f);
  return [=]() mutable {
    Tensor<float, Replicated, Dev> o = attention(q, k, v);
    Tensor<float, Replicated, Dev> loss = sum(o * o);
    q.zero_grad(), k.zero_grad(), v.zero_grad();
    backward(loss);
  };
}

}  // namespace

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  const auto world = mpi::Communicator::world();
  CLI::App app("bench_gpu_vs_host: one training step of an MLP block and an attention block on the GPU and on the host",
               "bench_gpu_vs_host");
  command_line::configure(app);
  int reps = 5;
  std::int64_t batch = 64, hidden = 1024;
  app.add_option("--reps", reps, "timed runs of each step (the median is reported)")
      ->transform(command_line::integer(1, 1000));
  app.add_option("--batch", batch, "rows of the MLP's input, positions of the attention's")
      ->transform(command_line::integer(1, 1 << 20));
  app.add_option("--hidden", hidden, "width of the model (heads of 64)")->transform(command_line::integer(1, 1 << 16));
  if (const auto code = command_line::parse(app, argc, argv, world.rank())) return *code;
  return command_line::run("bench_gpu_vs_host", world.rank(), [&] {
    const auto self = world.split(world.rank(), 0);  // each rank measures alone
    if (const std::string why = nccl::unavailable_reason(world); !why.empty()) {
      if (world.rank() == 0) std::cout << "bench_gpu_vs_host: skipped: " << why << "\n";
      return command_line::as_int(command_line::exit_code::skip);
    }
    const auto gpu = nccl::Communicator::create(self);
    const auto no_sync = [] {};
    const auto gpu_sync = [] { cuda::synchronize(); };
    struct Row {
      const char* block;
      double host_ms, cuda_ms;
    };
    std::vector<Row> rows;
    rows.push_back({"mlp", time_ms(reps, mlp_step<Host>(self, self, batch, hidden), no_sync),
                    time_ms(reps, mlp_step<Cuda>(self, gpu, batch, hidden), gpu_sync)});
    rows.push_back({"attention", time_ms(reps, attention_step<Host>(self, self, batch, hidden), no_sync),
                    time_ms(reps, attention_step<Cuda>(self, gpu, batch, hidden), gpu_sync)});
    if (world.rank() == 0)
      for (const Row& r : rows) {
        std::cout << R"({"block":")" << r.block << R"(","device":"host","batch":)" << batch << R"(,"hidden":)" << hidden
                  << R"(,"median_ms":)" << r.host_ms << "}\n";
        std::cout << R"({"block":")" << r.block << R"(","device":"cuda","batch":)" << batch << R"(,"hidden":)" << hidden
                  << R"(,"median_ms":)" << r.cuda_ms << R"(,"speedup_vs_host":)" << r.host_ms / r.cuda_ms << "}\n";
      }
    return 0;
  });
}
