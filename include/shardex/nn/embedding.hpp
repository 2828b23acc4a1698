// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `embedding(ids, table)`: row ids[t] of a (vocab, hidden) table for
/// every token t, with the layout rule of rules::embedding. A vocab-parallel
/// table (`Sharded<0>`, any lengths, zeros included) gives a `Partial` result:
/// each rank adds the rows it owns and zeros for the others, and the user's
/// next transition (all_reduce to Invariant, or reduce_scatter along the
/// tokens for sequence parallelism) completes it, so no padding of the
/// vocabulary is ever needed. The backward is a local scatter-add into the
/// rows the rank owns, in the table's own (dual) layout; ids have no gradient.
///
/// @code
/// auto ids = Tensor<std::int64_t, Invariant>::from_local(world, {tokens}, my_ids);
/// Tensor<float, Sharded<0>> wte = ...;                     // 50257 rows over the ranks, unpadded
/// Tensor<float, Invariant> x = all_reduce<Invariant>(embedding(ids, wte));
/// @endcode

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "shardex/core/agree.hpp"
#include "shardex/core/compile_errors.hpp"
#include "shardex/expr/expression.hpp"
#include "shardex/expr/rules.hpp"
#include "shardex/transition/plan_step.hpp"

namespace shardex {

namespace rules {
/// The rule of embedding(ids, table), ids 1-d (tokens), table 2-d (vocab, hidden):
/// | table         | ids               | result                          |
/// |---------------|-------------------|---------------------------------|
/// | Sharded<0>    | I or R            | Partial (each rank's rows)      |
/// | Sharded<1>    | I or R            | Sharded<1> (the table's lengths)|
/// | Replicated    | I or R            | Replicated                      |
/// | Replicated    | Sharded<0>        | Sharded<0> (the ids' lengths)   |
/// | Invariant     | I                 | Invariant                       |
/// A Partial table, a sharded table with sharded ids, and an Invariant table
/// met by per-rank ids are compile errors.
template <LayoutTag Ids, LayoutTag Table>
struct embedding {
  /// The ids are whole on every rank.
  static constexpr bool whole_ids = std::same_as<Ids, Invariant> || std::same_as<Ids, Replicated>;
  /// The table's rows (the vocabulary) are split over the ranks.
  static constexpr bool vocab_parallel = sharded_on<Table, 0>;
  /// The table's columns (the hidden dim) are split over the ranks.
  static constexpr bool hidden_sharded = sharded_on<Table, 1>;

  static_assert(!std::same_as<Table, Partial>, SHARDEX_ERR_EMBEDDING_PARTIAL_TABLE);
  static_assert(!is_sharded_v<Table> || whole_ids, SHARDEX_ERR_EMBEDDING_SHARDED_TABLE_SHARDED_IDS);
  static_assert(!is_sharded_v<Table> || vocab_parallel || hidden_sharded, SHARDEX_ERR_EMBEDDING_TABLE_DIM);
  static_assert(!std::same_as<Table, Invariant> || std::same_as<Ids, Invariant>, SHARDEX_ERR_EMBEDDING_INVARIANT_TABLE);
  static_assert(!is_sharded_v<Ids> || sharded_on<Ids, 0>, SHARDEX_ERR_EMBEDDING_IDS_DIM);

  /// The result's layout.
  using type = std::conditional_t<
      vocab_parallel, Partial,
      std::conditional_t<hidden_sharded, Table,
                         std::conditional_t<std::same_as<Table, Invariant>, Invariant,
                                            std::conditional_t<is_sharded_v<Ids>, Ids, Replicated>>>>;
};
}  // namespace rules

/// @brief The node of `embedding(ids, table)`; its layout is rules::embedding's.
template <TensorExpr Ids, TensorExpr Table>
class Embedding {
public:
  ///@{
  /// The TensorExpr interface: the table's element type and device, the
  /// layout of rules::embedding, the shape (tokens, hidden), the table's
  /// communicator, and the mapping of the sharded operand the result keeps.
  static constexpr const char* node_name = "embedding";
  using value_type = typename Table::value_type;
  using device_type = typename Table::device_type;
  using rule = rules::embedding<typename Ids::layout_type, typename Table::layout_type>;
  using layout_type = typename rule::type;
  static_assert(TokenId<typename Ids::value_type>, SHARDEX_ERR_EMBEDDING_IDS_NOT_INTEGER);
  static_assert(Scalar<value_type>, SHARDEX_ERR_EMBEDDING_TABLE_NOT_FLOAT);
  static_assert(std::same_as<typename Ids::device_type, device_type>, SHARDEX_ERR_EMBEDDING_DEVICES);

