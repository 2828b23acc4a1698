// SPDX-License-Identifier: MIT
// GPT-2 (Hugging Face's GPT2LMHeadModel: pre-LN blocks, learned position
// embeddings, GeLU with tanh, causal attention scaled by 1/sqrt(head_dim), the
// output layer tied to the token embedding, no dropout) with Megatron-style
// tensor parallelism on uneven shards:
//
//   h = all_reduce(embedding(ids, wte)) + embedding(positions, wpe)        wte: vocab rows split
//   each block:
//     a = replicate(layer_norm(h))                                         f: nothing forward
//     q, k, v = a Wq + bq, a Wk + bk, a Wv + bv                            the rank's heads' columns
//     h = h + all_reduce(merge_heads(attention(q, k, v)) Wo) + bo          g: one all-reduce
//     m = replicate(layer_norm(h))
//     h = h + all_reduce(gelu(m Wfc + bfc) Wproj) + bproj                  the rank's MLP columns
//   logits = replicate(layer_norm(h)) wte^T                                 Sharded<1> on the vocabulary
//   loss = cross_entropy(logits, targets)                                   never gathered
//
// The heads, the MLP's columns and the vocabulary rows go over the ranks in the
// lengths of a Split, any of them zero on a rank. Every collective comes from
// a transition (replicate, all_reduce) or from cross_entropy; the backward
// pass is derived from them.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <shardex.hpp>

#include "config.hpp"

namespace gpt2 {

using shardex::Invariant;
using shardex::layout_mapping;
using shardex::Replicated;
using shardex::Sharded;
using shardex::Tensor;

/// One transformer block's parameters, each in its tensor-parallel layout.
template <class T, class Dev>
struct Block {
  Tensor<T, Invariant, Dev> ln1_w, ln1_b;
  Tensor<T, Sharded<1>, Dev> wq, wk, wv;  // (width, width): the rank's heads' columns
  Tensor<T, Sharded<0>, Dev> bq, bk, bv;  // (width)
  Tensor<T, Sharded<0>, Dev> wo;          // (width, width): the rank's heads' rows
  Tensor<T, Invariant, Dev> bo;
  Tensor<T, Invariant, Dev> ln2_w, ln2_b;
  Tensor<T, Sharded<1>, Dev> wfc;    // (width, ffn): the rank's MLP columns
  Tensor<T, Sharded<0>, Dev> bfc;    // (ffn)
  Tensor<T, Sharded<0>, Dev> wproj;  // (ffn, width): the rank's MLP rows
  Tensor<T, Invariant, Dev> bproj;

  /// f(name, tensor) for every parameter, named as in Hugging Face's GPT-2
  /// under "h.<i>." (q, k, v are c_attn's three column blocks).
  template <class F>
  void for_each(const std::string& prefix, F&& f) {
    f(prefix + "ln_1.weight", ln1_w), f(prefix + "ln_1.bias", ln1_b);
    f(prefix + "attn.q.weight", wq), f(prefix + "attn.k.weight", wk), f(prefix + "attn.v.weight", wv);
    f(prefix + "attn.q.bias", bq), f(prefix + "attn.k.bias", bk), f(prefix + "attn.v.bias", bv);
    f(prefix + "attn.c_proj.weight", wo), f(prefix + "attn.c_proj.bias", bo);
    f(prefix + "ln_2.weight", ln2_w), f(prefix + "ln_2.bias", ln2_b);
    f(prefix + "mlp.c_fc.weight", wfc), f(prefix + "mlp.c_fc.bias", bfc);
    f(prefix + "mlp.c_proj.weight", wproj), f(prefix + "mlp.c_proj.bias", bproj);
  }
};

/// A tensor made on the host, on Dev (itself, on the host): the model draws
/// and reads its numbers on the host, so that every device gets the same ones.
template <class Dev, shardex::Element T, shardex::LayoutTag L>
Tensor<T, L, Dev> on_device(Tensor<T, L> host, const typename Dev::communicator& comm) {
  if constexpr (std::same_as<Dev, shardex::Host>)
    return host;
  else
    return shardex::to<Dev>(host, comm);
}

/// A tensor's copy on the host, outside the graph.
template <class T, shardex::LayoutTag L, class Dev>
Tensor<T, L> host_copy(const Tensor<T, L, Dev>& x) {
  if constexpr (std::same_as<Dev, shardex::Host>)
    return x.detach().clone();
  else
    return shardex::to<shardex::Host>(x.detach());
}

/// The value of a one-element tensor (a loss), on the host.
template <class T, shardex::LayoutTag L, class Dev>
double value_of(const Tensor<T, L, Dev>& x) {
  return double(host_copy(x).data()[0]);
}

/// Normal numbers drawn from (seed, global index), so that every world size
/// and split draws the same model.
template <class Dev, class T, shardex::LayoutTag L>
Tensor<T, L, Dev> draw_normal(const typename Dev::communicator& comm, const shardex::Shape& shape, std::uint64_t seed,
                              double stddev, layout_mapping<L> m = {}) {
  return on_device<Dev>(
      Tensor<T, L>::normal(shardex::detail::control_of(comm), shape, seed, T(0), T(stddev), std::move(m)), comm);
}

template <class Dev, class T, shardex::LayoutTag L>
Tensor<T, L, Dev> filled(const typename Dev::communicator& comm, const shardex::Shape& shape, T value,
                         layout_mapping<L> m = {}) {
  return on_device<Dev>(Tensor<T, L>::full(shardex::detail::control_of(comm), shape, value, std::move(m)), comm);
}

template <class T, class Dev = shardex::Host>
class Model {
public:
  using communicator = typename Dev::communicator;
  using Ids = Tensor<std::int64_t, Invariant, Dev>;

