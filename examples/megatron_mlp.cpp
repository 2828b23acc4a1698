// SPDX-License-Identifier: MIT
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
//
// --optimizer adam trains with Adam instead (its moments sharded like the
// parameters). --save PATH writes the parameters, the optimizer's state and the
// step count into one safetensors file at the end; --resume PATH continues from
// one, at any world size and speeds (the unsharded run resumes from it too):
//   mpirun -n 4 build/examples/megatron_mlp --optimizer adam --steps 5 --save half.safetensors
//   mpirun -n 3 build/examples/megatron_mlp --optimizer adam --steps 5 --resume half.safetensors
//
// --clip MAX clips the gradients to norm MAX after each backward
// (clip_grad_norm: the norm of the logical gradients, the Invariant b counted
// once), printing the norm; the unsharded run clips the same way, so the
// comparison checks the clipped gradients too.
#include <optional>

#include <shardex/autodiff/adam.hpp>
#include <shardex/io/safetensors.hpp>

#include "support/cli.hpp"

using namespace shardex;

struct MlpFlags : example::Flags {
  std::int64_t batch = 16, hidden = 32, ffn = 64;
  std::string optimizer = "sgd", save, resume;
  double clip = 0;
};

template <class T, class Dev = Host>
struct Mlp {
  Tensor<T, Sharded<1>, Dev> A;  // (hidden, ffn): column-parallel
  Tensor<T, Sharded<0>, Dev> a;  // (ffn)
  Tensor<T, Sharded<0>, Dev> B;  // (ffn, hidden): row-parallel
  Tensor<T, Invariant, Dev> b;   // (hidden): one shared value

  Mlp(const typename Dev::communicator& comm, std::int64_t hidden, std::int64_t ffn,
      const std::vector<std::int64_t>& lens, std::uint64_t seed)
      : A(example::normal<Dev, T, Sharded<1>>(comm, {hidden, ffn}, seed, T(0), T(1 / std::sqrt(double(hidden))),
                                              layout_mapping<Sharded<1>>(lens))),
        a(example::normal<Dev, T, Sharded<0>>(comm, {ffn}, seed + 1, T(0), T(0.1), layout_mapping<Sharded<0>>(lens))),
        B(example::normal<Dev, T, Sharded<0>>(comm, {ffn, hidden}, seed + 2, T(0), T(1 / std::sqrt(double(ffn))),
                                              layout_mapping<Sharded<0>>(lens))),
        b(example::normal<Dev, T, Invariant>(comm, {hidden}, seed + 3, T(0), T(0.1))) {}

  Mlp& trainable() {
    A.requires_grad(), a.requires_grad(), B.requires_grad(), b.requires_grad();
    return *this;
  }

  // x: (batch, hidden), one value shared by all ranks.
  Tensor<T, Invariant, Dev> operator()(const Tensor<T, Invariant, Dev>& x) const {
    auto h = gelu(add_bias(matmul(replicate(x), A), a));      // f, then S(1): each rank its ffn columns
    return add_bias(all_reduce<Invariant>(matmul(h, B)), b);  // S(1) x S(0) -> P, then g: P -> I
  }
};

/// --save / --resume: the parameters, Adam's moments (sharded like them) and
/// the step count, in one safetensors file any world size can load.
template <class T, class Dev, class Opt>
void save_state(const std::string& path, const Mlp<T, Dev>& m, Opt* adam, std::int64_t step) {
  TensorList list;
  list.add("A", m.A).add("a", m.a).add("B", m.B).add("b", m.b).metadata("step", std::to_string(step));
  if (adam) {
    const auto& [mA, ma, mB, mb] = adam->first_moments();
    const auto& [vA, va, vB, vb] = adam->second_moments();
    list.add("adam.m.A", mA).add("adam.m.a", ma).add("adam.m.B", mB).add("adam.m.b", mb);
    list.add("adam.v.A", vA).add("adam.v.a", va).add("adam.v.B", vB).add("adam.v.b", vb);
    list.metadata("adam.steps", std::to_string(adam->steps()));
  }
  save(path, std::move(list));
}

/// Loads what save_state wrote into this run's layouts and lengths; returns the step to continue from.
template <class T, class Dev, class Opt>
std::int64_t resume_state(const std::string& path, Mlp<T, Dev>& m, Opt* adam) {
  load_into(m.A, path, "A"), load_into(m.a, path, "a"), load_into(m.B, path, "B"), load_into(m.b, path, "b");
  const auto meta = read_metadata(detail::control_of(m.A.comm()), path);
  if (adam) {
    if (!meta.contains("adam.steps"))
      throw example::usage_error("--resume " + path +
                                 ": the file holds no Adam state (it was saved with --optimizer sgd)");
    auto& [mA, ma, mB, mb] = adam->first_moments();
    auto& [vA, va, vB, vb] = adam->second_moments();
    load_into(mA, path, "adam.m.A"), load_into(ma, path, "adam.m.a"), load_into(mB, path, "adam.m.B"),
        load_into(mb, path, "adam.m.b");
    load_into(vA, path, "adam.v.A"), load_into(va, path, "adam.v.a"), load_into(vB, path, "adam.v.B"),
        load_into(vb, path, "adam.v.b");
    adam->set_steps(std::stoll(meta.at("adam.steps")));
  }
  return meta.contains("step") ? std::stoll(meta.at("step")) : 0;
}

