// SPDX-License-Identifier: MIT
// The C++ side of the comparison with PyTorch's autograd (check_layers_torch.py):
//   layers_torch PATH   runs every layer of nn/ on uneven shards (a rank with
//                       nothing among them from 3 ranks on), in double, and
//                       saves into PATH (safetensors) the inputs, the results
//                       and every gradient, as global tensors; then five AdamW
//                       steps under a WarmupCosine schedule and the parameters
//                       after each. Python recomputes all of it with torch.
// Token ids are saved as float64 (the safetensors writer takes floats); the
// script turns them back into integers.
#include <cstdint>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include <shardex.hpp>
#include <shardex/autodiff/adam.hpp>
#include <shardex/autodiff/lr_schedule.hpp>
#include <shardex/io/safetensors.hpp>

using namespace shardex;

namespace {

using Lens = std::vector<std::int64_t>;

/// n lengths summing to `total`: rank 0 holds nothing from 3 ranks on, the rest uneven.
Lens uneven(std::int64_t total, int n) {
  Lens ls(static_cast<std::size_t>(n), 0);
  const int first = n >= 3 ? 1 : 0;
  std::int64_t left = total;
  for (int r = first; r < n; ++r) {
    const std::int64_t share = r == n - 1 ? left : (total + r) / (n - first) - (r % 2);
    ls[static_cast<std::size_t>(r)] = std::max<std::int64_t>(0, std::min(share, left));
    left -= ls[static_cast<std::size_t>(r)];
  }
  return ls;
}

/// A smooth value at a global index, distinct per salt.
double value(std::span<const std::int64_t> idx, int salt) {
  std::int64_t k = salt;
  for (auto i : idx) k = k * 131 + i;
  return std::sin(0.37 * static_cast<double>(k)) * 0.5;
}

template <class L>
Tensor<double, L> make(const mpi::Communicator& comm, const Shape& g, int salt, const Lens& ls = {}) {
  const auto f = [salt](std::span<const std::int64_t> i) { return value(i, salt); };
  if constexpr (is_sharded_v<L>)
    return Tensor<double, L>::from_function(comm, g, f, layout_mapping<L>(ls));
  else
    return Tensor<double, L>::from_function(comm, g, f);
}

/// Ids as float64 for the file.
Tensor<double, Invariant> as_double(const mpi::Communicator& comm, const std::vector<std::int64_t>& ids) {
  return Tensor<double, Invariant>::from_function(comm, {static_cast<std::int64_t>(ids.size())},
                                                  [&](std::span<const std::int64_t> i) { return double(ids[i[0]]); });
}

}  // namespace

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  const auto comm = mpi::Communicator::world();
  if (argc != 2) {
    std::cerr << "usage: layers_torch PATH\n";
    return 2;
  }
  const int n = comm.size();
  const std::int64_t B = 2, S = 4, tokens = B * S, C = 6, V = 11;
  TensorList out;

  // Embedding: a vocab-parallel table, all-reduced.
  const std::vector<std::int64_t> ids = {3, 10, 0, 3, 7, 10, 5, 1};
  auto table = make<Sharded<0>>(comm, {V, C}, 1, uneven(V, n));
  table.requires_grad();
  const auto we = make<Invariant>(comm, {tokens, C}, 2);
  Tensor<double, Invariant> emb =
      all_reduce<Invariant>(embedding(Tensor<std::int64_t, Invariant>::from_local(comm, {tokens}, ids), table));
  backward(Tensor<double, Invariant>(sum(emb * we)));
  out.add("emb.ids", as_double(comm, ids)).add("emb.table", table).add("emb.g", we).add("emb.y", emb);
  out.add("emb.dtable", table.grad());

  // Layer norm and RMS norm under sequence parallelism (the tokens split).
  for (bool rms : {false, true}) {
    const std::string k = rms ? "rms." : "ln.";
    auto x = make<Sharded<0>>(comm, {tokens, C}, 3, uneven(tokens, n));
    auto w = make<Invariant>(comm, {C}, 4), b = make<Invariant>(comm, {C}, 5);
    x.requires_grad(), w.requires_grad(), b.requires_grad();
    const auto g = make<Sharded<0>>(comm, {tokens, C}, 6, uneven(tokens, n));
    Tensor<double, Sharded<0>> y = rms ? Tensor<double, Sharded<0>>(rms_norm(x, replicate(w), 1e-5))
                                       : Tensor<double, Sharded<0>>(layer_norm(x, replicate(w), replicate(b), 1e-5));
    backward(Tensor<double, Partial>(sum(y * g)));
    out.add(k + "x", x).add(k + "w", w).add(k + "g", g).add(k + "y", y).add(k + "dx", x.grad()).add(k + "dw", w.grad());
    if (!rms) out.add(k + "b", b).add(k + "db", b.grad());
  }

  // Causal attention: 6 query heads, 3 KV heads (groups of 2), the heads split unevenly.
  {
    const std::int64_t Hk = 3, Hq = 6, dh = 2;
    const Lens kv = uneven(Hk, n);
    Lens ql;
    for (auto l : kv) ql.push_back(2 * l);
    auto q = make<Sharded<2>>(comm, {B, S, Hq, dh}, 7, ql), k = make<Sharded<2>>(comm, {B, S, Hk, dh}, 8, kv),
         v = make<Sharded<2>>(comm, {B, S, Hk, dh}, 9, kv);
    q.requires_grad(), k.requires_grad(), v.requires_grad();
    const auto g = make<Sharded<2>>(comm, {B, S, Hq, dh}, 10, ql);
    Tensor<double, Sharded<2>> y = causal_attention(q, k, v);
    backward(Tensor<double, Partial>(sum(y * g)));
    out.add("att.q", q).add("att.k", k).add("att.v", v).add("att.g", g).add("att.y", y);
    out.add("att.dq", q.grad()).add("att.dk", k.grad()).add("att.dv", v.grad());
  }

  // Cross-entropy: vocab-parallel logits, one ignored target, the mean.
  {
    const std::vector<std::int64_t> targets = {1, 10, -100, 4, 0, 7, 10, 2};
    auto logits = make<Sharded<1>>(comm, {tokens, V}, 11, uneven(V, n));
    logits.requires_grad();
    Tensor<double, Invariant> loss =
        cross_entropy(logits, Tensor<std::int64_t, Invariant>::from_local(comm, {tokens}, targets));
    backward(loss);
    out.add("ce.logits", logits).add("ce.targets", as_double(comm, targets)).add("ce.loss", loss);
    out.add("ce.dlogits", logits.grad());
  }

  // AdamW under WarmupCosine: a sharded weight (decayed) and a bias (not), the
  // gradient of sum(w * w * c) + sum(b * c2) at each step.
  {
    auto w = make<Sharded<0>>(comm, {7}, 12, uneven(7, n));
    auto b = make<Invariant>(comm, {3}, 13);
    w.requires_grad(), b.requires_grad();
    const auto c = make<Sharded<0>>(comm, {7}, 14, uneven(7, n));
    const auto c2 = make<Invariant>(comm, {3}, 15);
    out.add("adam.w0", w.clone()).add("adam.b0", b.clone()).add("adam.c", c).add("adam.c2", c2);
    const AdamOptions o{.lr = 0, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.3};
    const WarmupCosine schedule{.peak = 0.05, .floor = 0.005, .warmup = 2, .total = 5};
    Adam adam(o, w, no_weight_decay(b));
    for (int step = 0; step < 5; ++step) {
      Tensor<double, Partial> lw = sum(w * w * c);
      backward(lw);
      Tensor<double, Invariant> lb = sum(b * c2);
      backward(lb);
      adam.set_lr(schedule(adam.steps()));
      adam.step(w, b);
      out.add("adam.w" + std::to_string(step + 1), w.clone()).add("adam.b" + std::to_string(step + 1), b.clone());
    }
  }
  save(argv[1], std::move(out));
  if (comm.rank() == 0) std::cout << "layers_torch: saved " << argv[1] << " from " << n << " ranks\n";
  return 0;
}
