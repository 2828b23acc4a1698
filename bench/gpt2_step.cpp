// SPDX-License-Identifier: MIT
// One full training step of GPT-2 with tensor parallelism: the work of
// bench/gpt2_step_torch.py (forward, mean cross-entropy, backward, clipping
// to norm 1, AdamW lr 6e-4, betas (0.9, 0.95), weight decay 0.1 on the
// matrices and embeddings), float32, GPT-2 small's sizes by default.
//
//   mpirun -n 2 build/bench/bench_gpt2_step [--batch 4 --seq 64 --steps 5 --warmup 1 --tune-gemm 6]
//                                           [--sequence-parallel]
//
// The model is examples/gpt2/model.hpp split evenly (50257 vocabulary rows
// over 2 ranks: 25129 + 25128, nothing padded), its optimizer and clipping
// examples/gpt2/train.hpp. Prints one JSON object: the median over the
// measured steps of the slowest rank's step time (and of rank 0's forward,
// backward, and clipping with AdamW), tokens/s, the peak resident
// memory (the largest rank's), the first step's loss, and the floor: the
// step's matrix-product flops per rank over the GEMM rate measured here, on
// every rank at once, on the step's MLP product (the fastest of Eigen's kernel,
// the BLAS's and shardex's), right after each measured step; vs_floor is the median over
// the steps of each step over the floor of its moment, gemm_floor_ms the floor
// at the median rates. Where rank 0's step goes, from its counters
// (core/counters.hpp): products_ms in the matrix products (products_gflops
// their rate there, operands cold as a step leaves them, against the floor's
// rate on one product over and over), comm_ms in collective calls (waiting
// for the other rank included), rest_ms the rest (the norms, attention's
// softmax, GELU, cross-entropy's exponentials, clipping and AdamW).
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <shardex.hpp>

#include "../examples/gpt2/train.hpp"
#include "../examples/support/command_line.hpp"
#include "timing.hpp"

using namespace shardex;
using bench::median;

