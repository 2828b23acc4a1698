// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `cross_entropy(logits, targets)`: the mean (or sum) over tokens of
/// -log softmax(logits)[target], as torch.nn.functional.cross_entropy, with
/// the layout rule of rules::cross_entropy. Vocab-parallel logits
/// (`Sharded<1>`, any lengths, zeros included) are never gathered: each rank
/// takes its row maxima, one MAX all-reduce gives the global ones (no gradient
/// flows through them), each rank sums exp(x - max) over its columns and picks
/// the target's logit where it owns the target, and one SUM all-reduce of that
/// packed pair completes every row. The loss is Invariant; the backward is
/// local: (softmax - the one-hot of the rank's slice) * g / tokens.
///
/// @code
/// Tensor<float, Sharded<1>> logits = matmul(h, wte_t);           // (tokens, vocab), vocab split
/// Tensor<float, Invariant> loss = cross_entropy(logits, targets); // targets: int64 ids, Invariant
/// backward(loss);
/// @endcode

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "shardex/core/agree.hpp"
#include "shardex/core/compile_errors.hpp"
#include "shardex/core/trace.hpp"
#include "shardex/expr/expression.hpp"
#include "shardex/expr/rules.hpp"
#include "shardex/nn/embedding.hpp"
#include "shardex/transition/plan_step.hpp"

namespace shardex {

/// How cross_entropy reduces the tokens' losses: their mean over the tokens
/// not ignored (torch's default), or their sum.
enum class LossReduction { mean, sum };

/// The options of cross_entropy, as torch.nn.functional.cross_entropy's.
struct CrossEntropyOptions {
  LossReduction reduction = LossReduction::mean;  ///< mean over the counted tokens, or sum
  std::int64_t ignore_index = -100;               ///< a target with this value counts for nothing
};

namespace rules {
/// The rule of cross_entropy(logits, targets), logits 2-d (tokens, vocab),
/// targets 1-d (tokens) and whole (I or R): vocab-parallel logits
/// (Sharded<1>) give an Invariant loss; whole logits keep their layout (I -> I,
/// R -> R). Partial logits and logits sharded along the tokens are compile errors.
template <LayoutTag Logits, LayoutTag Targets>
struct cross_entropy {
  /// The vocabulary (the last dim) is split over the ranks.
  static constexpr bool vocab_parallel = sharded_on<Logits, 1>;
  static_assert(!std::same_as<Logits, Partial>, SHARDEX_ERR_CROSS_ENTROPY_PARTIAL);
  static_assert(!is_sharded_v<Logits> || vocab_parallel, SHARDEX_ERR_CROSS_ENTROPY_TOKENS_SHARDED);
  static_assert(std::same_as<Targets, Invariant> || std::same_as<Targets, Replicated>,
                SHARDEX_ERR_CROSS_ENTROPY_TARGETS_WHOLE);
  /// The result's layout.
  using type = std::conditional_t<vocab_parallel, Invariant, Logits>;
};
}  // namespace rules

/// @brief The node of `cross_entropy(logits, targets)`; its layout is rules::cross_entropy's.
template <TensorExpr Logits, TensorExpr Targets>
class CrossEntropy {
public:
  ///@{
  /// The TensorExpr interface (a 0-d result on the logits' communicator), the
  /// rule, the operands and the options; for explain, the operands and the step.
  static constexpr const char* node_name = "cross_entropy";
  using value_type = typename Logits::value_type;
  using device_type = typename Logits::device_type;
  using rule = rules::cross_entropy<typename Logits::layout_type, typename Targets::layout_type>;
  using layout_type = typename rule::type;
  static_assert(Scalar<value_type>, SHARDEX_ERR_TOKEN_IDS_FLOAT_ONLY);
  static_assert(TokenId<typename Targets::value_type>, SHARDEX_ERR_CROSS_ENTROPY_TARGETS_NOT_INTEGER);
  static_assert(std::same_as<typename Targets::device_type, device_type>, SHARDEX_ERR_EMBEDDING_DEVICES);

