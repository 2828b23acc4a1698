// SPDX-License-Identifier: MIT
// The Megatron MLP, Y = GeLU(X A + a) B + b, on a data x tensor-parallel mesh.
//
//   mpirun -n 4 build/examples/dp_tp_mlp                # a 2 x 2 mesh
//   mpirun -n 6 build/examples/dp_tp_mlp --mesh 3x2     # 3 data-parallel groups of 2
//
// The batch is split over the dp axis and the ffn dim over the tp axis, both
// unevenly by default (lengths proportional to 1, 2, ... along each axis, as
// on groups of unequal GPUs; --dp-speeds / --tp-speeds choose). Each tensor's
// type says its layout on both axes:
//
//   x, target  (dp: S(0), tp: I)   a batch slice per dp group, shared by its tp ranks
//   A          (dp: I,    tp: S(1)) column-parallel, one value for all dp groups
//   a, B       (dp: I,    tp: S(0)) row-parallel
//   b          (dp: I,    tp: I)
//
// Megatron's f and g are replicate<tp> and all_reduce<tp, Invariant>; the
// parameters are used through replicate<dp>, whose derived backward is the
// all-reduce of their gradients over dp: the DDP all-reduce, written by nobody.
// --explain 1 prints the plan of one training step, with the axis of every step.
// --save PATH writes the parameters and the step count at the end (one
// safetensors file); --resume PATH continues from one written on any mesh.
//
// It trains a student on a fixed random teacher with SGD and compares the
// output and every gradient with the same model on a 1 x 1 mesh (one rank,
// same initial weights, same data): non-zero exit beyond 1e-10 (double) or
// 1e-4 (float), or if the loss did not go down.
#include <shardex/io/safetensors.hpp>
#include <shardex/mesh.hpp>

#include "support/cli.hpp"

using namespace shardex;

using dp = axis<"dp">;
using tp = axis<"tp">;

struct MeshFlags : example::Flags {
  std::int64_t batch = 24, hidden = 32, ffn = 64, explain = 0;
  std::string mesh, dp_speeds, tp_speeds, save, resume;
};

template <class Dev>
using MeshOf = DeviceMesh<Dev, dp, tp>;
template <class T, class Dev, LayoutTag Ldp, LayoutTag Ltp>
using MT = MeshTensor<T, MeshOf<Dev>, per_axis<Ldp, Ltp>>;

/// Normal numbers drawn on the host (the numbers an unsharded run draws for
/// the same global indices), then moved to the mesh's device.
template <class T, class Dev, class Ls>
MeshTensor<T, MeshOf<Dev>, Ls> normal(const MeshOf<Host>& host, const MeshOf<Dev>& mesh, const Shape& global,
                                      std::uint64_t seed, T stddev, typename Ls::mappings ms = {}) {
  const auto h = MeshTensor<T, MeshOf<Host>, Ls>::normal(host, global, seed, T(0), stddev, std::move(ms));
  if constexpr (std::same_as<Dev, Host>)
    return h;
  else
    return to_mesh(h, mesh);
}

/// A parameter of a checkpoint, loaded on the host mesh (in this run's
/// layouts and lengths), then moved to the device's.
template <class T, class Dev, class Ls>
MeshTensor<T, MeshOf<Dev>, Ls> reload(const MeshOf<Host>& host, const MeshOf<Dev>& mesh, const std::string& path,
                                      const std::string& name, typename Ls::mappings ms = {}) {
  const auto h = load<T, Ls>(host, path, name, std::move(ms));
  if constexpr (std::same_as<Dev, Host>)
    return h;
  else
    return to_mesh(h, mesh);
}

template <class T, class Dev>
struct Mlp {
  MT<T, Dev, Invariant, Sharded<1>> A;  // (hidden, ffn)
  MT<T, Dev, Invariant, Sharded<0>> a;  // (ffn)
  MT<T, Dev, Invariant, Sharded<0>> B;  // (ffn, hidden)
  MT<T, Dev, Invariant, Invariant> b;   // (hidden)

  Mlp(const MeshOf<Host>& host, const MeshOf<Dev>& mesh, std::int64_t hidden, std::int64_t ffn,
      const std::vector<std::int64_t>& lens, std::uint64_t seed)
      : A(normal<T, Dev, per_axis<Invariant, Sharded<1>>>(host, mesh, {hidden, ffn}, seed,
                                                          T(1 / std::sqrt(double(hidden))), {{}, lens})),
        a(normal<T, Dev, per_axis<Invariant, Sharded<0>>>(host, mesh, {ffn}, seed + 1, T(0.1), {{}, lens})),
        B(normal<T, Dev, per_axis<Invariant, Sharded<0>>>(host, mesh, {ffn, hidden}, seed + 2,
                                                          T(1 / std::sqrt(double(ffn))), {{}, lens})),
        b(normal<T, Dev, per_axis<Invariant, Invariant>>(host, mesh, {hidden}, seed + 3, T(0.1))) {}