namespace {

double max_over_ranks(const mpi::Communicator& comm, double v) { return bench::max_over_ranks(comm.native(), v); }

/// The flops of the step's matrix products over all ranks: forward (the q, k,
/// v, output and MLP projections, the scores and their mix over the values
/// as causal_attention computes them: each block of up to 64 query rows
/// against the keys up to its end, all of the (seq, seq) scores at seq 64 and
/// 5/8 of them at 256; the logits), and twice that backward.
double step_flops(const gpt2::Config& c, std::int64_t batch, std::int64_t seq) {
  const double n = double(batch * seq), d = double(c.width), v = double(c.vocab), l = double(c.layers);
  const double scores = double(detail::CausalShapes{batch, seq, 1, 1, 1}.computed_pairs());
  const double per_layer = 2 * n * d * (3 * d + d + 8 * d) + 2 * 2 * double(batch) * scores * d;
  return 3 * (l * per_layer + 2 * n * d * v);
}

/// The float shape classes whose products run `kernel` ("NN huge, ...").
std::string classes_of(host::GemmKernel kernel) {
  std::string out;
  for (const host::GemmClassChoice& k : host::gemm_kernels().classes)
    if (k.element_bytes == 4 && k.kernel == kernel)
      out += std::string(out.empty() ? "" : ", ") + (k.ta ? "T" : "N") + (k.tb ? "T" : "N") + " " + k.size;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  auto comm = mpi::Communicator::world();
  gpt2::Config c;
  std::int64_t batch = 4, seq = 64, steps = 5, warmup = 1, tune_steps = 6, seed = 1;
  bool sequence_parallel = false;
  CLI::App app("bench_gpt2_step: one GPT-2 training step with tensor parallelism (bench/gpt2_step_torch.py's work)",
               "bench_gpt2_step");
  command_line::configure(app);
  using command_line::integer;
  app.add_option("--layers", c.layers, "transformer blocks")->transform(integer(1, 4096));
  app.add_option("--heads", c.heads, "attention heads")->transform(integer(1, 65536));
  app.add_option("--width", c.width, "model width")->transform(integer(1, 1 << 20));
  app.add_option("--context", c.context, "positions")->transform(integer(1, 1 << 24));
  app.add_option("--vocab", c.vocab, "vocabulary")->transform(integer(1, 1 << 30));
  app.add_option("--batch", batch, "sequences per batch")->transform(integer(1, 1 << 20));
  app.add_option("--seq", seq, "tokens per sequence")->transform(integer(1, 1 << 24));
  app.add_option("--steps", steps, "measured steps")->transform(integer(1, 1 << 20));
  app.add_option("--warmup", warmup, "steps run first, not measured")->transform(integer(0, 1 << 20));
  app.add_option("--tune-gemm", tune_steps,
                 "steps after the warm-up that tune the GEMM kernels (host::tune_gemm_kernels), not measured; 0: none")
      ->transform(integer(0, 1 << 20));
  app.add_flag("--sequence-parallel", sequence_parallel,
               "Megatron's sequence parallelism: the norms and the residual stream split over the ranks' tokens");
  app.add_option("--seed", seed, "seed of the weights and the tokens")->transform(integer(0));
  if (const auto code = command_line::parse(app, argc, argv, comm.rank())) return *code;
  return command_line::run("bench_gpt2_step", comm.rank(), [&] {
    using T = float;
    const int n = comm.size();
    c.check();
    if (seq > c.context) throw command_line::usage_error("--seq is longer than the context");
    if (tune_steps % 2 != 0) throw command_line::usage_error("--tune-gemm takes an even count (0: none)");
    const auto split = gpt2::Split::proportional(c, std::vector<double>(static_cast<std::size_t>(n), 1.0));
    gpt2::Model<T> model(comm, c, split, static_cast<std::uint64_t>(seed));
    model.trainable().sequence_parallel(sequence_parallel);
    gpt2::AdamW<T, Host> opt(model, AdamOptions{.lr = 6e-4, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1});
    std::mt19937_64 rng(static_cast<std::uint64_t>(seed));
    std::vector<std::int64_t> tokens(static_cast<std::size_t>(batch * seq + 1));
    for (auto& t : tokens) t = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(c.vocab));
    const gpt2::Batch b = gpt2::batch_at(tokens, 0, batch, seq);
    const auto ids = gpt2::ids_tensor<Host>(comm, b.inputs), targets = gpt2::ids_tensor<Host>(comm, b.targets);

    // The GEMM rate, every rank at once, on the MLP's first product (tokens x
    // width x this rank's columns), the fastest of the kernels (Eigen's, the BLAS's, shardex's):
    // the best of three runs each, taken right after every measured step, so
    // that each step is set against the rate the machine gave at that moment
    // (a shared machine's rate moves by a third within a run).
    const std::int64_t cols = std::max<std::int64_t>(1, split.ffn[static_cast<std::size_t>(comm.rank())]);
    const GemmShape shape = GemmShape::plain(batch * seq, c.width, cols);
    std::vector<T> x(static_cast<std::size_t>(batch * seq * c.width), T(0.5)),
        w(static_cast<std::size_t>(c.width * cols), T(0.25));
    auto out = Host::allocate<T>(batch * seq * cols);
    const auto rate = [&](host::GemmKernel k) {
      std::vector<double> ts;
      for (int i = 0; i < 3; ++i) {
        comm.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        host::gemm_with(k, shape, T(1), x.data(), w.data(), T(0), out.get());
        ts.push_back(
            max_over_ranks(comm, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
      }
      return 2.0 * double(batch * seq) * double(c.width) * double(cols) / *std::min_element(ts.begin(), ts.end()) / 1e9;
    };
    const double flops_per_rank = step_flops(c, batch, seq) / double(n);

    shardex::GradSquares squares = gpt2::grad_squares(model);  // the clipping's, taken in the backward
    double first_loss = 0;
    // The step, and its parts on rank 0: forward, backward, clipping and AdamW;
    // after each measured one, the GEMM rates and the step over its floor.
    std::vector<double> ms, forward_ms, backward_ms, update_ms, eigen_rates, blas_rates, own_rates, vs_floor;
    std::vector<double> products_ms, products_gflops, comm_ms, rest_ms;
    const auto since = [](auto t) {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count() * 1e3;
    };
    std::int64_t done = 0;  // steps run
    const auto one_step = [&](bool measured) {
      comm.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      const Counters c0 = counters();
      const Tensor<T, Invariant> loss = model.loss(ids, targets, batch, seq);
      const double forward = since(t0);
      backward(loss);
      const double backward_end = since(t0);
      opt.step(model, gpt2::grad_clipping(model, squares, 1.0).scale);
      const double t = since(t0);
      const Counters spent = counters() - c0;
      if (done == 0) first_loss = double(loss.data()[0]);
      if (measured) {
        const double step = max_over_ranks(comm, t);
        ms.push_back(step);
        forward_ms.push_back(forward), backward_ms.push_back(backward_end - forward);
        update_ms.push_back(t - backward_end);
        products_ms.push_back(spent.gemm_seconds * 1e3);
        products_gflops.push_back(spent.gemm_flops / spent.gemm_seconds / 1e9);
        comm_ms.push_back(spent.backend_seconds * 1e3);
        rest_ms.push_back(t - (spent.gemm_seconds + spent.backend_seconds) * 1e3);
        eigen_rates.push_back(rate(host::GemmKernel::eigen));
        blas_rates.push_back(host::have_blas() ? rate(host::GemmKernel::blas) : 0.0);
        own_rates.push_back(host::kernel_available(host::GemmKernel::own, 4) ? rate(host::GemmKernel::own) : 0.0);
        const double gflops = std::max({eigen_rates.back(), blas_rates.back(), own_rates.back()});
        vs_floor.push_back(step / (flops_per_rank / (gflops * 1e9) * 1e3));
      }
      ++done;
    };
    // The warm-up (allocations, first touches), then the GEMM kernels tuned
    // on the step (unmeasured, as a training run would do it first), then the
    // measured steps.
    for (std::int64_t i = 0; i < warmup; ++i) one_step(false);
    if (tune_steps > 0) {
      host::tune_gemm_kernels(comm, static_cast<int>(tune_steps), [&] { one_step(false); });
      if (comm.rank() == 0) std::cerr << host::gemm_kernels_report();  // stdout has the JSON alone
    }
    for (std::int64_t i = 0; i < steps; ++i) one_step(true);
    const double step_ms = median(ms);
    const double eigen = median(eigen_rates), blas = median(blas_rates), own = median(own_rates);
    const double gflops = std::max({eigen, blas, own});
    const double floor_ms = flops_per_rank / (gflops * 1e9) * 1e3;

    const std::string core = host::blas_core();  // the core's name, without the note
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    const double rss_mib = max_over_ranks(comm, double(usage.ru_maxrss) / 1024.0);
    if (comm.rank() == 0)
      std::cout << "{\"bench\":\"gpt2_step\",\"impl\":\"shardex\",\"ranks\":" << n
                << ",\"threads\":1,\"sequence_parallel\":" << (sequence_parallel ? "true" : "false")
                << ",\"batch\":" << batch << ",\"seq\":" << seq << ",\"layers\":" << c.layers
                << ",\"heads\":" << c.heads << ",\"width\":" << c.width << ",\"vocab\":" << c.vocab
                << ",\"dtype\":\"float32\",\"step_ms\":" << step_ms
                << ",\"tokens_per_s\":" << double(batch * seq) / (step_ms / 1e3) << ",\"peak_rss_mib\":" << rss_mib
                << ",\"first_loss\":" << first_loss << ",\"steps\":" << steps
                << ",\"forward_ms\":" << median(forward_ms) << ",\"backward_ms\":" << median(backward_ms)
                << ",\"clip_adamw_ms\":" << median(update_ms) << ",\"step_gflop\":" << step_flops(c, batch, seq) / 1e9
                << ",\"gemm_gflops_per_rank\":" << gflops << ",\"gemm_gflops_eigen\":" << eigen
                << ",\"gemm_gflops_blas\":" << blas << ",\"gemm_gflops_shardex\":" << own
                << ",\"gemm_tuned_steps\":" << host::gemm_kernels().tuned_steps << ",\"gemm_eigen_classes\":\""
                << classes_of(host::GemmKernel::eigen) << "\",\"gemm_shardex_classes\":\""
                << classes_of(host::GemmKernel::own) << "\",\"blas_core\":\"" << core.substr(0, core.find(' '))
                << "\",\"gemm_floor_ms\":" << floor_ms << ",\"vs_floor\":" << median(vs_floor)
                << ",\"products_ms\":" << median(products_ms) << ",\"products_gflops\":" << median(products_gflops)
                << ",\"comm_ms\":" << median(comm_ms) << ",\"rest_ms\":" << median(rest_ms) << "}" << std::endl;
    return 0;
  });
}
