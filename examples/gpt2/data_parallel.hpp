// SPDX-License-Identifier: MIT
// Data parallelism for GPT-2 on a Mesh<dp, tp> (gpt2 --mesh DPxTP): each dp
// group holds the whole tensor-parallel model (a Model on its tp
// communicator) and takes its own sequences of every batch.
//
//   weights   (dp: I, tp: their layout)    one value for every dp group
//   used as   replicate<dp>(weight)         (dp: R): no data moved forward;
//                                           its derived adjoint all-reduces
//                                           the gradient over dp
//   loss      all_reduce<dp, I>(group's)    the groups' pieces, each its
//                                           tokens' sum over all B x T tokens
//
// Nothing here sums a gradient: the dp all-reduce of every weight's gradient
// is the adjoint of replicate<dp> that the reverse pass runs (mesh/training.hpp).
// With one dp group there is nothing to replicate or sum, and the model's own
// loss is the step's.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <shardex.hpp>
#include <shardex/mesh.hpp>

#include "data.hpp"
#include "model.hpp"

namespace gpt2 {

using dp = shardex::axis<"dp">;
using tp = shardex::axis<"tp">;
template <class Dev>
using MeshOf = shardex::DeviceMesh<Dev, dp, tp>;

/// The sequences of a batch of `batch` each of `groups` dp groups takes: as
/// even as can be (5 over 2: 3, 2).
inline std::vector<std::int64_t> group_batches(std::int64_t batch, int groups) {
  return shardex::proportional_lengths(batch, std::vector<double>(static_cast<std::size_t>(groups), 1.0));
}

template <class T, class Dev>
class DataParallel {
public:
  using Mesh = MeshOf<Dev>;
  using MeshLoss = shardex::MeshTensor<T, Mesh, shardex::per_axis<Invariant, Invariant>>;

  /// Batches of `batch` sequences of `seq` tokens on `mesh`.
  /// @throws shardex::invalid_argument when a dp group would get no sequence.
  DataParallel(Mesh mesh, std::int64_t batch, std::int64_t seq) : mesh_(std::move(mesh)), seq_(seq), total_(batch) {
    const int groups = mesh_.size(0);
    if (batch < groups)
      throw shardex::invalid_argument("gpt2 --mesh: a batch of " + std::to_string(batch) + " sequences over " +
                                      std::to_string(groups) +
                                      " data-parallel groups leaves a group without a sequence; give --batch " +
                                      std::to_string(groups) + " or more");
    lengths_ = group_batches(batch, groups);
    for (int g = 0; g < mesh_.coord(0); ++g) first_ += lengths_[static_cast<std::size_t>(g)];
  }

  [[nodiscard]] const Mesh& mesh() const noexcept { return mesh_; }
  /// The sequences of every dp group, this group's count and its first sequence.
  [[nodiscard]] const std::vector<std::int64_t>& lengths() const noexcept { return lengths_; }
  [[nodiscard]] std::int64_t batch() const noexcept { return lengths_[static_cast<std::size_t>(mesh_.coord(0))]; }
  [[nodiscard]] std::int64_t first() const noexcept { return first_; }
  [[nodiscard]] bool data_parallel() const { return mesh_.size(0) > 1; }

  /// This group's sequences of a whole batch.
  [[nodiscard]] Batch part(const Batch& b) const {
    const auto from = static_cast<std::ptrdiff_t>(first_ * seq_), n = static_cast<std::ptrdiff_t>(batch() * seq_);
    return {{b.inputs.begin() + from, b.inputs.begin() + from + n},
            {b.targets.begin() + from, b.targets.begin() + from + n}};
  }

  /// One forward pass over a whole batch: this group's logits (its rows of
  /// the batch's), and the batch's mean loss, the same on every rank.
  struct Step {
    Tensor<T, Sharded<1>, Dev> logits;
    Tensor<T, Invariant, Dev> local_loss;  // the loss when there is one dp group
    MeshLoss loss;                         // the loss over the mesh otherwise

    /// The loss as this rank's tensor (Invariant over its tp group), whichever made it.
    [[nodiscard]] const Tensor<T, Invariant, Dev>& loss_tensor() const {
      return loss.valid() ? loss.inner() : local_loss;
    }
    /// The loss's value on the host.
    [[nodiscard]] double value() const { return value_of(loss_tensor()); }
    /// The reverse pass from the loss (on the mesh: the dp all-reduces of
    /// the weights' gradients among its steps).
    void backward() const {
      if (loss.valid())
        shardex::backward(loss);
      else
        shardex::backward(local_loss);
    }
  };

  [[nodiscard]] Step forward(const Model<T, Dev>& model, const Batch& whole) const {
    const auto& comm = model.comm();
    if (!data_parallel()) {
      Step s{model.logits(ids_tensor<Dev>(comm, whole.inputs), total_, seq_), {}, {}};
      s.local_loss = shardex::cross_entropy(s.logits, ids_tensor<Dev>(comm, whole.targets));
      return s;
    }
    const Batch mine = part(whole);
    Step s{used(model).logits(ids_tensor<Dev>(comm, mine.inputs), batch(), seq_), {}, {}};
    // This group's tokens' losses summed over all B x T tokens: a Partial piece of the batch's mean.
    const Tensor<T, Invariant, Dev> piece = shardex::cross_entropy(s.logits, ids_tensor<Dev>(comm, mine.targets),
                                                                   {.reduction = shardex::LossReduction::sum}) *
                                            (1.0 / double(total_ * seq_));
    using Pieces = shardex::MeshTensor<T, Mesh, shardex::per_axis<shardex::Partial, Invariant>>;
    s.loss = shardex::all_reduce<dp, Invariant>(Pieces::assemble(mesh_, piece.shape(), {}, piece));
    return s;
  }

  /// The model with every weight used through replicate<dp> (the same
  /// tensors, no copy): its gradients reach `model`'s weights summed over dp.
  [[nodiscard]] Model<T, Dev> used(const Model<T, Dev>& model) const {
    Model<T, Dev> view = model;
    view.for_each_parameter([&](const std::string&, auto& p) {
      using P = std::remove_cvref_t<decltype(p)>;
      using Weight = shardex::MeshTensor<T, Mesh, shardex::per_axis<Invariant, typename P::layout_type>>;
      using Used = shardex::MeshTensor<T, Mesh, shardex::per_axis<Replicated, typename P::layout_type>>;
      const Used u = shardex::replicate<dp>(
          Weight::assemble(mesh_, p.shape(), typename Weight::mappings_type{{}, p.mapping()}, p));
      p = u.inner();
    });
    return view;
  }

  /// Collective: how many of the model's weights differ, in any bit, from
  /// the first dp group's (0: the groups hold one value, as Invariant on dp says).
  [[nodiscard]] std::int64_t weights_differing(Model<T, Dev>& model) const {
    std::int64_t differ = 0;
    const auto& along = shardex::detail::control_of(mesh_.comm(0));
    model.for_each_parameter([&](const std::string&, auto& p) {
      const auto mine = host_copy(p);
      std::vector<T> first(mine.data(), mine.data() + mine.size());
      along.broadcast(first.data(), static_cast<std::int64_t>(first.size()), 0);
      if (std::memcmp(first.data(), mine.data(), first.size() * sizeof(T)) != 0) ++differ;  // bits: -0 != +0
    });
    mesh_.world().all_reduce_max(&differ, 1);  // a tensor counted once, not once per rank holding it
    return differ;
  }

private:
  Mesh mesh_;
  std::int64_t seq_, total_;
  std::vector<std::int64_t> lengths_;
  std::int64_t first_ = 0;
};

}  // namespace gpt2