  /// GPT-2's initialization (Hugging Face's _init_weights): weights and
  /// embeddings normal(0, 0.02), the residual projections' (attn.c_proj,
  /// mlp.c_proj) 0.02 / sqrt(2 layers), biases 0, norms' weights 1, each
  /// parameter from its own seed so that every split draws the same model.
  /// @throws shardex::invalid_argument for a config or split that does not fit.
  Model(const communicator& comm, const Config& config, const Split& split, std::uint64_t seed)
      : comm_(comm), config_(config), split_(split) {
    config.check();
    split.check(config, comm.size());
    const std::int64_t d = config.width, f = config.ffn();
    const layout_mapping<Sharded<1>> head_cols(split.head_columns(config)), ffn_cols(split.ffn);
    const layout_mapping<Sharded<0>> head_rows(split.head_columns(config)), ffn_rows(split.ffn),
        vocab_rows(split.vocab);
    const double std = 0.02, residual_std = 0.02 / std::sqrt(2.0 * double(config.layers));
    std::uint64_t s = seed;
    wte_ = draw_normal<Dev, T, Sharded<0>>(comm, {config.vocab, d}, s++, std, vocab_rows);
    wpe_ = draw_normal<Dev, T, Invariant>(comm, {config.context, d}, s++, std);
    const auto zeros0 = [&](std::int64_t n, const layout_mapping<Sharded<0>>& m) {
      return filled<Dev, T, Sharded<0>>(comm, {n}, T(0), m);
    };
    const auto ones = [&] { return filled<Dev, T, Invariant>(comm, {d}, T(1)); };
    const auto zeros = [&] { return filled<Dev, T, Invariant>(comm, {d}, T(0)); };
    for (std::int64_t l = 0; l < config.layers; ++l) {
      Block<T, Dev> b{ones(),
                      zeros(),
                      draw_normal<Dev, T, Sharded<1>>(comm, {d, d}, s++, std, head_cols),
                      draw_normal<Dev, T, Sharded<1>>(comm, {d, d}, s++, std, head_cols),
                      draw_normal<Dev, T, Sharded<1>>(comm, {d, d}, s++, std, head_cols),
                      zeros0(d, head_rows),
                      zeros0(d, head_rows),
                      zeros0(d, head_rows),
                      draw_normal<Dev, T, Sharded<0>>(comm, {d, d}, s++, residual_std, head_rows),
                      zeros(),
                      ones(),
                      zeros(),
                      draw_normal<Dev, T, Sharded<1>>(comm, {d, f}, s++, std, ffn_cols),
                      zeros0(f, ffn_rows),
                      draw_normal<Dev, T, Sharded<0>>(comm, {f, d}, s++, residual_std, ffn_rows),
                      zeros()};
      blocks_.push_back(std::move(b));
    }
    lnf_w_ = ones(), lnf_b_ = zeros();
  }