  Mlp& trainable() {
    A.requires_grad(), a.requires_grad(), B.requires_grad(), b.requires_grad();
    return *this;
  }

  // x: (batch, hidden), (dp: S(0), tp: I).
  MT<T, Dev, Sharded<0>, Invariant> operator()(const MT<T, Dev, Sharded<0>, Invariant>& x) const {
    auto h = gelu(add_bias(matmul(replicate<tp>(x), replicate<dp>(A)), replicate<dp>(a)));  // (dp: S(0), tp: S(1))
    return add_bias(all_reduce<tp, Invariant>(matmul(h, replicate<dp>(B))),
                    replicate<dp>(b));  // (S(0), P) -> (S(0), I)
  }
};

/// A mesh tensor's logical value as a host tensor (for the comparison).
template <class T, class X>
Tensor<T, Invariant> gathered(const mpi::Communicator& self, const X& x) {
  const auto v = to_global(x);
  return Tensor<T, Invariant>::from_local(self, x.shape(), std::span<const T>(v));
}

template <class T, class Dev>
example::Run<T> train(const MeshOf<Host>& host, const MeshOf<Dev>& mesh, const MeshFlags& f,
                      const std::vector<std::int64_t>& batch_lens, const std::vector<std::int64_t>& ffn_lens,
                      bool report) {
  const std::int64_t batch = f.batch, hidden = f.hidden, ffn = f.ffn;
  const auto seed = static_cast<std::uint64_t>(f.seed);
  const auto self = mesh.world().split(mesh.world().rank(), 0);
  const Mlp<T, Dev> teacher(host, mesh, hidden, ffn, ffn_lens, seed + 100);
  Mlp<T, Dev> model = Mlp<T, Dev>(host, mesh, hidden, ffn, ffn_lens, seed).trainable();
  example::Run<T> run;
  const std::int64_t steps = f.steps;
  const double lr = example::learning_rate(f, 1.6, hidden);
  std::int64_t first = 0;
  if (const std::string& path = f.resume; !path.empty()) {  // any mesh shape and lengths wrote it
    model.A = reload<T, Dev, per_axis<Invariant, Sharded<1>>>(host, mesh, path, "A", {{}, ffn_lens});
    model.a = reload<T, Dev, per_axis<Invariant, Sharded<0>>>(host, mesh, path, "a", {{}, ffn_lens});
    model.B = reload<T, Dev, per_axis<Invariant, Sharded<0>>>(host, mesh, path, "B", {{}, ffn_lens});
    model.b = reload<T, Dev, per_axis<Invariant, Invariant>>(host, mesh, path, "b");
    model.trainable();
    const auto meta = read_metadata(host.world(), path);
    first = meta.contains("step") ? std::stoll(meta.at("step")) : 0;
  }
  for (std::int64_t step = first; step < first + steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto x = normal<T, Dev, per_axis<Sharded<0>, Invariant>>(
        host, mesh, {batch, hidden}, seed + 1000 + std::uint64_t(step % f.batches), T(1), {batch_lens, {}});
    const auto target = teacher(x);
    MT<T, Dev, Sharded<0>, Invariant> y;
    MT<T, Dev, Invariant, Invariant> loss;
    const Plan plan = explain_step([&] {
      y = model(x);
      const auto d = y - target;
      loss = all_reduce<dp, Invariant>(sum(d * d) / double(2 * batch));
      backward(loss);
    });
    if (report && step == first && f.explain != 0 && mesh.world().rank() == 0)
      std::cout << "one training step on rank 0 of the " << mesh.str() << ":\n"
                << plan.str() << "backward (derived):\n"
                << Plan{plan.backward, {}, {}}.str();
    run.losses.push_back(to_global(loss)[0]);
    example::check_finite_loss(run.losses.back(), step, lr);
    if (step + 1 == first + steps)
      run.last = {{"output", gathered<T>(self, y)},
                  {"dA", gathered<T>(self, model.A.grad())},
                  {"da", gathered<T>(self, model.a.grad())},
                  {"dB", gathered<T>(self, model.B.grad())},
                  {"db", gathered<T>(self, model.b.grad())}};
    sgd_step(lr, model.A, model.a, model.B, model.b);
    example::end_step(mesh.world(), run, step - first, t0, report);
  }
  if (const std::string& path = f.save; report && !path.empty())
    save(path, TensorList()
                   .add("A", model.A)
                   .add("a", model.a)
                   .add("B", model.B)
                   .add("b", model.b)
                   .metadata("step", std::to_string(first + steps)));
  return run;
}

