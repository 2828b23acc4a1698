// The Megatron-LM tensor-parallel MLP, Y = GeLU(X A + a) B + b, on uneven shards.
//
//   mpirun -n 4 build/examples/megatron_mlp --speeds 1,2,3,4 --steps 20
//
// A is split by columns (Sharded<1>) and B by rows (Sharded<0>), in lengths
// proportional to the ranks' speeds. Megatron's f and g are two transitions:
// f = replicate (I -> R: nothing forward, an all-reduce backward) and
// g = all_reduce<Invariant> (P -> I: an all-reduce forward, nothing backward).
// Both backward passes are derived; none is written here.
//
// It trains a student on a fixed random teacher with SGD, printing one line
// per step, then compares the sharded model's output and every gradient with
// the same model run unsharded (on a one-rank communicator, same initial
// weights, same data). It exits non-zero if they differ by more than 1e-10
// (double) or 1e-4 (float), or if the loss did not go down.
#include "support/cli.hpp"

using namespace shardex;

template <class T, class Dev = Host>
struct Mlp {
  Tensor<T, Sharded<1>, Dev> A;  // (hidden, ffn): column-parallel
  Tensor<T, Sharded<0>, Dev> a;  // (ffn)
  Tensor<T, Sharded<0>, Dev> B;  // (ffn, hidden): row-parallel
  Tensor<T, Invariant, Dev> b;   // (hidden): one shared value

  Mlp(const typename Dev::communicator& comm, std::int64_t hidden, std::int64_t ffn, const std::vector<std::int64_t>& lens,
      std::uint64_t seed)
      : A(example::normal<Dev, T, Sharded<1>>(comm, {hidden, ffn}, seed, T(0), T(1 / std::sqrt(double(hidden))), layout_mapping<Sharded<1>>(lens))),
        a(example::normal<Dev, T, Sharded<0>>(comm, {ffn}, seed + 1, T(0), T(0.1), layout_mapping<Sharded<0>>(lens))),
        B(example::normal<Dev, T, Sharded<0>>(comm, {ffn, hidden}, seed + 2, T(0), T(1 / std::sqrt(double(ffn))), layout_mapping<Sharded<0>>(lens))),
        b(example::normal<Dev, T, Invariant>(comm, {hidden}, seed + 3, T(0), T(0.1))) {}

  Mlp& trainable() {
    A.requires_grad(), a.requires_grad(), B.requires_grad(), b.requires_grad();
    return *this;
  }

  // x: (batch, hidden), one value shared by all ranks.
  Tensor<T, Invariant, Dev> operator()(const Tensor<T, Invariant, Dev>& x) const {
    auto h = gelu(add_bias(matmul(replicate(x), A), a));        // f, then S(1): each rank its ffn columns
    return add_bias(all_reduce<Invariant>(matmul(h, B)), b);    // S(1) x S(0) -> P, then g: P -> I
  }
};

template <class T, class Dev>
example::Run<T> train(const typename Dev::communicator& comm, const example::Flags& f, const std::vector<std::int64_t>& lens, bool report) {
  const std::int64_t batch = f.integer("batch"), hidden = f.integer("hidden"), ffn = f.integer("ffn");
  const auto seed = static_cast<std::uint64_t>(f.integer("seed"));
  const Mlp<T, Dev> teacher(comm, hidden, ffn, lens, seed + 100);
  Mlp<T, Dev> model = Mlp<T, Dev>(comm, hidden, ffn, lens, seed).trainable();
  example::Run<T> run;
  const std::int64_t steps = f.integer("steps");
  const double lr = example::learning_rate(f, 1.6);  // --lr auto: 1.6 / hidden (0.05 at the default width)
  for (std::int64_t step = 0; step < steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    auto x = example::normal<Dev, T, Invariant>(comm, {batch, hidden}, seed + 1000 + std::uint64_t(step % f.integer("batches")));
    Tensor<T, Invariant, Dev> target = teacher(x);
    Tensor<T, Invariant, Dev> y = model(x);
    auto d = y - target;
    Tensor<T, Invariant, Dev> loss = sum(d * d) / double(2 * batch);
    backward(loss);
    run.losses.push_back(example::value(loss));
    example::check_finite_loss(run.losses.back(), step, lr);
    if (step + 1 == steps) {  // keep the last step's output and gradients, gathered whole
      run.last = {{"output", example::on_host(y)},
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
int compare(const mpi::Communicator& comm, const example::Flags& f) {
  const auto w = example::speeds<Dev, T>(comm, f, GemmShape::plain(f.integer("batch"), f.integer("hidden"), f.integer("ffn")));
  const auto lens = example::split(f.integer("ffn"), w);
  if (comm.rank() == 0)
    std::cout << "megatron_mlp: " << comm.size() << " ranks, ffn lengths " << to_string(lens) << ", " << dtype_name<T>() << "\n";
  const auto sharded = train<T, Dev>(example::device_comm<Dev>(comm), f, lens, true);
  // The same model unsharded: every rank runs it alone, on a one-rank communicator.
  const auto whole = train<T, Host>(comm.split(comm.rank(), 0), f, {f.integer("ffn")}, false);
  return example::verdict(comm, sharded, whole, f);
}

int main(int argc, char** argv) {
  return example::main(argc, argv, "megatron_mlp: Megatron's tensor-parallel MLP on uneven shards",
                       {{"batch", "16"}, {"hidden", "32"}, {"ffn", "64"}, {"steps", "20"}, {"batches", "4"}, {"lr", "auto"}, {"seed", "1"},
                        {"dtype", "double"}, {"speeds", ""}},
                       [](const mpi::Communicator& comm, const example::Flags& f, auto t, auto dev) { return compare<decltype(t), decltype(dev)>(comm, f); });
}
