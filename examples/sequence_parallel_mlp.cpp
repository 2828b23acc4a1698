// SPDX-License-Identifier: MIT
// The Megatron MLP block with sequence parallelism: the activations outside
// the block are sharded along the sequence (tokens), so the block begins with
// an all_gather and ends with a reduce_scatter instead of Megatron's f and g.
//
//   mpirun -n 4 build/examples/sequence_parallel_mlp --speeds 1,2,3,4
//
//   X: S(0) tokens  -> all_gather -> R -> matmul A: S(1) -> GeLU(+a) -> matmul B: P
//                   -> reduce_scatter -> S(0) tokens -> +b
//
// The backward of the all_gather is a reduce_scatter and that of the
// reduce_scatter an all_gather: derived, as always. The tokens and the ffn
// columns are both split in proportion to --speeds. Like megatron_mlp, it
// trains on a random teacher and checks output and gradients against the
// same model run unsharded.
#include "support/cli.hpp"

using namespace shardex;

struct SpFlags : example::Flags {
  std::int64_t tokens = 24, hidden = 32, ffn = 64;
};

template <class T, class Dev = Host>
struct SequenceParallelMlp {
  std::vector<std::int64_t> tokens;  // the sequence split
  Tensor<T, Sharded<1>, Dev> A;      // (hidden, ffn): column-parallel
  Tensor<T, Sharded<0>, Dev> a;      // (ffn)
  Tensor<T, Sharded<0>, Dev> B;      // (ffn, hidden): row-parallel
  Tensor<T, Invariant, Dev> b;       // (hidden)

  SequenceParallelMlp(const typename Dev::communicator& comm, std::int64_t hidden, std::int64_t ffn,
                      const std::vector<std::int64_t>& ffn_lens, std::vector<std::int64_t> token_lens,
                      std::uint64_t seed)
      : tokens(std::move(token_lens)),
        A(example::normal<Dev, T, Sharded<1>>(comm, {hidden, ffn}, seed, T(0), T(1 / std::sqrt(double(hidden))),
                                              layout_mapping<Sharded<1>>(ffn_lens))),
        a(example::normal<Dev, T, Sharded<0>>(comm, {ffn}, seed + 1, T(0), T(0.1),
                                              layout_mapping<Sharded<0>>(ffn_lens))),
        B(example::normal<Dev, T, Sharded<0>>(comm, {ffn, hidden}, seed + 2, T(0), T(1 / std::sqrt(double(ffn))),
                                              layout_mapping<Sharded<0>>(ffn_lens))),
        b(example::normal<Dev, T, Invariant>(comm, {hidden}, seed + 3, T(0), T(0.1))) {}

  void trainable() { A.requires_grad(), a.requires_grad(), B.requires_grad(), b.requires_grad(); }

  // x: (tokens, hidden), each rank its tokens.
  Tensor<T, Sharded<0>, Dev> operator()(const Tensor<T, Sharded<0>, Dev>& x) const {
    auto h = gelu(add_bias(matmul(all_gather(x), A), a));                             // R x S(1) -> S(1)
    return add_bias(reduce_scatter<Sharded<0>>(matmul(h, B), tokens), replicate(b));  // P -> S(0), + b
  }
};

template <class T, class Dev>
example::Run<T> train(const typename Dev::communicator& comm, const SpFlags& f,
                      const std::vector<std::int64_t>& ffn_lens, const std::vector<std::int64_t>& token_lens,
                      bool report) {
  const std::int64_t tokens = f.tokens, hidden = f.hidden, ffn = f.ffn;
  const auto seed = static_cast<std::uint64_t>(f.seed);
  const SequenceParallelMlp<T, Dev> teacher(comm, hidden, ffn, ffn_lens, token_lens, seed + 100);
  SequenceParallelMlp<T, Dev> model(comm, hidden, ffn, ffn_lens, token_lens, seed);
  model.trainable();
  example::Run<T> run;
  const layout_mapping<Sharded<0>> by_token(token_lens);
  const double lr = example::learning_rate(f, 1.6, hidden);  // --lr auto: 1.6 / hidden (0.05 at the default width)
  for (std::int64_t step = 0, steps = f.steps; step < steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    auto x = example::normal<Dev, T, Sharded<0>>(comm, {tokens, hidden}, seed + 1000 + std::uint64_t(step % f.batches),
                                                 T(0), T(1), by_token);
    Tensor<T, Sharded<0>, Dev> target = teacher(x);
    Tensor<T, Sharded<0>, Dev> y = model(x);
    auto d = y - target;
    Tensor<T, Invariant, Dev> loss = all_reduce<Invariant>(sum(d * d) / double(2 * tokens));  // S -> P -> I: the total
    backward(loss);
    run.losses.push_back(example::value(loss));
    example::check_finite_loss(run.losses.back(), step, lr);
    if (step + 1 == steps) {
      run.last = {{"output", example::on_host(eager::all_gather<Invariant>(y.detach()))},
                  {"dA", example::on_host(eager::all_gather<Invariant>(model.A.grad()))},
                  {"da", example::on_host(eager::all_gather<Invariant>(model.a.grad()))},
                  {"dB", example::on_host(eager::all_gather<Invariant>(model.B.grad()))},
                  {"db", example::on_host(model.b.grad())}};
    }
    sgd_step(lr, model.A, model.a, model.B, model.b);
    example::end_step(comm, run, step, t0, report);
  }
  return run;
}

template <class T, class Dev>
int compare(const mpi::Communicator& comm, const SpFlags& f) {
  const auto w = example::speeds<Dev, T>(comm, f, GemmShape::plain(f.tokens, f.hidden, f.ffn));
  const auto ffn_lens = example::split(f.ffn, w);
  const auto token_lens = example::split(f.tokens, w);
  if (comm.rank() == 0)
    std::cout << "sequence_parallel_mlp: " << comm.size() << " ranks, token lengths " << to_string(token_lens)
              << ", ffn lengths " << to_string(ffn_lens) << ", " << dtype_name<T>() << "\n";
  const auto sharded = train<T, Dev>(example::device_comm<Dev>(comm), f, ffn_lens, token_lens, true);
  const auto whole = train<T, Host>(comm.split(comm.rank(), 0), f, {f.ffn}, {f.tokens}, false);
  return example::verdict(comm, sharded, whole, f);
}

int main(int argc, char** argv) {
  return example::main(
      argc, argv, "sequence_parallel_mlp", "the Megatron MLP with sequence parallelism", SpFlags{},
      [](CLI::App& app, SpFlags& f, int ranks) {
        using command_line::integer;
        app.add_option("--tokens", f.tokens, "tokens of a batch (split over the ranks)")->transform(integer(1));
        app.add_option("--hidden", f.hidden, "width of the model")->transform(integer(1));
        app.add_option("--ffn", f.ffn, "width of the hidden layer (split over the ranks)")->transform(integer(1));
        example::add_lr(app, f, true);
        example::add_speeds(app, f, ranks);
      },
      [](const mpi::Communicator& comm, const SpFlags& f, auto t, auto dev) {
        return compare<decltype(t), decltype(dev)>(comm, f);
      });
}
