// SPDX-License-Identifier: MIT
// The model layers of nn/, each one training step's worth (forward and
// backward), exactly the work of bench/layers_torch.py: float32, GPT-2 small's
// sizes by default (4 x 256 tokens, hidden 768, 12 heads of 64, vocabulary
// 50257), the vocabulary and the heads split as evenly as they go.
//
//   mpirun -n 2 build/bench/bench_layers [--op all|cross_entropy|attention|layer_norm|rms_norm|embedding]
//
// - cross_entropy: logits (tokens, vocab) Sharded<1>, targets Invariant; the mean loss, backward.
// - attention: q, k, v (batch, seq, heads, dh) Sharded<2> on the heads, causal;
//   loss = sum(out), backward.
// - layer_norm, rms_norm: x (tokens, hidden) Sharded<0> (sequence parallelism),
//   the weights replicate(w); loss = sum(y), backward (the weights' gradients all-reduced).
// - embedding: ids Invariant, the table (vocab, hidden) Sharded<0>, all_reduce to
//   Invariant; loss = sum(out), backward (the table's gradient: a scatter-add).
//
// Prints one JSON object per operation: the median over steps of the slowest
// rank's step time, and its forward part. For the norms also the floor: the
// bytes a step must touch (read x, write y; read y for the sum; write dy, read
// x and dy, write dx: 7 passes over the rank's x, the forward 3 of them) over
// the copy bandwidth measured here, in the same run, on every rank at once, on
// buffers of x's size.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <shardex.hpp>

#include "../examples/support/command_line.hpp"
#include "timing.hpp"

using namespace shardex;
using bench::median;