/// --dp-speeds / --tp-speeds: one weight per rank of the axis ("1,2"); empty: 1, 2, ..., n.
std::vector<std::int64_t> axis_lengths(const std::string& given, std::int64_t total, int n) {
  std::vector<double> w = command_line::weights(given);  // main's callback checked them
  if (w.empty())
    for (int k = 0; k < n; ++k) w.push_back(k + 1);
  return example::split(total, w);
}

template <class T, class Dev>
int compare(const mpi::Communicator& comm, const MeshFlags& f) {
  const auto shape = example::mesh_shape(f.mesh, comm.size());
  // Collective: every rank refuses a shape that does not fit the world.
  const MeshOf<Host> host = [&] {
    try {
      return MeshOf<Host>(comm, shape);
    } catch (const shardex::invalid_argument& e) {
      throw example::refused("--mesh " + std::to_string(shape[0]) + "x" + std::to_string(shape[1]) + ": " + e.what());
    }
  }();
  const MeshOf<Dev> mesh = [&] {
    if constexpr (std::same_as<Dev, Host>)
      return host;
    else
      return MeshOf<Dev>(comm, shape);
  }();
  const auto batch_lens = axis_lengths(f.dp_speeds, f.batch, shape[0]);
  const auto ffn_lens = axis_lengths(f.tp_speeds, f.ffn, shape[1]);
  if (comm.rank() == 0)
    std::cout << "dp_tp_mlp: " << shape[0] << " x " << shape[1] << " mesh (dp, tp), batch lengths "
              << to_string(batch_lens) << " over dp, ffn lengths " << to_string(ffn_lens) << " over tp, "
              << dtype_name<T>() << "\n";
  const auto sharded = train<T, Dev>(host, mesh, f, batch_lens, ffn_lens, true);
  // The same model unsharded: every rank runs it alone, on a 1 x 1 mesh.
  const MeshOf<Host> one(comm.split(comm.rank(), 0), {1, 1});
  const auto whole = train<T, Host>(one, one, f, {f.batch}, {f.ffn}, false);
  return example::verdict(comm, sharded, whole, f);
}

int main(int argc, char** argv) {
  return example::main(
      argc, argv, "dp_tp_mlp", "the Megatron MLP on a data x tensor-parallel mesh, uneven on both axes", MeshFlags{},
      [](CLI::App& app, MeshFlags& f, int ranks) {
        using command_line::integer;
        app.add_option("--batch", f.batch, "rows of a batch (split over dp)")->transform(integer(1));
        app.add_option("--hidden", f.hidden, "width of the model")->transform(integer(1));
        app.add_option("--ffn", f.ffn, "width of the hidden layer (split over tp)")->transform(integer(1));
        example::add_lr(app, f, true);
        app.add_option("--mesh", f.mesh, "the mesh shape, dp x tp ranks; empty: the squarest")
            ->check(CLI::Validator(example::check_mesh, "DPxTP", "MESH"));
        const auto weights = CLI::Validator(
            [](const std::string& s) { return s.empty() ? std::string() : command_line::check_weights(s, 0); },
            "W,W,...", "WEIGHTS");
        app.add_option("--dp-speeds", f.dp_speeds, "relative speeds of the dp groups; empty: 1,2,...")->check(weights);
        app.add_option("--tp-speeds", f.tp_speeds, "relative speeds of the ranks of a tp group; empty: 1,2,...")
            ->check(weights);
        app.add_option("--explain", f.explain, "1: print the plan of one training step")->transform(integer(0, 1));
        app.add_option("--save", f.save, "write the parameters and the step count here at the end");
        app.add_option("--resume", f.resume, "continue from a file --save wrote (on any mesh)");
        app.callback([&f, ranks] {
          if (!f.resume.empty() && f.resume == f.save)
            throw CLI::ValidationError(
                "--save and --resume name the same file: the sharded run would overwrite it "
                "before the unsharded run resumes from it");
          const auto shape = example::mesh_shape(f.mesh, ranks);
          const auto count = [](const std::string& given, const char* flag, int n) {
            if (given.empty()) return;
            if (const std::string why = command_line::check_weights(given, static_cast<std::size_t>(n)); !why.empty())
              throw CLI::ValidationError(flag, why + " of the axis");
          };
          count(f.dp_speeds, "--dp-speeds", shape[0]);
          count(f.tp_speeds, "--tp-speeds", shape[1]);
        });
      },
      [](const mpi::Communicator& comm, const MeshFlags& f, auto t, auto dev) {
        return compare<decltype(t), decltype(dev)>(comm, f);
      });
}