  /// The node (cross_entropy() builds it).
  CrossEntropy(Logits logits, Targets targets, CrossEntropyOptions o)
      : logits_(std::move(logits)), targets_(std::move(targets)), options_(o) {}
  [[nodiscard]] Shape shape() const { return Shape{}; }
  [[nodiscard]] decltype(auto) comm() const { return logits_.comm(); }
  [[nodiscard]] layout_mapping<layout_type> mapping() const { return {}; }
  [[nodiscard]] const Logits& logits() const noexcept { return logits_; }
  [[nodiscard]] const Targets& targets() const noexcept { return targets_; }
  [[nodiscard]] const CrossEntropyOptions& options() const noexcept { return options_; }
  [[nodiscard]] std::tuple<const Logits&, const Targets&> operands() const noexcept { return {logits_, targets_}; }
  [[nodiscard]] PlanStep explain_step() const {
    PlanStep s =
        PlanStep::local(node_name, "(" + layout_name(logits_.mapping()) + ", " + layout_name(targets_.mapping()) + ")",
                        layout_name(mapping()));
    if constexpr (rule::vocab_parallel) {
      // The row maxima (MAX), then the packed (sum of exp, target logit) pairs (SUM).
      s.communicates = true;
      s.strategy = "all_reduce MAX + all_reduce SUM";
      s.bytes =
          3 * (logits_.shape().rank() > 0 ? logits_.shape()[0] : 0) * static_cast<std::int64_t>(sizeof(value_type));
    }
    return s;
  }
  ///@}

private:
  Logits logits_;
  Targets targets_;
  CrossEntropyOptions options_;
};

/// The cross-entropy of logits (tokens, vocab) against targets (tokens), lazy;
/// see rules::cross_entropy for the layouts.
template <TensorExpr Logits, TensorExpr Targets>
auto cross_entropy(const Logits& logits, const Targets& targets, CrossEntropyOptions options = {}) {
  return CrossEntropy<Logits, Targets>(logits, targets, options);
}

/// Runs the node (see the file's note for the collectives).
/// @throws invalid_argument on every rank if logits is not 2-d, targets not
/// 1-d of the same token count, or a target is outside [0, vocab) and not the
/// ignore index.
template <TensorExpr Logits, TensorExpr Targets>
auto evaluate(const CrossEntropy<Logits, Targets>& e) {
  using T = typename Logits::value_type;
  using I = typename Targets::value_type;
  using L = typename CrossEntropy<Logits, Targets>::layout_type;
  using Dev = typename Logits::device_type;
  constexpr bool vocab_parallel = CrossEntropy<Logits, Targets>::rule::vocab_parallel;
  auto logits = eval(e.logits());
  auto targets = eval(e.targets());
  const CrossEntropyOptions options = e.options();
  const auto call = [&] {
    return "shardex::cross_entropy(logits, targets): logits " + logits.describe() + ", targets " + targets.describe();
  };
  std::string err;
  detail::HostView<I> host_targets;
  if (logits.shape().rank() != 2 || targets.shape().rank() != 1 || targets.shape()[0] != logits.shape()[0])
    err = call() + ": logits must be 2-d (tokens, vocab) and targets 1-d with as many tokens";
  const std::int64_t vocab = logits.shape().rank() == 2 ? logits.shape()[1] : 0;
  if (err.empty()) {
    host_targets = detail::HostView<I>::template of<Dev>(targets.data(), targets.size());
    if (std::string bad = detail::first_id_outside(host_targets, vocab, 0, options.ignore_index, "targets");
        !bad.empty())
      err = "shardex::cross_entropy(logits, targets) on rank " + std::to_string(logits.rank()) + ": " + bad +
            " and not the ignore index " + std::to_string(options.ignore_index) + "; logits " + logits.describe();
  }
  detail::Signature sig;
  sig.add("cross_entropy").add(logits.shape().str()).add(targets.shape().str());
  detail::agree(logits.comm(), err, sig, call);

  const std::int64_t rows = logits.local_shape()[0], cols = logits.local_shape()[1];
  std::int64_t first = vocab_parallel ? logits.global_offset() : 0;  // (not const: see nn/embedding.hpp)
  trace::Span span(vocab_parallel ? "collective" : "local", "cross_entropy");
  // Per row, read once: its max, the sum of exp(x - max) and the target's logit. Vocab-parallel, the
  // maxima all-reduced, each rank's sums taken to the global max, then summed.
  // (Both written whole below: no zeros first.)
  auto max = Dev::template allocate_uninitialized<T>(rows);
  auto packed = Dev::template allocate_uninitialized<T>(2 * rows);  // [sum of exp per row | target logit per row]
  Dev::row_max_sum_exp_and_target(logits.data(), targets.data(), max.get(), packed.get(), packed.get() + rows, rows,
                                  cols, first);
  if constexpr (vocab_parallel) {
    auto local_max = Dev::template allocate_uninitialized<T>(rows);
    copy_elements<Dev>(max.get(), local_max.get(), rows);
    logits.comm().all_reduce_max(max.get(), rows);
    Dev::rescale_sum_exp(packed.get(), local_max.get(), max.get(), rows);
    logits.comm().all_reduce(packed.get(), 2 * rows);
  }

  const auto host_max = detail::HostView<T>::template of<Dev>(max.get(), rows);
  const auto host_packed = detail::HostView<T>::template of<Dev>(packed.get(), 2 * rows);
  // Summed in double whatever T, in token order: the same number on every rank.
  double total = 0;
  std::int64_t counted = 0;
  for (std::int64_t t = 0; t < rows; ++t) {
    if (static_cast<std::int64_t>(host_targets[static_cast<std::size_t>(t)]) == options.ignore_index) continue;
    ++counted;
    const auto u = static_cast<std::size_t>(t);
    total += std::log(static_cast<double>(host_packed[u])) + static_cast<double>(host_max[u]) -
             static_cast<double>(host_packed[static_cast<std::size_t>(rows) + u]);
  }
  const bool mean = options.reduction == LossReduction::mean;
  // As torch: the mean over no counted token is NaN (0 / 0).
  const T loss = static_cast<T>(
      mean ? (counted > 0 ? total / static_cast<double>(counted) : std::numeric_limits<double>::quiet_NaN()) : total);
  auto out = Tensor<T, L, Dev>::empty(logits.comm(), Shape{});
  Dev::upload(out.data(), &loss, 1);
  if (logits.node()) {
    out.record("cross_entropy", {logits.node()},
               [logits, targets, host_targets, max, packed, rows, cols, first, counted, mean,
                ignore = options.ignore_index](const Tensor<T, dual_t<L>, Dev>& g) {
                 T gv{};
                 Dev::download(&gv, g.data(), 1);
                 // Per row: g / tokens (or g for a sum), zero for an ignored token.
                 std::vector<T> host_scale(static_cast<std::size_t>(rows));
                 const T per_token = mean ? gv / static_cast<T>(counted) : gv;
                 for (std::size_t t = 0; t < host_scale.size(); ++t)
                   host_scale[t] = static_cast<std::int64_t>(host_targets[t]) == ignore ? T(0) : per_token;
                 auto scale = Dev::template allocate_uninitialized<T>(rows);
                 Dev::upload(scale.get(), host_scale.data(), rows);
                 auto dlogits = logits.node()->make_empty();  // written whole
                 Dev::cross_entropy_backward(logits.data(), targets.data(), max.get(), packed.get(), scale.get(),
                                             dlogits.data(), rows, cols, first);
                 logits.node()->accumulate(dlogits);
               });
  }
  return out;
}

}  // namespace shardex
