// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `attention(q, k, v)`: softmax(q k^T / sqrt(dh)) v for every head, on
/// tensors laid out (seq, heads, dh). Local to each head, so it needs the whole
/// sequence of its heads on one rank: the layouts allowed are whole ones (R, I)
/// and `Sharded<1>` (heads split over ranks, as after the all_to_all of
/// DeepSpeed-Ulysses). A sequence-sharded input is a compile error that says to
/// all_to_all the heads first. The backward is local too (per head: dV = P^T dO,
/// dS = P * (dP - rowsum(dP * P)), dQ = dS K / sqrt(dh), dK = dS^T Q / sqrt(dh)).

#include <cmath>
#include <string>

#include "shardex/core/compile_errors.hpp"
#include "shardex/expr/expression.hpp"
#include "shardex/expr/rules.hpp"

namespace shardex {

namespace rules {
/// The rule of attention(q, k, v): one layout for the three, whole (R, I) or
/// Sharded<1> (heads); never Partial or sharded along the sequence.
template <LayoutTag Q, LayoutTag K, LayoutTag V>
struct attention {
  static_assert(std::same_as<Q, K> && std::same_as<K, V>, SHARDEX_ERR_ATTENTION_MIXED_LAYOUTS);
  static_assert(!sharded_on<Q, 0>, SHARDEX_ERR_ATTENTION_SEQUENCE_SHARDED);
  static_assert(!std::same_as<Q, Partial>, SHARDEX_ERR_ATTENTION_PARTIAL);
  static_assert(!is_sharded_v<Q> || sharded_on<Q, 1>, SHARDEX_ERR_ATTENTION_SHARDED_DIM);
  /// The result's layout: q's.
  using type = Q;
};
}  // namespace rules

/// @brief The node of `attention(q, k, v)`; its layout is rules::attention's.
template <TensorExpr Q, TensorExpr K, TensorExpr V>
class Attention {
public:
  ///@{
  /// The TensorExpr interface (q's shape, communicator and mapping; the layout
  /// of rules::attention), `node_name` as explain() prints it, and the operands.
  static constexpr const char* node_name = "attention";
  using value_type = typename Q::value_type;
  static_assert(Scalar<value_type>, SHARDEX_ERR_TOKEN_IDS_FLOAT_ONLY);
  using device_type = typename Q::device_type;
  using layout_type =
      typename rules::attention<typename Q::layout_type, typename K::layout_type, typename V::layout_type>::type;

