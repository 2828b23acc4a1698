// SPDX-License-Identifier: MIT
// Multi-head self-attention with the sequence sharded, in the DeepSpeed-Ulysses
// pattern: an all_to_all turns the sequence-sharded q, k, v into head-sharded
// ones (uneven head counts allowed), attention runs locally per head, and an
// all_to_all brings the output back to the sequence sharding.
//
//   mpirun -n 4 build/examples/alltoall_attention --speeds 1,2,3,4
//
//   x: S(0) (seq, hidden) -> matmul W{q,k,v} -> reshape (seq, heads, dh): S(0)
//     -> all_to_all -> S(1) heads -> attention -> all_to_all -> S(0) -> matmul Wo
//
// The projections are Invariant parameters, replicated into the per-rank
// computation (their gradients are all-reduced by replicate's backward). The
// backward of each all_to_all is the all_to_all back: derived. Checked, like
// the MLP examples, against the same model run unsharded.
#include "support/cli.hpp"

using namespace shardex;

struct AttentionFlags : example::Flags {
  std::int64_t seq = 16, heads = 6, dh = 4;
  AttentionFlags() { lr = "0.5"; }
};

template <class T, class Dev = Host>
struct UlyssesAttention {
  std::int64_t heads, dh;
  std::vector<std::int64_t> seq_lens, head_lens;
  Tensor<T, Invariant, Dev> wq, wk, wv, wo;  // (hidden, hidden)

  UlyssesAttention(const typename Dev::communicator& comm, std::int64_t heads_, std::int64_t dh_,
                   std::vector<std::int64_t> seq, std::vector<std::int64_t> hl, std::uint64_t seed)
      : heads(heads_),
        dh(dh_),
        seq_lens(std::move(seq)),
        head_lens(std::move(hl)),
        wq(init(comm, seed)),
        wk(init(comm, seed + 1)),
        wv(init(comm, seed + 2)),
        wo(init(comm, seed + 3)) {}

  Tensor<T, Invariant, Dev> init(const typename Dev::communicator& comm, std::uint64_t seed) const {
    const std::int64_t hidden = heads * dh;
    return example::normal<Dev, T, Invariant>(comm, {hidden, hidden}, seed, T(0), T(1 / std::sqrt(double(hidden))));
  }
  void trainable() { wq.requires_grad(), wk.requires_grad(), wv.requires_grad(), wo.requires_grad(); }

  // x: (seq, hidden), each rank its positions.
  Tensor<T, Sharded<0>, Dev> operator()(const Tensor<T, Sharded<0>, Dev>& x) const {
    const std::int64_t seq = x.shape()[0];
    const auto by_head = [&](const Tensor<T, Invariant, Dev>& w) {  // S(0) (seq, heads, dh) -> S(1)
      return all_to_all<Sharded<1>>(reshape(matmul(x, replicate(w)), {seq, heads, dh}), head_lens);
    };
    auto o = attention(by_head(wq), by_head(wk), by_head(wv));                    // local per head: S(1)
    auto back = reshape(all_to_all<Sharded<0>>(o, seq_lens), {seq, heads * dh});  // S(0) (seq, hidden)
    return matmul(back, replicate(wo));
  }
};

template <class T, class Dev>
example::Run<T> train(const typename Dev::communicator& comm, const AttentionFlags& f,
                      const std::vector<std::int64_t>& seq_lens, const std::vector<std::int64_t>& head_lens,
                      bool report) {
  const std::int64_t seq = f.seq, heads = f.heads, dh = f.dh;
  const auto seed = static_cast<std::uint64_t>(f.seed);
  const UlyssesAttention<T, Dev> teacher(comm, heads, dh, seq_lens, head_lens, seed + 100);
  UlyssesAttention<T, Dev> model(comm, heads, dh, seq_lens, head_lens, seed);
  model.trainable();
  example::Run<T> run;
  const double lr = *command_line::read_real(f.lr);  // add_lr checked it
  for (std::int64_t step = 0, steps = f.steps; step < steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    auto x = example::normal<Dev, T, Sharded<0>>(comm, {seq, heads * dh}, seed + 1000 + std::uint64_t(step % f.batches),
                                                 T(0), T(1), layout_mapping<Sharded<0>>(seq_lens));
    Tensor<T, Sharded<0>, Dev> target = teacher(x);
    Tensor<T, Sharded<0>, Dev> y = model(x);
    auto d = y - target;
    Tensor<T, Invariant, Dev> loss = all_reduce<Invariant>(sum(d * d) / double(2 * seq));
    backward(loss);
    run.losses.push_back(example::value(loss));
    example::check_finite_loss(run.losses.back(), step, lr);
    if (step + 1 == steps) {
      run.last = {{"output", example::on_host(eager::all_gather<Invariant>(y.detach()))},
                  {"dWq", example::on_host(model.wq.grad())},
                  {"dWk", example::on_host(model.wk.grad())},
                  {"dWv", example::on_host(model.wv.grad())},
                  {"dWo", example::on_host(model.wo.grad())}};
    }
    sgd_step(lr, model.wq, model.wk, model.wv, model.wo);
    example::end_step(comm, run, step, t0, report);
  }
  return run;
}

template <class T, class Dev>
int compare(const mpi::Communicator& comm, const AttentionFlags& f) {
  // The calibration product: one head block of the projections (seq x heads*dh by heads*dh).
  const std::int64_t width = f.heads * f.dh;
  const auto w = example::speeds<Dev, T>(comm, f, GemmShape::plain(f.seq, width, width));
  const auto seq_lens = example::split(f.seq, w);
  const auto head_lens = example::split(f.heads, w);
  if (comm.rank() == 0)
    std::cout << "alltoall_attention: " << comm.size() << " ranks, sequence lengths " << to_string(seq_lens)
              << ", heads per rank " << to_string(head_lens) << ", " << dtype_name<T>() << "\n";
  const auto sharded = train<T, Dev>(example::device_comm<Dev>(comm), f, seq_lens, head_lens, true);
  const auto whole = train<T, Host>(comm.split(comm.rank(), 0), f, {f.seq}, {f.heads}, false);
  return example::verdict(comm, sharded, whole, f);
}

int main(int argc, char** argv) {
  return example::main(
      argc, argv, "alltoall_attention", "sequence-sharded attention through head-sharding all_to_alls",
      AttentionFlags{},
      [](CLI::App& app, AttentionFlags& f, int ranks) {
        using command_line::integer;
        app.add_option("--seq", f.seq, "sequence length (positions split over the ranks)")->transform(integer(1));
        app.add_option("--heads", f.heads, "attention heads (split over the ranks)")->transform(integer(1));
        app.add_option("--dh", f.dh, "width of a head")->transform(integer(1));
        example::add_lr(app, f, false);
        example::add_speeds(app, f, ranks);
      },
      [](const mpi::Communicator& comm, const AttentionFlags& f, auto t, auto dev) {
        return compare<decltype(t), decltype(dev)>(comm, f);
      });
}