  /// The node of the lookup of ids in table (embedding() builds it).
  Embedding(Ids ids, Table table) : ids_(std::move(ids)), table_(std::move(table)) {}
  [[nodiscard]] Shape shape() const {
    const Shape si = ids_.shape(), st = table_.shape();
    return Shape{si.rank() > 0 ? si[0] : 0, st.rank() > 1 ? st[1] : 0};
  }
  [[nodiscard]] decltype(auto) comm() const { return table_.comm(); }
  [[nodiscard]] layout_mapping<layout_type> mapping() const {
    if constexpr (rule::hidden_sharded)
      return table_.mapping();
    else if constexpr (is_sharded_v<layout_type>)
      return ids_.mapping();
    else
      return {};
  }
  /// The ids and the table.
  [[nodiscard]] const Ids& ids() const noexcept { return ids_; }
  [[nodiscard]] const Table& table() const noexcept { return table_; }
  /// For explain: the operands, and the step (local: no collective).
  [[nodiscard]] std::tuple<const Ids&, const Table&> operands() const noexcept { return {ids_, table_}; }
  [[nodiscard]] PlanStep explain_step() const {
    return PlanStep::local(node_name, "(" + layout_name(ids_.mapping()) + ", " + layout_name(table_.mapping()) + ")",
                           layout_name(mapping()));
  }
  ///@}

private:
  Ids ids_;
  Table table_;
};

/// The rows of `table` that `ids` select, lazy; see rules::embedding for the
/// layouts (a compile error names a pair that has no rule).
template <TensorExpr Ids, TensorExpr Table>
auto embedding(const Ids& ids, const Table& table) {
  return Embedding<Ids, Table>(ids, table);
}

namespace detail {

/// n elements of device memory as the host reads them: the memory itself on
/// Host (no copy), a downloaded copy on another device. Copies of the view
/// stay valid while the memory does.
template <class T>
class HostView {
public:
  template <class Dev>
  static HostView of(const T* p, std::int64_t n) {
    HostView v;
    v.n_ = n;
    if constexpr (std::same_as<Dev, Host>) {
      v.p_ = p;
    } else {
      v.copy_.resize(static_cast<std::size_t>(n));
      Dev::download(v.copy_.data(), p, n);
    }
    return v;
  }
  [[nodiscard]] const T& operator[](std::size_t i) const { return copy_.empty() ? p_[i] : copy_[i]; }
  [[nodiscard]] std::size_t size() const noexcept { return static_cast<std::size_t>(n_); }

private:
  const T* p_ = nullptr;
  std::vector<T> copy_;
  std::int64_t n_ = 0;
};

/// The first id of `ids` outside [0, bound) that is not `allowed` (a message
/// naming it, its position and the bound), or an empty string.
template <class I>
std::string first_id_outside(const HostView<I>& ids, std::int64_t bound, std::int64_t position_base,
                             std::int64_t allowed, const char* what) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto id = static_cast<std::int64_t>(ids[i]);
    if ((id < 0 || id >= bound) && id != allowed)
      return std::string(what) + "[" + std::to_string(position_base + static_cast<std::int64_t>(i)) +
             "] = " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(bound) +
             " entries (valid: 0 .. " + std::to_string(bound - 1) + ")";
  }
  return {};
}

}  // namespace detail

/// Runs the node: one local gather of rows (zeros for rows another rank
/// owns), and in the backward a scatter-add into the table's gradient.
/// @throws invalid_argument on every rank if ids is not 1-d, the table not
/// 2-d, or an id (on any rank) is outside [0, vocab).
template <TensorExpr Ids, TensorExpr Table>
auto evaluate(const Embedding<Ids, Table>& e) {
  using T = typename Embedding<Ids, Table>::value_type;
  using I = typename Ids::value_type;
  using L = typename Embedding<Ids, Table>::layout_type;
  using Dev = typename Embedding<Ids, Table>::device_type;
  using rule = typename Embedding<Ids, Table>::rule;
  auto ids = eval(e.ids());
  auto table = eval(e.table());
  const auto call = [&] {
    return "shardex::embedding(ids, table): ids " + ids.describe() + ", table " + table.describe();
  };
  std::string err;
  if (ids.shape().rank() != 1 || table.shape().rank() != 2)
    err = call() + ": ids must be 1-d (tokens) and the table 2-d (vocab, hidden)";
  const std::int64_t vocab = table.shape().rank() == 2 ? table.shape()[0] : 0;
  if (err.empty()) {
    const std::int64_t base = is_sharded_v<typename decltype(ids)::layout_type> ? ids.global_offset() : 0;
    if (std::string bad = detail::first_id_outside(detail::HostView<I>::template of<Dev>(ids.data(), ids.size()), vocab,
                                                   base, -1, "ids");
        !bad.empty())
      err = "shardex::embedding(ids, table) on rank " + std::to_string(table.rank()) + ": " + bad + "; table " +
            table.describe();
  }
  detail::Signature sig;
  sig.add("embedding").add(ids.shape().str()).add(table.shape().str());
  detail::agree(table.comm(), err, sig, call);

  const std::int64_t tokens = ids.local_shape()[0], width = table.local_shape()[1];
  // (first not const: where it is the constant 0, clang would call its capture below unneeded)
  const std::int64_t rows = table.local_shape()[0];
  std::int64_t first = rule::vocab_parallel ? table.global_offset() : 0;
  auto out = Tensor<T, L, Dev>::empty(table.comm(), e.shape(), e.mapping());  // written whole
  Dev::embedding(table.data(), ids.data(), out.data(), tokens, width, first, rows);
  if (table.node()) {
    out.record(
        "embedding", {table.node()}, [ids, table, tokens, width, first, rows](const Tensor<T, dual_t<L>, Dev>& g) {
          // Into the table's gradient itself when it has one (the tied
          // output layer's, for GPT-2): the tokens' rows only.
          table.node()->accumulate_in_place(
              [&](T* dtable) { Dev::embedding_backward(dtable, ids.data(), g.data(), tokens, width, first, rows); });
        });
  }
  return out;
}

}  // namespace shardex
