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

#include "shardex/expr/expression.hpp"
#include "shardex/expr/rules.hpp"

namespace shardex {

namespace rules {
template <LayoutTag Q, LayoutTag K, LayoutTag V>
struct attention {
  static_assert(std::same_as<Q, K> && std::same_as<K, V>,
                "shardex::attention(q, k, v) requires q, k and v to have the same layout");
  static_assert(!sharded_on<Q, 0>,
                "shardex::attention(q, k, v): q, k, v are sharded along the sequence (Sharded<0>), but attention "
                "needs every position of a head on one rank; all_to_all<Sharded<1>>(x, head_lengths) first "
                "(DeepSpeed-Ulysses), or all_gather");
  static_assert(!std::same_as<Q, Partial>,
                "shardex::attention(q, k, v) of Partial tensors: softmax is not linear; all_reduce first");
  static_assert(!is_sharded_v<Q> || sharded_on<Q, 1>,
                "shardex::attention(q, k, v) on (seq, heads, dh): only the heads dim (Sharded<1>) may be sharded");
  using type = Q;
};
}  // namespace rules

template <TensorExpr Q, TensorExpr K, TensorExpr V>
class Attention {
public:
  static constexpr const char* node_name = "attention";
  using value_type = typename Q::value_type;
  using device_type = typename Q::device_type;
  using layout_type = typename rules::attention<typename Q::layout_type, typename K::layout_type, typename V::layout_type>::type;

  Attention(Q q, K k, V v) : q_(std::move(q)), k_(std::move(k)), v_(std::move(v)) {}
  [[nodiscard]] Shape shape() const { return q_.shape(); }
  [[nodiscard]] decltype(auto) comm() const { return q_.comm(); }
  [[nodiscard]] decltype(auto) mapping() const { return q_.mapping(); }
  [[nodiscard]] const Q& q() const noexcept { return q_; }
  [[nodiscard]] const K& k() const noexcept { return k_; }
  [[nodiscard]] const V& v() const noexcept { return v_; }

private:
  Q q_;
  K k_;
  V v_;
};

template <TensorExpr Q, TensorExpr K, TensorExpr V>
auto attention(const Q& q, const K& k, const V& v) {
  return Attention<Q, K, V>(q, k, v);
}

namespace detail {

/// One head's (seq x dh) matrix inside a (seq, heads, dh) array.
template <class T>
auto head(T* base, std::int64_t seq, std::int64_t heads, std::int64_t dh, std::int64_t h) {
  using M = Eigen::Matrix<std::remove_const_t<T>, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Map = std::conditional_t<std::is_const_v<T>, Eigen::Map<const M, 0, Eigen::OuterStride<>>, Eigen::Map<M, 0, Eigen::OuterStride<>>>;
  return Map(base + h * dh, static_cast<Eigen::Index>(seq), static_cast<Eigen::Index>(dh),
             Eigen::OuterStride<>(static_cast<Eigen::Index>(heads * dh)));
}

template <class T>
using Dense = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Row-wise softmax of s / sqrt(dh), in place.
template <class T>
void softmax_rows(Dense<T>& s) {
  for (Eigen::Index i = 0; i < s.rows(); ++i) {
    auto row = s.row(i);
    row = (row.array() - row.maxCoeff()).exp().matrix();
    row /= row.sum();
  }
}

}  // namespace detail

template <TensorExpr Q, TensorExpr K, TensorExpr V>
auto evaluate(const Attention<Q, K, V>& e) {
  using T = typename Q::value_type;
  using L = typename Attention<Q, K, V>::layout_type;
  using Dev = typename Q::device_type;
  auto q = eval(e.q()), k = eval(e.k()), v = eval(e.v());
  const Shape s = q.local_shape();
  if (s.rank() != 3 || !(k.local_shape() == s) || !(v.local_shape() == s))
    throw invalid_argument("shardex::attention(q, k, v) on rank " + std::to_string(q.rank()) +
                           ": q, k, v must be (seq, heads, dh) of one shape; q is " + q.describe() + ", k " + k.describe() +
                           ", v " + v.describe());
  const std::int64_t seq = s[0], heads = s[1], dh = s[2];
  const T scale = T(1) / std::sqrt(T(dh));
  auto out = Tensor<T, L, Dev>::zeros(q.comm(), q.shape(), q.mapping());
  for (std::int64_t h = 0; h < heads; ++h) {
    detail::Dense<T> p = detail::head<const T>(q.data(), seq, heads, dh, h) *
                         detail::head<const T>(k.data(), seq, heads, dh, h).transpose() * scale;
    detail::softmax_rows(p);
    detail::head<T>(out.data(), seq, heads, dh, h).noalias() = p * detail::head<const T>(v.data(), seq, heads, dh, h);
  }
  if (q.node() || k.node() || v.node()) {
    std::vector<std::shared_ptr<autodiff::Node>> inputs;
    for (const std::shared_ptr<autodiff::Node>& n : {std::shared_ptr<autodiff::Node>(q.node()), std::shared_ptr<autodiff::Node>(k.node()),
                                                     std::shared_ptr<autodiff::Node>(v.node())})
      if (n && std::find(inputs.begin(), inputs.end(), n) == inputs.end()) inputs.push_back(n);
    out.record("attention", std::move(inputs), [q, k, v, seq, heads, dh, scale](const Tensor<T, dual_t<L>, Dev>& g) {
      auto dq = q.node() ? q.node()->make_full(T(0)) : Tensor<T, dual_t<L>, Dev>{};
      auto dk = k.node() ? k.node()->make_full(T(0)) : Tensor<T, dual_t<L>, Dev>{};
      auto dv = v.node() ? v.node()->make_full(T(0)) : Tensor<T, dual_t<L>, Dev>{};
      for (std::int64_t h = 0; h < heads; ++h) {
        const auto Qh = detail::head<const T>(q.data(), seq, heads, dh, h);
        const auto Kh = detail::head<const T>(k.data(), seq, heads, dh, h);
        const auto Vh = detail::head<const T>(v.data(), seq, heads, dh, h);
        const auto G = detail::head<const T>(g.data(), seq, heads, dh, h);
        detail::Dense<T> p = Qh * Kh.transpose() * scale;
        detail::softmax_rows(p);
        const detail::Dense<T> dp = G * Vh.transpose();
        const Eigen::Matrix<T, Eigen::Dynamic, 1> rows = (dp.array() * p.array()).rowwise().sum();
        const detail::Dense<T> ds = (p.array() * (dp.colwise() - rows).array()).matrix() * scale;
        if (v.node()) detail::head<T>(dv.data(), seq, heads, dh, h).noalias() = p.transpose() * G;
        if (q.node()) detail::head<T>(dq.data(), seq, heads, dh, h).noalias() = ds * Kh;
        if (k.node()) detail::head<T>(dk.data(), seq, heads, dh, h).noalias() = ds.transpose() * Qh;
      }
      if (q.node()) q.node()->accumulate(dq);
      if (k.node()) k.node()->accumulate(dk);
      if (v.node()) v.node()->accumulate(dv);
    });
  }
  return out;
}

}  // namespace shardex