  /// The node of the attention of q, k, v (attention() builds it).
  Attention(Q q, K k, V v) : q_(std::move(q)), k_(std::move(k)), v_(std::move(v)) {}
  [[nodiscard]] Shape shape() const { return q_.shape(); }
  [[nodiscard]] decltype(auto) comm() const { return q_.comm(); }
  [[nodiscard]] decltype(auto) mapping() const { return q_.mapping(); }
  [[nodiscard]] const Q& q() const noexcept { return q_; }
  [[nodiscard]] const K& k() const noexcept { return k_; }
  [[nodiscard]] const V& v() const noexcept { return v_; }
  ///@}

private:
  Q q_;
  K k_;
  V v_;
};

/// softmax(q k^T / sqrt(dh)) v per head, for (seq, heads, dh) tensors, lazy.
template <TensorExpr Q, TensorExpr K, TensorExpr V>
auto attention(const Q& q, const K& k, const V& v) {
  return Attention<Q, K, V>(q, k, v);
}

namespace detail {

/// The per-head products of attention as batched GEMMs over the heads: head h
/// of a (seq, heads, dh) array is a seq x dh matrix with row stride heads * dh
/// starting at h * dh; the scores of all heads are one (heads, seq, seq) array.
struct AttentionShapes {
  std::int64_t seq, heads, dh;
  /// X (seq x dh per head) of a (seq, heads, dh) array, as an A or B operand.
  [[nodiscard]] std::int64_t ld() const { return heads * dh; }
  /// scores = Qh Kh^T (or G Vh^T): m = n = seq, k = dh.
  [[nodiscard]] GemmShape scores() const {
    return {seq, seq, dh, false, true, ld(), ld(), seq, dh, dh, seq * seq, heads};
  }
  /// Xh = P Yh (P^T Yh when `tp`): m = seq, n = dh, k = seq.
  [[nodiscard]] GemmShape apply(bool tp) const {
    return {seq, dh, seq, tp, false, seq, ld(), ld(), seq * seq, dh, dh, heads};
  }
};

}  // namespace detail

/// Runs the node: batched GEMMs and a row softmax over the heads; the
/// backward recomputes the probabilities.
/// @throws invalid_argument unless q, k, v are 3-d of one local shape.
template <TensorExpr Q, TensorExpr K, TensorExpr V>
auto evaluate(const Attention<Q, K, V>& e) {
  using T = typename Q::value_type;
  using L = typename Attention<Q, K, V>::layout_type;
  using Dev = typename Q::device_type;
  auto q = eval(e.q()), k = eval(e.k()), v = eval(e.v());
  const Shape s = q.local_shape();
  if (s.rank() != 3 || !(k.local_shape() == s) || !(v.local_shape() == s))
    throw invalid_argument("shardex::attention(q, k, v) on rank " + std::to_string(q.rank()) +
                           ": q, k, v must be (seq, heads, dh) of one shape; q is " + q.describe() + ", k " +
                           k.describe() + ", v " + v.describe());
  const detail::AttentionShapes shapes{s[0], s[1], s[2]};
  const T scale = T(1) / std::sqrt(T(shapes.dh));
  // P = softmax(Q K^T * scale) per head, in one (heads, seq, seq) buffer.
  const auto probabilities = [shapes, scale](const T* q_data, const T* k_data) {
    auto p = Dev::template allocate<T>(shapes.heads * shapes.seq * shapes.seq);
    Dev::gemm(shapes.scores(), scale, q_data, k_data, T(0), p.get());
    Dev::softmax_rows(p.get(), shapes.heads * shapes.seq, shapes.seq);
    return p;
  };
  auto out = Tensor<T, L, Dev>::zeroed(q.comm(), q.shape(), q.mapping());
  Dev::gemm(shapes.apply(false), T(1), probabilities(q.data(), k.data()).get(), v.data(), T(0), out.data());
  if (q.node() || k.node() || v.node()) {
    std::vector<std::shared_ptr<autodiff::Node>> inputs;
    autodiff::add_input(inputs, q.node());
    autodiff::add_input(inputs, k.node());
    autodiff::add_input(inputs, v.node());
    out.record("attention", std::move(inputs),
               [q, k, v, shapes, scale, probabilities](const Tensor<T, dual_t<L>, Dev>& g) {
                 const auto p = probabilities(q.data(), k.data());  // recomputed: cheaper to keep than to store
                 if (v.node()) {                                    // dV = P^T G
                   auto dv = v.node()->make_full(T(0));
                   Dev::gemm(shapes.apply(true), T(1), p.get(), g.data(), T(0), dv.data());
                   v.node()->accumulate(dv);
                 }
                 if (!q.node() && !k.node()) return;
                 // dS = scale * P * (dP - rowsum(dP * P)) with dP = G V^T, in place.
                 auto ds = Dev::template allocate<T>(shapes.heads * shapes.seq * shapes.seq);
                 Dev::gemm(shapes.scores(), T(1), g.data(), v.data(), T(0), ds.get());
                 Dev::softmax_backward_rows(p.get(), ds.get(), shapes.heads * shapes.seq, shapes.seq, scale);
                 if (q.node()) {  // dQ = dS K
                   auto dq = q.node()->make_full(T(0));
                   Dev::gemm(shapes.apply(false), T(1), ds.get(), k.data(), T(0), dq.data());
                   q.node()->accumulate(dq);
                 }
                 if (k.node()) {  // dK = dS^T Q
                   auto dk = k.node()->make_full(T(0));
                   Dev::gemm(shapes.apply(true), T(1), ds.get(), q.data(), T(0), dk.data());
                   k.node()->accumulate(dk);
                 }
               });
  }
  return out;
}

}  // namespace shardex