namespace {

using T32 = float;

double max_over_ranks(const mpi::Communicator& comm, double v) { return bench::max_over_ranks(comm.native(), v); }

// `parts` as even as they go: the first extent % parts get one more.
std::vector<std::int64_t> even_split(std::int64_t extent, int parts, std::int64_t unit = 1) {
  std::vector<std::int64_t> lens(static_cast<std::size_t>(parts), extent / unit / parts * unit);
  for (std::int64_t r = 0; r < extent / unit % parts; ++r) lens[static_cast<std::size_t>(r)] += unit;
  return lens;
}

struct Sizes {
  std::int64_t batch = 4, seq = 256, hidden = 768, heads = 12, vocab = 50257, steps = 10, warmup = 2;
  [[nodiscard]] std::int64_t tokens() const { return batch * seq; }
};

struct Timing {
  double step_ms = 0, forward_ms = 0;
};

// Runs warmup + steps steps; `forward` returns what `backward` differentiates.
template <class Forward, class Backward>
Timing time_steps(const mpi::Communicator& comm, const Sizes& s, Forward&& forward, Backward&& backward) {
  std::vector<double> step, fwd;
  for (std::int64_t i = 0; i < s.warmup + s.steps; ++i) {
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    auto loss = forward();
    const auto t1 = std::chrono::steady_clock::now();
    backward(loss);
    const auto t2 = std::chrono::steady_clock::now();
    if (i < s.warmup) continue;
    step.push_back(max_over_ranks(comm, std::chrono::duration<double, std::milli>(t2 - t0).count()));
    fwd.push_back(max_over_ranks(comm, std::chrono::duration<double, std::milli>(t1 - t0).count()));
  }
  return {median(step), median(fwd)};
}

void print(const mpi::Communicator& comm, const Sizes& s, const std::string& op, const Timing& t,
           const std::string& extra = "") {
  if (comm.rank() != 0) return;
  std::cout << "{\"bench\":\"layers\",\"impl\":\"shardex\",\"op\":\"" << op << "\",\"ranks\":" << comm.size()
            << ",\"batch\":" << s.batch << ",\"seq\":" << s.seq << ",\"hidden\":" << s.hidden
            << ",\"heads\":" << s.heads << ",\"vocab\":" << s.vocab
            << ",\"dtype\":\"float32\",\"step_ms\":" << t.step_ms << ",\"forward_ms\":" << t.forward_ms
            << ",\"steps\":" << s.steps << extra << "}" << std::endl;
}

void cross_entropy_step(const mpi::Communicator& comm, const Sizes& s) {
  const layout_mapping<Sharded<1>> cols(even_split(s.vocab, comm.size()));
  auto logits = Tensor<T32, Sharded<1>>::normal(comm, {s.tokens(), s.vocab}, 1, 0.f, 2.f, cols).requires_grad();
  auto targets = Tensor<std::int64_t, Invariant>::uniform(comm, {s.tokens()}, 2, 0, s.vocab);
  const Timing t = time_steps(
      comm, s,
      [&] {
        logits.zero_grad();
        return Tensor<T32, Invariant>(cross_entropy(logits, targets));
      },
      [](const Tensor<T32, Invariant>& loss) { backward(loss); });
  print(comm, s, "cross_entropy", t);
}

void attention_step(const mpi::Communicator& comm, const Sizes& s) {
  const std::int64_t dh = s.hidden / s.heads;
  const layout_mapping<Sharded<2>> heads(even_split(s.heads, comm.size()));
  auto make = [&](std::uint64_t seed) {
    return Tensor<T32, Sharded<2>>::normal(comm, {s.batch, s.seq, s.heads, dh}, seed, 0.f, 1.f, heads).requires_grad();
  };
  auto q = make(3), k = make(4), v = make(5);
  const Timing t = time_steps(
      comm, s,
      [&] {
        q.zero_grad(), k.zero_grad(), v.zero_grad();
        return Tensor<T32, Partial>(sum(causal_attention(q, k, v)));
      },
      [](const Tensor<T32, Partial>& loss) { backward(loss); });
  print(comm, s, "attention", t);
}

// The copy bandwidth (bytes read + written per second) of buffers of `bytes`, every rank at once.
double copy_bandwidth(const mpi::Communicator& comm, std::size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::vector<double> ts;
  for (int i = 0; i < 50; ++i) {
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    ts.push_back(max_over_ranks(comm, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
    std::swap(a, b);
  }
  return 2.0 * double(bytes) / *std::min_element(ts.begin() + 5, ts.end());
}

void norm_step(const mpi::Communicator& comm, const Sizes& s, bool rms) {
  const std::vector<std::int64_t> rows = even_split(s.tokens(), comm.size());
  auto x = Tensor<T32, Sharded<0>>::normal(comm, {s.tokens(), s.hidden}, 6, 0.f, 1.f, layout_mapping<Sharded<0>>(rows))
               .requires_grad();
  auto w = Tensor<T32, Invariant>::normal(comm, {s.hidden}, 7, 1.f, 0.1f).requires_grad();
  auto b = Tensor<T32, Invariant>::normal(comm, {s.hidden}, 8, 0.f, 0.1f).requires_grad();
  const Timing t = time_steps(
      comm, s,
      [&] {
        x.zero_grad(), w.zero_grad(), b.zero_grad();
        if (rms) return Tensor<T32, Partial>(sum(rms_norm(x, replicate(w), 1e-5)));
        return Tensor<T32, Partial>(sum(layer_norm(x, replicate(w), replicate(b), 1e-5)));
      },
      [](const Tensor<T32, Partial>& loss) { backward(loss); });
  const std::int64_t mine = rows[static_cast<std::size_t>(comm.rank())];
  const std::size_t x_bytes = static_cast<std::size_t>(mine * s.hidden) * sizeof(T32);
  const double bandwidth = copy_bandwidth(comm, x_bytes);
  const double floor_ms = 7.0 * double(x_bytes) / bandwidth * 1e3;
  const double forward_floor_ms = 3.0 * double(x_bytes) / bandwidth * 1e3;  // read x, write y, read y
  print(comm, s, rms ? "rms_norm" : "layer_norm", t,
        ",\"copy_gb_per_s\":" + std::to_string(bandwidth / 1e9) + ",\"floor_ms\":" + std::to_string(floor_ms) +
            ",\"vs_floor\":" + std::to_string(t.step_ms / floor_ms) +
            ",\"forward_floor_ms\":" + std::to_string(forward_floor_ms) +
            ",\"forward_vs_floor\":" + std::to_string(t.forward_ms / forward_floor_ms));
}

void embedding_step(const mpi::Communicator& comm, const Sizes& s) {
  const layout_mapping<Sharded<0>> rows(even_split(s.vocab, comm.size()));
  auto table = Tensor<T32, Sharded<0>>::normal(comm, {s.vocab, s.hidden}, 9, 0.f, 0.02f, rows).requires_grad();
  auto ids = Tensor<std::int64_t, Invariant>::uniform(comm, {s.tokens()}, 10, 0, s.vocab);
  const Timing t = time_steps(
      comm, s,
      [&] {
        table.zero_grad();
        return Tensor<T32, Invariant>(sum(all_reduce<Invariant>(embedding(ids, table))));
      },
      [](const Tensor<T32, Invariant>& loss) { backward(loss); });
  print(comm, s, "embedding", t);
}

}  // namespace

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  auto comm = mpi::Communicator::world();
  Sizes s;
  std::string op = "all";
  CLI::App app("bench_layers: the model layers' training step, forward and backward (bench/layers_torch.py's work)",
               "bench_layers");
  command_line::configure(app);
  using command_line::integer;
  app.add_option("--op", op, "the operation to time")
      ->check(CLI::IsMember({"all", "cross_entropy", "attention", "layer_norm", "rms_norm", "embedding"}));
  app.add_option("--batch", s.batch, "sequences")->transform(integer(1, 1 << 16));
  app.add_option("--seq", s.seq, "tokens per sequence")->transform(integer(1, 1 << 16));
  app.add_option("--hidden", s.hidden, "width of the model (a multiple of --heads)")->transform(integer(1, 1 << 16));
  app.add_option("--heads", s.heads, "attention heads (split over the ranks)")->transform(integer(1, 1 << 12));
  app.add_option("--vocab", s.vocab, "vocabulary (split over the ranks)")->transform(integer(1, 1 << 24));
  app.add_option("--steps", s.steps, "measured steps")->transform(integer(1, 1 << 20));
  app.add_option("--warmup", s.warmup, "steps run first, not measured")->transform(integer(0, 1 << 20));
  app.callback([&s] {
    if (s.hidden % s.heads != 0)
      throw CLI::ValidationError("--hidden " + std::to_string(s.hidden) + " is not a multiple of --heads " +
                                 std::to_string(s.heads));
  });
  if (const auto code = command_line::parse(app, argc, argv, comm.rank())) return *code;
  return command_line::run("bench_layers", comm.rank(), [&] {
    const auto wanted = [&](const char* name) { return op == "all" || op == name; };
    if (wanted("cross_entropy")) cross_entropy_step(comm, s);
    if (wanted("attention")) attention_step(comm, s);
    if (wanted("layer_norm")) norm_step(comm, s, false);
    if (wanted("rms_norm")) norm_step(comm, s, true);
    if (wanted("embedding")) embedding_step(comm, s);
    return 0;
  });
}
