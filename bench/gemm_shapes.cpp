// SPDX-License-Identifier: MIT
// The matrix products of a GPT-2 training step, each shape through each host
// GEMM kernel (Eigen's, the BLAS's, shardex's: device/host/gemm_kernels.hpp),
// with its operands as the step leaves them against the same product over
// and over in cache (how the floor of bench_gpt2_step is measured): what the
// weights' coming from memory costs each kernel.
//
//   mpirun -n 2 build/bench/bench_gemm_shapes [--batch 4 --seq 64 --width 768 --heads 12 --vocab 50257 --repeats 4]
//
// The shapes are one rank's at this world size, the columns (heads, MLP,
// vocabulary) split evenly: the forward's q/k/v, output, MLP and logits
// products (NN, and the logits NT against the tied table), the backward's
// input gradients (NT; the table's NN) and weight gradients (TN, added to the
// gradient, beta 1); and attention's per-head products (a block of up to 64
// query rows: the scores against the keys (NT), the probabilities times V
// (NN), V's gradient (TN, beta 1)), each head's K or V a "weight". "cold":
// every repeat goes through `--copies` different weights and outputs (as
// many as the model has layers; the table's product two; attention's, one
// layer's heads), so the weights come from memory as in a step; "hot": one
// set, the same product over and over. Every rank runs at once (the other
// core busy as in a step). Prints one JSON object per shape and kernel: GFLOP/s per
// rank, cold and hot, the median over the repeats of the slowest rank.
#include <mpi.h>

#include <algorithm>
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

struct Product {
  std::string name;
  std::int64_t m, k, n;
  bool ta, tb;
  float beta;
  std::int64_t copies;  // distinct weights / outputs cycled through when cold
};