  /// Every parameter asks for its gradient.
  Model& trainable() {
    for_each_parameter([](const std::string&, auto& p) { p.requires_grad(); });
    return *this;
  }

  /// f(name, tensor) for every parameter, in one fixed order, named as in
  /// Hugging Face's GPT-2 (without the "transformer." prefix; the tied
  /// lm_head is wte).
  template <class F>
  void for_each_parameter(F&& f) {
    f("wte.weight", wte_), f("wpe.weight", wpe_);
    for (std::size_t l = 0; l < blocks_.size(); ++l) blocks_[l].for_each("h." + std::to_string(l) + ".", f);
    f("ln_f.weight", lnf_w_), f("ln_f.bias", lnf_b_);
  }

  /// The logits (batch x seq, vocab) of `batch` sequences of `seq` tokens
  /// (ids: batch x seq, the sequences one after another), the vocabulary
  /// split as the Split says.
  /// @throws shardex::invalid_argument for a seq longer than the context or ids of the wrong size.
  Tensor<T, Sharded<1>, Dev> logits(const Ids& ids, std::int64_t batch, std::int64_t seq) const {
    check_tokens(ids, batch, seq);
    if (!sequence_parallel_)
      return through_blocks(Tensor<T, Invariant, Dev>(shardex::all_reduce<Invariant>(shardex::embedding(ids, wte_)) +
                                                      shardex::embedding(positions<Invariant>(batch, seq), wpe_)),
                            batch, {});
    // Sequence parallelism: the residual stream's rows (the batch's tokens)
    // split over the ranks, each rank adding its rows' position embeddings.
    const layout_mapping<Sharded<0>> rows(token_lengths(batch * seq));
    return through_blocks(Tensor<T, Sharded<0>, Dev>(
                              shardex::reduce_scatter<Sharded<0>>(shardex::embedding(ids, wte_), rows) +
                              shardex::embedding(positions<Sharded<0>>(batch, seq, rows), shardex::replicate(wpe_))),
                          batch, rows);
  }

  /// Megatron's sequence parallelism (off by default): the residual stream and
  /// the layer norms sharded along the tokens (in proportion to the MLP's
  /// split, so to the ranks' speeds), an all-gather entering each
  /// tensor-parallel region and a reduce-scatter leaving it instead of the
  /// all-reduce; the same logits and gradients.
  Model& sequence_parallel(bool on) {
    sequence_parallel_ = on;
    return *this;
  }
  [[nodiscard]] bool sequence_parallel() const noexcept { return sequence_parallel_; }

  /// The tokens of each rank under sequence parallelism (Split::tokens).
  [[nodiscard]] std::vector<std::int64_t> token_lengths(std::int64_t n) const { return split_.tokens(n); }

  /// The mean cross-entropy of the next tokens `targets` (batch x seq).
  Tensor<T, Invariant, Dev> loss(const Ids& ids, const Ids& targets, std::int64_t batch, std::int64_t seq) const {
    return shardex::cross_entropy(logits(ids, batch, seq), targets);
  }

  [[nodiscard]] const Config& config() const noexcept { return config_; }
  [[nodiscard]] const Split& split() const noexcept { return split_; }
  [[nodiscard]] const communicator& comm() const noexcept { return comm_; }

private:
  void check_tokens(const Ids& ids, std::int64_t batch, std::int64_t seq) const {
    if (seq < 1 || seq > config_.context)
      throw shardex::invalid_argument("gpt2: a sequence of " + std::to_string(seq) +
                                      " tokens does not fit the context of " + std::to_string(config_.context));
    if (batch < 1 || ids.shape().rank() != 1 || batch > ids.shape()[0] / seq || ids.shape()[0] != batch * seq)
      throw shardex::invalid_argument("gpt2: the ids must be " + std::to_string(batch) + " x " + std::to_string(seq) +
                                      " tokens, but they are " + ids.describe());
  }

