// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `causal_attention(q, k, v)`: softmax(q k^T / sqrt(dh) + causal mask) v
/// for a batch of sequences laid out (batch, seq, heads, dh), as
/// torch's scaled_dot_product_attention(q, k, v, is_causal=True) on
/// (batch, heads, seq, dh). No token attends to a later one or to another
/// sequence. Local to each head: the layouts allowed are whole ones (I, R),
/// `Sharded<2>` (the heads split over the ranks in any lengths, zeros
/// included: 12 heads over 5 ranks as 3,3,2,2,2) and `Sharded<0>` (the batch
/// split: data parallelism). Grouped-query attention: k and v may have fewer
/// heads (KV groups) than q, each serving `group = q heads / kv heads`
/// consecutive query heads; with heads sharded, each rank holds whole groups
/// (q's head lengths are the KV lengths times the group). The scores are made
/// one sequence and one block of up to 64 query rows at a time, against only
/// the keys up to the block's last row (the later ones are masked: their
/// weight is exactly zero), so the products skip most of the masked half: 5/8
/// of the whole (seq, seq) scores at seq 256, 17/32 at 1024. The backward
/// reuses the forward's probabilities where all of them take at most
/// attention_kept_probabilities_limit() bytes (16 MiB unless set: GPT-2
/// small's 4 x 256 on 2 ranks keeps 3.9 MB a layer), and recomputes each
/// block's otherwise (4 x 1024 on one rank would keep 107 MB a layer).
///
/// @code
/// // (batch, seq, heads, dh), 12 heads over the ranks in any lengths
/// Tensor<float, Sharded<2>> y = causal_attention(q, k, v);
/// @endcode

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "shardex/core/compile_errors.hpp"
#include "shardex/expr/expression.hpp"
#include "shardex/expr/rules.hpp"
#include "shardex/transition/plan_step.hpp"

namespace shardex {

namespace rules {
/// The rule of causal_attention(q, k, v) on (batch, seq, heads, dh): one
/// layout for the three, whole (I, R), Sharded<2> (heads) or Sharded<0>
/// (batch); never Partial, the sequence or dh sharded.
template <LayoutTag Q, LayoutTag K, LayoutTag V>
struct causal_attention {
  static_assert(std::same_as<Q, K> && std::same_as<K, V>, SHARDEX_ERR_ATTENTION_MIXED_LAYOUTS);
  static_assert(!std::same_as<Q, Partial>, SHARDEX_ERR_ATTENTION_PARTIAL);
  static_assert(!sharded_on<Q, 1>, SHARDEX_ERR_CAUSAL_ATTENTION_SEQUENCE_SHARDED);
  static_assert(!is_sharded_v<Q> || sharded_on<Q, 0> || sharded_on<Q, 1> || sharded_on<Q, 2>,
                SHARDEX_ERR_CAUSAL_ATTENTION_SHARDED_DIM);
  /// The heads are split over the ranks.
  static constexpr bool heads_sharded = sharded_on<Q, 2>;
  /// The result's layout: q's.
  using type = Q;
};
}  // namespace rules

/// @brief The node of `causal_attention(q, k, v)`; its layout is rules::causal_attention's.
template <TensorExpr Q, TensorExpr K, TensorExpr V>
class CausalAttention {
public:
  ///@{
  /// The TensorExpr interface (q's shape, communicator and mapping), the
  /// operands; for explain, the operands and the (local) step.
  static constexpr const char* node_name = "causal_attention";
  using value_type = typename Q::value_type;
  using device_type = typename Q::device_type;
  using rule = rules::causal_attention<typename Q::layout_type, typename K::layout_type, typename V::layout_type>;
  using layout_type = typename rule::type;
  static_assert(Scalar<value_type>, SHARDEX_ERR_TOKEN_IDS_FLOAT_ONLY);