// The product of p through kernel `kernel`, cold (cycling through its copies) or hot, in GFLOP/s per rank.
double rate(const mpi::Communicator& comm, const Product& p, host::GemmKernel kernel, bool cold, std::int64_t repeats) {
  const GemmShape g = GemmShape::plain(p.m, p.k, p.n, p.ta, p.tb);
  const std::int64_t sets = cold ? p.copies : 1;
  // The activations (the operand of m or of k rows of tokens) are one buffer, hot in a step too.
  const bool weight_is_b = !p.ta;  // NN, NT: B is the weight; TN: C is the weight's gradient
  std::vector<float> shared(static_cast<std::size_t>(weight_is_b ? p.m * p.k : p.k * p.m + p.k * p.n), 0.25f);
  std::vector<std::vector<float>> weights(static_cast<std::size_t>(sets)), outputs(static_cast<std::size_t>(sets));
  for (std::int64_t i = 0; i < sets; ++i) {
    if (weight_is_b) weights[static_cast<std::size_t>(i)].assign(static_cast<std::size_t>(p.k * p.n), 0.5f);
    outputs[static_cast<std::size_t>(i)].assign(static_cast<std::size_t>(p.m * p.n), 0.0f);
  }
  std::vector<double> per_repeat;
  for (std::int64_t r = 0; r < repeats + 1; ++r) {  // the first, unmeasured, touches everything once
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    for (std::int64_t i = 0; i < sets; ++i) {
      const float* a = shared.data();
      const float* b = weight_is_b ? weights[static_cast<std::size_t>(i)].data() : shared.data() + p.k * p.m;
      host::gemm_with(kernel, g, 1.0f, a, b, p.beta, outputs[static_cast<std::size_t>(i)].data());
    }
    const double s = bench::max_over_ranks(
        comm.native(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (r > 0) per_repeat.push_back(2.0 * double(p.m) * double(p.k) * double(p.n) * double(sets) / s / 1e9);
  }
  return median(per_repeat);
}

}  // namespace

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  auto comm = mpi::Communicator::world();
  std::int64_t batch = 4, seq = 64, width = 768, heads = 12, vocab = 50257, layers = 12, repeats = 4;
  CLI::App app("bench_gemm_shapes: a GPT-2 step's matrix products through each host GEMM kernel, cold and hot",
               "bench_gemm_shapes");
  command_line::configure(app);
  using command_line::integer;
  app.add_option("--batch", batch, "sequences per batch")->transform(integer(1, 1 << 16));
  app.add_option("--seq", seq, "tokens per sequence")->transform(integer(1, 1 << 16));
  app.add_option("--width", width, "model width")->transform(integer(1, 1 << 16));
  app.add_option("--heads", heads, "attention heads (split over the ranks; width / heads per head)")
      ->transform(integer(1, 1 << 12));
  app.add_option("--vocab", vocab, "vocabulary (split over the ranks)")->transform(integer(1, 1 << 24));
  app.add_option("--copies", layers, "weights cycled through when cold (the layers)")->transform(integer(1, 1024));
  app.add_option("--repeats", repeats, "measured passes over the copies (the median is reported)")
      ->transform(integer(1, 1000));
  app.callback([&] {
    if (width % heads != 0)
      throw CLI::ValidationError("--width " + std::to_string(width) + " is not a multiple of --heads " +
                                 std::to_string(heads));
  });
  if (const auto code = command_line::parse(app, argc, argv, comm.rank())) return *code;
  return command_line::run("bench_gemm_shapes", comm.rank(), [&] {
    const std::int64_t n = comm.size(), t = batch * seq;
    const auto part = [&](std::int64_t cols) { return std::max<std::int64_t>(1, (cols + n - 1) / n); };
    const std::int64_t qkv = part(3 * width), attn = part(width), ffn = part(4 * width), rows = part(vocab);
    // One layer's heads on a rank (each sequence's), a block of query rows, a head's size.
    const std::int64_t head_copies = batch * part(heads), block = std::min<std::int64_t>(seq, 64), dh = width / heads;
    const std::vector<Product> products = {
        {"forward qkv", t, width, qkv, false, false, 0.0f, layers},
        {"forward output", t, attn, width, false, false, 0.0f, layers},
        {"forward mlp in", t, width, ffn, false, false, 0.0f, layers},
        {"forward mlp out", t, ffn, width, false, false, 0.0f, layers},
        {"forward logits", t, width, rows, false, true, 0.0f, 2},
        {"backward qkv dx", t, qkv, width, false, true, 0.0f, layers},
        {"backward mlp in dx", t, ffn, width, false, true, 0.0f, layers},
        {"backward mlp out dx", t, width, ffn, false, true, 0.0f, layers},
        {"backward logits dx", t, rows, width, false, false, 0.0f, 2},
        {"backward qkv dw", width, t, qkv, true, false, 1.0f, layers},
        {"backward mlp in dw", width, t, ffn, true, false, 1.0f, layers},
        {"backward mlp out dw", ffn, t, width, true, false, 1.0f, layers},
        {"attention scores", block, dh, seq, false, true, 0.0f, head_copies},
        {"attention apply", block, seq, dh, false, false, 0.0f, head_copies},
        {"attention dv", seq, block, dh, true, false, 1.0f, head_copies},
    };
    for (const Product& p : products)
      for (const host::GemmKernel kernel : {host::GemmKernel::eigen, host::GemmKernel::blas, host::GemmKernel::own}) {
        if (!host::kernel_available(kernel, 4)) continue;
        const double cold = rate(comm, p, kernel, true, repeats), hot = rate(comm, p, kernel, false, repeats);
        if (comm.rank() == 0)
          std::cout << "{\"bench\":\"gemm_shapes\",\"ranks\":" << n << ",\"product\":\"" << p.name << "\",\"m\":" << p.m
                    << ",\"k\":" << p.k << ",\"n\":" << p.n << ",\"op\":\"" << (p.ta ? "T" : "N") << (p.tb ? "T" : "N")
                    << "\",\"kernel\":\"" << host::kernel_name(kernel) << "\",\"cold_gflops\":" << cold
                    << ",\"hot_gflops\":" << hot << ",\"chosen\":"
                    << (host::gemm_kernel(GemmShape::plain(p.m, p.k, p.n, p.ta, p.tb), 4) == kernel ? "true" : "false")
                    << "}" << std::endl;
      }
    return 0;
  });
}