  /// The blocks and the output layer from the residual stream h: Invariant
  /// (tensor parallelism) or Sharded<0> on the tokens in `rows` (sequence
  /// parallelism), whose layout picks each region's entry and exit.
  template <shardex::LayoutTag H>
  Tensor<T, Sharded<1>, Dev> through_blocks(Tensor<T, H, Dev> h, std::int64_t batch,
                                            const layout_mapping<Sharded<0>>& rows) const {
    constexpr bool sp = shardex::is_sharded_v<H>;
    const double eps = config_.eps;
    const std::int64_t dh = config_.head_dim();
    // Entering a tensor-parallel region: the whole input on every rank (f: nothing forward; SP: an all-gather).
    const auto enter = [](const Tensor<T, H, Dev>& x) -> Tensor<T, Replicated, Dev> {
      if constexpr (sp)
        return shardex::all_gather(x);
      else
        return shardex::replicate(x);
    };
    // Leaving it: the partial sums of the row-parallel product summed (g: an all-reduce; SP: a reduce-scatter).
    const auto leave = [&](const auto& partial) -> Tensor<T, H, Dev> {  // (&: rows is unused without SP)
      if constexpr (sp)
        return shardex::reduce_scatter<Sharded<0>>(partial, rows);
      else
        return shardex::all_reduce<Invariant>(partial);
    };
    // A norm of sharded rows takes its weights replicated: the adjoint all-reduces their gradients.
    const auto norm = [eps](const Tensor<T, H, Dev>& x, const Tensor<T, Invariant, Dev>& w,
                            const Tensor<T, Invariant, Dev>& b) -> Tensor<T, H, Dev> {
      if constexpr (sp)
        return shardex::layer_norm(x, shardex::replicate(w), shardex::replicate(b), eps);
      else
        return shardex::layer_norm(x, w, b, eps);
    };
    const auto bias = [](const Tensor<T, H, Dev>& x, const Tensor<T, Invariant, Dev>& b) -> Tensor<T, H, Dev> {
      if constexpr (sp)
        return shardex::add_bias(x, shardex::replicate(b));
      else
        return shardex::add_bias(x, b);
    };
    for (const Block<T, Dev>& b : blocks_) {
      const Tensor<T, Replicated, Dev> a = enter(norm(h, b.ln1_w, b.ln1_b));
      const Tensor<T, Sharded<1>, Dev> q = shardex::add_bias(shardex::matmul(a, b.wq), b.bq);
      const Tensor<T, Sharded<1>, Dev> k = shardex::add_bias(shardex::matmul(a, b.wk), b.bk);
      const Tensor<T, Sharded<1>, Dev> v = shardex::add_bias(shardex::matmul(a, b.wv), b.bv);
      const auto y = shardex::causal_attention(shardex::split_heads(q, batch, dh), shardex::split_heads(k, batch, dh),
                                               shardex::split_heads(v, batch, dh));
      const Tensor<T, H, Dev> h1 = h + bias(leave(shardex::matmul(shardex::merge_heads(y), b.wo)), b.bo);
      const Tensor<T, Replicated, Dev> m = enter(norm(h1, b.ln2_w, b.ln2_b));
      const Tensor<T, Sharded<1>, Dev> u = shardex::gelu(shardex::add_bias(shardex::matmul(m, b.wfc), b.bfc));
      h = h1 + bias(leave(shardex::matmul(u, b.wproj)), b.bproj);
    }
    return shardex::matmul(enter(norm(h, lnf_w_, lnf_b_)), shardex::transpose(wte_));
  }

  /// The position in its sequence of every token of a batch (global token i
  /// is at i % seq), laid out as L: Invariant, or Sharded<0> on the rows a
  /// rank holds under sequence parallelism.
  template <shardex::LayoutTag L>
  Tensor<std::int64_t, L, Dev> positions(std::int64_t batch, std::int64_t seq, layout_mapping<L> rows = {}) const {
    return on_device<Dev>(Tensor<std::int64_t, L>::from_function(
                              shardex::detail::control_of(comm_), {batch * seq},
                              [seq](std::span<const std::int64_t> i) { return i[0] % seq; }, std::move(rows)),
                          comm_);
  }

  communicator comm_;
  Config config_;
  Split split_;
  Tensor<T, Sharded<0>, Dev> wte_;  // (vocab, width): the rank's vocabulary rows; also the output layer
  Tensor<T, Invariant, Dev> wpe_;   // (context, width)
  std::vector<Block<T, Dev>> blocks_;
  Tensor<T, Invariant, Dev> lnf_w_, lnf_b_;
  bool sequence_parallel_ = false;
};

}  // namespace gpt2