template <class T, class Dev>
example::Run<T> train(const typename Dev::communicator& comm, const MlpFlags& f, const std::vector<std::int64_t>& lens,
                      bool report) {
  const std::int64_t batch = f.batch, hidden = f.hidden, ffn = f.ffn;
  const auto seed = static_cast<std::uint64_t>(f.seed);
  const Mlp<T, Dev> teacher(comm, hidden, ffn, lens, seed + 100);
  Mlp<T, Dev> model = Mlp<T, Dev>(comm, hidden, ffn, lens, seed).trainable();
  example::Run<T> run;
  const std::int64_t steps = f.steps;
  const bool use_adam = f.optimizer == "adam";
  // --lr auto: 1.6 / hidden for SGD (0.05 at the default width), 0.32 / hidden for Adam.
  const double lr = example::learning_rate(f, use_adam ? 0.32 : 1.6, hidden);
  // Adam's moments live on the parameters' device; a checkpoint of device tensors goes through the host.
  using Opt = Adam<decltype(model.A), decltype(model.a), decltype(model.B), decltype(model.b)>;
  std::optional<Opt> adam;
  if (use_adam) adam.emplace(AdamOptions{.lr = lr}, model.A, model.a, model.B, model.b);
  Opt* opt = adam ? &*adam : nullptr;
  std::int64_t first = 0;
  if (!f.resume.empty()) first = resume_state(f.resume, model, opt);
  for (std::int64_t step = first; step < first + steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    auto x = example::normal<Dev, T, Invariant>(comm, {batch, hidden}, seed + 1000 + std::uint64_t(step % f.batches));
    Tensor<T, Invariant, Dev> target = teacher(x);
    Tensor<T, Invariant, Dev> y = model(x);
    auto d = y - target;
    Tensor<T, Invariant, Dev> loss = sum(d * d) / double(2 * batch);
    backward(loss);
    // --clip: the norm of the logical gradients (b, Invariant, counted once), every gradient scaled alike.
    if (const double clip = f.clip; clip > 0)
      run.grad_norms.push_back(clip_grad_norm(clip, model.A, model.a, model.B, model.b));
    run.losses.push_back(example::value(loss));
    example::check_finite_loss(run.losses.back(), step, lr);
    if (step + 1 == first + steps) {  // keep the last step's output and gradients, gathered whole
      run.last = {{"output", example::on_host(y)},
                  {"dA", example::on_host(eager::all_gather<Invariant>(model.A.grad()))},
                  {"da", example::on_host(eager::all_gather<Invariant>(model.a.grad()))},
                  {"dB", example::on_host(eager::all_gather<Invariant>(model.B.grad()))},
                  {"db", example::on_host(model.b.grad())}};
    }
    if (adam)
      adam->step(model.A, model.a, model.B, model.b);
    else
      sgd_step(lr, model.A, model.a, model.B, model.b);
    example::end_step(comm, run, step - first, t0, report);
  }
  if (report && !f.save.empty()) save_state(f.save, model, opt, first + steps);
  return run;
}

template <class T, class Dev>
int compare(const mpi::Communicator& comm, const MlpFlags& f) {
  const auto w = example::speeds<Dev, T>(comm, f, GemmShape::plain(f.batch, f.hidden, f.ffn));
  const auto lens = example::split(f.ffn, w);
  if (comm.rank() == 0)
    std::cout << "megatron_mlp: " << comm.size() << " ranks, ffn lengths " << to_string(lens) << ", " << dtype_name<T>()
              << "\n";
  const auto sharded = train<T, Dev>(example::device_comm<Dev>(comm), f, lens, true);
  // The same model unsharded: every rank runs it alone, on a one-rank communicator.
  const auto whole = train<T, Host>(comm.split(comm.rank(), 0), f, {f.ffn}, false);
  return example::verdict(comm, sharded, whole, f);
}

int main(int argc, char** argv) {
  return example::main(
      argc, argv, "megatron_mlp", "Megatron's tensor-parallel MLP on uneven shards", MlpFlags{},
      [](CLI::App& app, MlpFlags& f, int ranks) {
        using command_line::integer;
        app.add_option("--batch", f.batch, "rows of a batch")->transform(integer(1));
        app.add_option("--hidden", f.hidden, "width of the model")->transform(integer(1));
        app.add_option("--ffn", f.ffn, "width of the hidden layer (split over the ranks)")->transform(integer(1));
        example::add_lr(app, f, true);
        example::add_speeds(app, f, ranks);
        app.add_option("--optimizer", f.optimizer, "sgd or adam (Adam's moments sharded like the parameters)")
            ->check(CLI::IsMember({"sgd", "adam"}));
        app.add_option("--save", f.save,
                       "write the parameters, the optimizer's state and the step count here at the end");
        app.add_option("--resume", f.resume, "continue from a file --save wrote (at any world size and speeds)");
        app.add_option("--clip", f.clip, "clip the gradients to this norm after each backward (0: no clipping)")
            ->check(command_line::real(0, false));
        app.callback([&f] {
          if (!f.resume.empty() && f.resume == f.save)
            throw CLI::ValidationError(
                "--save and --resume name the same file: the sharded run would overwrite it "
                "before the unsharded run resumes from it");
        });
      },
      [](const mpi::Communicator& comm, const MlpFlags& f, auto t, auto dev) {
        return compare<decltype(t), decltype(dev)>(comm, f);
      });
}