  /// The node (causal_attention() builds it).
  CausalAttention(Q q, K k, V v) : q_(std::move(q)), k_(std::move(k)), v_(std::move(v)) {}
  [[nodiscard]] Shape shape() const { return q_.shape(); }
  [[nodiscard]] decltype(auto) comm() const { return q_.comm(); }
  [[nodiscard]] decltype(auto) mapping() const { return q_.mapping(); }
  [[nodiscard]] std::tuple<const Q&, const K&, const V&> operands() const noexcept { return {q_, k_, v_}; }
  [[nodiscard]] PlanStep explain_step() const {
    return PlanStep::local(node_name, "(" + layout_name(q_.mapping()) + ", " + layout_name(k_.mapping()) + ")",
                           layout_name(mapping()));
  }
  ///@}

private:
  Q q_;
  K k_;
  V v_;
};

/// Causal attention of q (batch, seq, heads, dh) over k, v (batch, seq, kv
/// heads, dh), lazy; see the file's note for the layouts and groups.
template <TensorExpr Q, TensorExpr K, TensorExpr V>
auto causal_attention(const Q& q, const K& k, const V& v) {
  return CausalAttention<Q, K, V>(q, k, v);
}

namespace detail {
/// attention_kept_probabilities_limit's value (one for the process).
inline std::atomic<std::int64_t> kept_probabilities_limit{std::int64_t(16) << 20};
}  // namespace detail

/// The most bytes of probabilities (all of one call's sequences, heads and
/// blocks on this rank) that causal_attention keeps from its forward for its
/// backward; above it the backward recomputes them a block at a time (the
/// scores' product again, the mask and the softmax), holding one block.
[[nodiscard]] inline std::int64_t attention_kept_probabilities_limit() noexcept {
  return detail::kept_probabilities_limit.load(std::memory_order_relaxed);
}
/// Sets attention_kept_probabilities_limit (0: always recompute); calls made
/// after it use it. Every rank should set the same limit, as the choice is
/// each rank's own and changes no result.
inline void set_attention_kept_probabilities_limit(std::int64_t bytes) noexcept {
  detail::kept_probabilities_limit.store(std::max<std::int64_t>(bytes, 0), std::memory_order_relaxed);
}

namespace detail {

/// The local geometry of causal attention: batch b, sequence s, q heads hq
/// and KV heads hk on this rank (hq = group * hk), head size dh. Head h of
/// sequence b of a (batch, seq, heads, dh) array is a seq x dh matrix with row
/// stride heads * dh at offset (b * seq * heads + h) * dh. The work goes by
/// blocks of query rows [r0, r1), r1 - r0 = nb <= rows_per_block, whose
/// scores are (hq, nb, r1): their queries against keys [0, r1).
struct CausalShapes {
  std::int64_t batch, seq, hq, hk, dh;
  /// Query rows per block: fewer skip more of the masked half, but make
  /// smaller products (64: 5/8 of the whole scores at seq 256, products of 64 rows).
  static constexpr std::int64_t rows_per_block = 64;
  [[nodiscard]] std::int64_t group() const { return hk > 0 ? hq / hk : 0; }
  /// Offsets of head h of sequence b, at query row r, in q (or the output) and in k / v.
  [[nodiscard]] std::int64_t q_at(std::int64_t b, std::int64_t h, std::int64_t r = 0) const {
    return ((b * seq + r) * hq + h) * dh;
  }
  [[nodiscard]] std::int64_t kv_at(std::int64_t b, std::int64_t h) const { return (b * seq * hk + h) * dh; }
  /// The most scores one block holds: hq x (rows of the longest block) x seq.
  [[nodiscard]] std::int64_t block_capacity() const { return hq * std::min(seq, rows_per_block) * seq; }
  /// Calls f(r0, r1) for each block of query rows, in order.
  template <class F>
  void for_each_block(F&& f) const {
    for (std::int64_t r0 = 0; r0 < seq; r0 += rows_per_block) f(r0, std::min(seq, r0 + rows_per_block));
  }
  /// The same blocks from the last to the first: the first one's keys [0, seq)
  /// are all of them, so the backward writes dK and dV whole there (beta 0) and
  /// adds the other blocks' parts to them, with no zeroing pass first.
  template <class F>
  void for_each_block_last_first(F&& f) const {
    if (seq <= 0) return;
    for (std::int64_t r0 = (seq - 1) / rows_per_block * rows_per_block; r0 >= 0; r0 -= rows_per_block)
      f(r0, std::min(seq, r0 + rows_per_block));
  }
  /// The (query, key) pairs whose scores one sequence's blocks compute: seq^2 at
  /// seq <= rows_per_block, 5/8 of it at 4 blocks (what a flop count of the products counts).
  [[nodiscard]] std::int64_t computed_pairs() const {
    std::int64_t pairs = 0;
    for_each_block([&](std::int64_t r0, std::int64_t r1) { pairs += (r1 - r0) * r1; });
    return pairs;
  }
  /// Where the probabilities of sequence b's block starting at query row r0
  /// begin among all of them (sequence-major, then block, then as a block
  /// holds them: (hq, nb, r1)); `pairs` is computed_pairs().
  [[nodiscard]] std::int64_t kept_at(std::int64_t b, std::int64_t r0, std::int64_t pairs) const {
    const std::int64_t full = r0 / rows_per_block;  // whole blocks before r0, each nb = rows_per_block
    const std::int64_t before = rows_per_block * rows_per_block * full * (full + 1) / 2;  // sum of nb * r1 over them
    return hq * (b * pairs + before);
  }
  /// The query heads one batched product takes: `count` of them from `q_head`
  /// on, `q_step` apart, against KV heads from `kv_head` on, `kv_step` apart.
  struct HeadRun {
    std::int64_t q_head, kv_head, count, q_step, kv_step;
  };
  /// Calls f(run) for the runs that cover every query head once, in as few
  /// batched products as the strides allow: one per place in a group (a head
  /// of every group, each against its own KV head: `group` calls, one in all for
  /// GPT-2's group of 1), or one per KV group (its heads against one shared KV
  /// head: `hk` calls, one for multi-query attention). A GPU pays a launch a
  /// product; the host runs the same products either way.
  template <class F>
  void for_each_head_run(F&& f) const {
    if (hk <= 0) return;
    if (group() <= hk)
      for (std::int64_t j = 0; j < group(); ++j) f(HeadRun{j, 0, hk, group(), 1});
    else
      for (std::int64_t kv = 0; kv < hk; ++kv) f(HeadRun{kv * group(), kv, group(), 1, 0});
  }
  /// Calls f(j) for each place j in a group: the run of query heads j, j + group, ...
  /// whose products accumulate into distinct KV heads (dK, dV), so they batch.
  template <class F>
  void for_each_group_place(F&& f) const {
    if (hk > 0)
      for (std::int64_t j = 0; j < group(); ++j) f(j);
  }
  /// A run's query heads, rows [r1 - nb, r1), against its K's rows [0, r1): m = nb, n = r1, k = dh;
  /// the scores of query head h at h * nb * r1.
  [[nodiscard]] GemmShape scores(std::int64_t nb, std::int64_t r1, const HeadRun& run) const {
    return {
        nb,       r1, dh, false, true, hq * dh, hk * dh, r1, run.q_step * dh, run.kv_step * dh, run.q_step * nb * r1,
        run.count};
  }
  /// O_h = P_h V (or dQ_h = dS_h K) for the block's rows of a run's heads: m = nb, n = dh, k = r1.
  [[nodiscard]] GemmShape apply(std::int64_t nb, std::int64_t r1, const HeadRun& run) const {
    return {
        nb,       dh, r1, false, false, r1, hk * dh, hq * dh, run.q_step * nb * r1, run.kv_step * dh, run.q_step * dh,
        run.count};
  }
  /// dV[0, r1) += P_h^T G_h (or dK += dS_h^T Q_h) for the query heads at one place of
  /// every group, each into its own KV head: m = r1, n = dh, k = nb, batched over the KV heads.
  [[nodiscard]] GemmShape apply_transposed(std::int64_t nb, std::int64_t r1) const {
    return {r1, dh, nb, true, false, r1, hq * dh, hk * dh, group() * nb * r1, group() * dh, dh, hk};
  }
};

}  // namespace detail

/// Runs the node: per sequence and block of query rows, GEMMs batched over the
/// heads (for_each_head_run) for the scores (against the keys up to the block's end), the causal
/// mask, a row softmax, and the product with V; the backward reuses the
/// probabilities, or recomputes each block's above attention_kept_probabilities_limit().
/// @throws invalid_argument unless q, k, v are 4-d with one batch, sequence
/// and head size, q's heads a multiple of k's (and v's equal to k's), and,
/// with heads sharded, each rank's q heads its KV heads times the group.
template <TensorExpr Q, TensorExpr K, TensorExpr V>
auto evaluate(const CausalAttention<Q, K, V>& e) {
  using T = typename Q::value_type;
  using L = typename CausalAttention<Q, K, V>::layout_type;
  using Dev = typename Q::device_type;
  auto q = eval(std::get<0>(e.operands())), k = eval(std::get<1>(e.operands())), v = eval(std::get<2>(e.operands()));
  const Shape gq = q.shape(), gk = k.shape(), sq = q.local_shape(), sk = k.local_shape();
  const auto fail = [&](const std::string& why) {
    throw invalid_argument("shardex::causal_attention(q, k, v) on rank " + std::to_string(q.rank()) + ": " + why +
                           "; q is " + q.describe() + ", k " + k.describe() + ", v " + v.describe());
  };
  if (gq.rank() != 4 || gk.rank() != 4 || !(v.shape() == gk) || !(v.local_shape() == sk))
    fail("q, k, v must be (batch, seq, heads, dh), and v of k's shape");
  if (gq[0] != gk[0] || gq[1] != gk[1] || gq[3] != gk[3])
    fail("q and k must have the same batch, sequence and head size");
  if (gk[2] == 0 ? gq[2] != 0 : gq[2] % gk[2] != 0)
    fail("q's " + std::to_string(gq[2]) + " heads must be a multiple of k's " + std::to_string(gk[2]) +
         " (grouped-query attention: each KV head serves a group of query heads)");
  const std::int64_t group = gk[2] > 0 ? gq[2] / gk[2] : 1;
  if constexpr (CausalAttention<Q, K, V>::rule::heads_sharded) {
    bool whole_groups = true;
    std::vector<std::int64_t> legal;
    for (std::size_t r = 0; r < k.lengths().size(); ++r) {
      whole_groups = whole_groups && q.lengths()[r] == group * k.lengths()[r];
      legal.push_back(group * k.lengths()[r]);
    }
    if (!whole_groups)
      fail("with the heads sharded each rank holds whole KV groups: for k's head lengths " + to_string(k.lengths()) +
           " and groups of " + std::to_string(group) + ", q's head lengths must be " + to_string(legal) + ", not " +
           to_string(q.lengths()));
  }
  const detail::CausalShapes cs{sq[0], sq[1], sq[2], sk[2], sq[3]};
  const T scale = cs.dh > 0 ? T(1) / std::sqrt(T(cs.dh)) : T(1);
  // The probabilities of sequence b's query rows [r0, r1), all local heads: (hq, r1 - r0, r1).
  const auto probabilities = [cs, scale](const T* qd, const T* kd, std::int64_t b, std::int64_t r0, std::int64_t r1,
                                         T* p) {
    const std::int64_t nb = r1 - r0;
    cs.for_each_head_run([&](const detail::CausalShapes::HeadRun& run) {
      Dev::gemm(cs.scores(nb, r1, run), scale, qd + cs.q_at(b, run.q_head, r0), kd + cs.kv_at(b, run.kv_head), T(0),
                p + run.q_head * nb * r1);
    });
    Dev::causal_mask(p, cs.hq, nb, r1, r0);
    Dev::softmax_rows(p, cs.hq * nb, r1);
  };
  auto out = Tensor<T, L, Dev>::empty(q.comm(), q.shape(), q.mapping());  // every (sequence, row, head) written below
  const bool differentiated = q.node() || k.node() || v.node();
  const std::int64_t pairs = cs.computed_pairs(), all_probabilities = cs.batch * cs.hq * pairs;
  // The forward's probabilities, all of them, for the backward (empty: it recomputes them).
  std::shared_ptr<T[]> kept;
  if (differentiated && all_probabilities * std::int64_t(sizeof(T)) <= attention_kept_probabilities_limit())
    kept = Dev::template allocate_uninitialized<T>(all_probabilities);
  {
    auto scratch = kept ? nullptr : Dev::template allocate_uninitialized<T>(cs.block_capacity());
    for (std::int64_t b = 0; b < cs.batch; ++b)
      cs.for_each_block([&](std::int64_t r0, std::int64_t r1) {
        const std::int64_t nb = r1 - r0;
        T* p = kept ? kept.get() + cs.kept_at(b, r0, pairs) : scratch.get();
        probabilities(q.data(), k.data(), b, r0, r1, p);
        cs.for_each_head_run([&](const detail::CausalShapes::HeadRun& run) {
          Dev::gemm(cs.apply(nb, r1, run), T(1), p + run.q_head * nb * r1, v.data() + cs.kv_at(b, run.kv_head), T(0),
                    out.data() + cs.q_at(b, run.q_head, r0));
        });
      });
  }
  if (differentiated) {
    std::vector<std::shared_ptr<autodiff::Node>> inputs;
    autodiff::add_input(inputs, q.node());
    autodiff::add_input(inputs, k.node());
    autodiff::add_input(inputs, v.node());
    out.record("causal_attention", std::move(inputs),
               [q, k, v, cs, scale, probabilities, kept, pairs](const Tensor<T, dual_t<L>, Dev>& g) {
                 // dq is written whole (beta 0, each block its rows); dk and dv by each sequence's last
                 // block first (its keys are all of the sequence's: beta 0 from a group's first head), then
                 // accumulated over the group's other heads and the sequence's other blocks (beta 1).
                 auto dq = q.node() ? q.node()->make_empty() : typename decltype(q)::grad_type{};
                 // (With q of no heads at all, k's and v's gradients are zeros no product writes; the
                 // choice the same on every rank, as make_full is collective.)
                 const auto dkv_of = [&](const auto& t) {
                   return !t.node()          ? typename std::remove_cvref_t<decltype(t)>::grad_type{}
                          : q.shape()[2] > 0 ? t.node()->make_empty()
                                             : t.node()->make_full(T(0));
                 };
                 auto dk = dkv_of(k);
                 auto dv = dkv_of(v);
                 auto scratch = kept ? nullptr : Dev::template allocate_uninitialized<T>(cs.block_capacity());
                 auto ds = Dev::template allocate_uninitialized<T>(cs.block_capacity());
                 for (std::int64_t b = 0; b < cs.batch; ++b)
                   cs.for_each_block_last_first([&](std::int64_t r0, std::int64_t r1) {
                     const std::int64_t nb = r1 - r0;
                     // beta for dK's and dV's rows [0, r1): 0 where the sequence's last block writes
                     // the first place of each group, else 1.
                     const auto into_dkv = [&](std::int64_t j) { return r1 == cs.seq && j == 0 ? T(0) : T(1); };
                     const T* p = kept ? kept.get() + cs.kept_at(b, r0, pairs) : scratch.get();
                     if (!kept)  // recomputed: one block at a time
                       probabilities(q.data(), k.data(), b, r0, r1, scratch.get());
                     if (v.node())  // dV_kv[0, r1) += P_h^T G_h
                       cs.for_each_group_place([&](std::int64_t j) {
                         Dev::gemm(cs.apply_transposed(nb, r1), T(1), p + j * nb * r1, g.data() + cs.q_at(b, j, r0),
                                   into_dkv(j), dv.data() + cs.kv_at(b, 0));
                       });
                     if (!q.node() && !k.node()) return;
                     // dP = G V^T, then dS = scale * P * (dP - rowsum(dP * P)) in place.
                     using Run = detail::CausalShapes::HeadRun;
                     cs.for_each_head_run([&](const Run& run) {
                       Dev::gemm(cs.scores(nb, r1, run), T(1), g.data() + cs.q_at(b, run.q_head, r0),
                                 v.data() + cs.kv_at(b, run.kv_head), T(0), ds.get() + run.q_head * nb * r1);
                     });
                     Dev::softmax_backward_rows(p, ds.get(), cs.hq * nb, r1, scale);
                     if (q.node())  // dQ_h[r0, r1) = dS_h K_kv[0, r1)
                       cs.for_each_head_run([&](const Run& run) {
                         Dev::gemm(cs.apply(nb, r1, run), T(1), ds.get() + run.q_head * nb * r1,
                                   k.data() + cs.kv_at(b, run.kv_head), T(0), dq.data() + cs.q_at(b, run.q_head, r0));
                       });
                     if (k.node())  // dK_kv[0, r1) += dS_h^T Q_h, place j's head of every group at a time
                       cs.for_each_group_place([&](std::int64_t j) {
                         Dev::gemm(cs.apply_transposed(nb, r1), T(1), ds.get() + j * nb * r1,
                                   q.data() + cs.q_at(b, j, r0), into_dkv(j), dk.data() + cs.kv_at(b, 0));
                       });
                   });
                 if (q.node()) q.node()->accumulate(dq);
                 if (k.node()) k.node()->accumulate(dk);
                 if (v.node()) v.node()->accumulate(dv);
               });
  }
  return out;
}

}  // namespace shardex
