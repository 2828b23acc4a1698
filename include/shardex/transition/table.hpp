// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The entries of the transition table (see transition.hpp) and
/// `apply_transition<To>(x)`, the one function that runs any of them.
///
/// | From -> To                 | name           | lowering                          |
/// |----------------------------|----------------|-----------------------------------|
/// | `S(d) -> R`, `S(d) -> I`   | all_gather     | lower/all_gather.hpp (strategy)   |
/// | `P -> S(d)`                | reduce_scatter | lower/reduce_scatter.hpp (strategy)|
/// | `P -> R`, `P -> I`         | all_reduce     | backend all-reduce                |
/// | `R -> S(d)`, `I -> S(d)`   | slice          | local copy, no communication      |
/// | `S(d) -> P`                | zero_pad       | local copy, no communication      |
/// | `S(c) -> S(s)`, c != s     | all_to_all     | lower/all_to_all.hpp (strategy)   |
/// | `S(d)[a] -> S(d)[b]`       | reshard        | lower/reshard.hpp (strategy); nothing if a == b |
/// | `I -> R`                   | replicate      | nothing (same storage)            |
/// | `L -> L`, L in I, R, P     | identity       | nothing (same storage)            |

#include <algorithm>
#include <cstdint>
#include <string>

#include "shardex/core/agree.hpp"
#include "shardex/core/compile_errors.hpp"
#include "shardex/core/trace.hpp"
#include "shardex/core/watchdog.hpp"
#include "shardex/lower/all_gather.hpp"
#include "shardex/lower/all_to_all.hpp"
#include "shardex/lower/reduce_scatter.hpp"
#include "shardex/lower/reshard.hpp"
#include "shardex/transition/plan_step.hpp"
#include "shardex/transition/transition.hpp"

namespace shardex {

namespace detail {

/// "all_gather on rank 2 of 4: input Tensor<float32, S(1)[1,2,3,4]> global (5, 10), local (5, 3) -> R"
template <LayoutTag To, class X>
std::string describe_call(const char* name, const X& x, const layout_mapping<To>& to) {
  std::string s = std::string("shardex::") + name + " on rank " + std::to_string(x.rank()) + " of " +
                  std::to_string(x.world_size()) + ": input " + x.describe() + " -> " + layout_name<To>();
  if constexpr (is_sharded_v<To>) s += " with lengths " + to_string(to.lengths());
  return s;
}

/// The trace's arguments of a transition (core/trace.hpp): the step it ran.
template <class X, class Y>
std::string trace_args(const X& x, const Y& y, const PlanStep& ran) {
  std::string a = trace::json_string_member("from", layout_name(x.mapping())) + "," +
                  trace::json_string_member("to", layout_name(y.mapping())) + "," +
                  trace::json_string_member("shape", x.shape().str()) + "," +
                  trace::json_string_member("dtype", dtype_name<typename X::value_type>()) + "," +
                  "\"bytes_in\":" + std::to_string(x.size() * std::int64_t(sizeof(typename X::value_type))) + "," +
                  "\"bytes_out\":" + std::to_string(y.size() * std::int64_t(sizeof(typename Y::value_type)));
  if (ran.communicates)
    a += "," + trace::json_string_member("strategy", ran.strategy) + "," +
         trace::json_string_member("communicator", control_of(x.comm()).description());
  return a;
}

/// Names the call for the watchdog while the transition runs (its agreement
/// and its collectives): the text is built only if the watchdog fires.
template <LayoutTag To, class X>
auto watch_scope(const char* name, const X& x, const layout_mapping<To>& to) {
  return watchdog::Scope([name, &x, &to] { return describe_call<To>(name, x, to); });
}

/// layout_name<L>(), made once per layout type (it is hashed on every call).
template <LayoutTag L>
const std::string& cached_layout_name() {
  static const std::string n = layout_name<L>();
  return n;
}

/// What every rank must agree on about the call a transition's backward will
/// make (the adjoint entry, its shapes, lengths and strategy): `backward`
/// agrees once on these for its whole pass instead of once per collective.
template <class Adjoint, class T, LayoutTag From, LayoutTag To>
std::int64_t adjoint_signature(const Shape& shape, const layout_mapping<From>& from, const layout_mapping<To>& to,
                               Strategy s) {
  Signature sig;
  sig.add(Adjoint::name)
      .add(dtype_name<T>())
      .add(cached_layout_name<dual_t<To>>())
      .add(cached_layout_name<dual_t<From>>());
  sig.add(static_cast<std::int64_t>(s));
  for (auto e : shape.extents()) sig.add(e);
  if constexpr (is_sharded_v<From>)
    for (auto l : from.lengths()) sig.add(l);
  if constexpr (is_sharded_v<To>)
    for (auto l : to.lengths()) sig.add(l);
  return sig.value() | 1;  // never 0, which means "no collective"
}

/// The step `Entry` makes of a tensor of global shape `g` (Entry::plan),
/// after the checks of the target's mapping that planning relies on. Throws
/// invalid_argument (a bad mapping, a strategy the operation has none of).
template <class Entry, class T, LayoutTag From, LayoutTag To>
PlanStep planned(const Shape& g, const layout_mapping<From>& from_map, const layout_mapping<To>& to_map, Strategy s,
                 Ranks r) {
  if constexpr (is_sharded_v<To>) {
    if (std::string err = mapping_problem<To>(to_map, g, r.size); !err.empty()) throw invalid_argument(err);
  }
  return Entry::plan(g, from_map, to_map, s, r, static_cast<std::int64_t>(sizeof(T)));
}

/// The checks every rank can make alone and the step planned from them, then
/// (for communicating entries, and slice, whose lengths must hold on every
/// rank) the cross-rank agreement of agree.hpp on both. Returns the step,
/// which the entry then runs as planned.
template <class Entry, class X, LayoutTag To>
PlanStep prepare(const X& x, const layout_mapping<To>& to, Strategy s) {
  const char* name = Entry::name;
  if (!x.valid()) x.require_valid((std::string("shardex::") + name).c_str());
  // The call's text is built only for an error message.
  const auto call = [&] { return describe_call<To>(name, x, to); };
  std::string err;
  PlanStep step;
  try {
    step = planned<Entry, typename X::value_type>(x.shape(), x.mapping(), to, s, ranks_of(x.comm()));
  } catch (const invalid_argument& e) {
    err = call() + ": " + e.what();
  }
  Signature sig;
  sig.add(name)
      .add(dtype_name<typename X::value_type>())
      .add(cached_layout_name<typename X::layout_type>())
      .add(cached_layout_name<To>());
  sig.add(static_cast<std::int64_t>(step.lowering));
  for (auto e : x.shape().extents()) sig.add(e);
  if constexpr (is_sharded_v<typename X::layout_type>)
    for (auto l : x.lengths()) sig.add(l);
  if (err.empty()) {
    if constexpr (is_sharded_v<To>)
      for (auto l : to.lengths()) sig.add(l);
  }
  // The strategy is part of the call: name it, or a mismatch in it reads as none.
  agree(x.comm(), err, sig,
        [&] { return step.communicates && err.empty() ? call() + " (strategy " + step.strategy + ")" : call(); });
  return step;
}

/// Bytes of one index along `dim` of a tensor of global shape `g`.
inline std::int64_t row_bytes(const Shape& g, int dim, std::int64_t elem) {
  return dim < g.rank() ? g.outer(dim) * g.inner(dim) * elem : 0;
}

}  // namespace detail

// ---- all_gather: S(d) -> R | I --------------------------------------------
/// The all_gather entry, `S(d)` -> R or I: every rank receives every
/// slice (lower/all_gather.hpp, by strategy).
template <int D, class Ls, WholeLayout To>
struct transition<Sharded<D, Ls>, To> {
  ///@{
  /// The entry's members, as transition.hpp defines them: `exists`, `name`,
  /// `communicates`; `plan()`, the step it makes for a global shape, mappings,
  /// strategy and ranks; `apply()`, which runs that step and returns it in `ran`.
  static constexpr bool exists = true;
  static constexpr const char* name = "all_gather";
  static constexpr bool communicates = true;

  static PlanStep plan(const Shape& g, const layout_mapping<Sharded<D, Ls>>& from_map, const layout_mapping<To>&,
                       Strategy s, Ranks r, std::int64_t elem) {
    const Strategy resolved = resolve_strategy(s, CollectiveOp::all_gather, from_map.lengths(),
                                               detail::row_bytes(g, D, elem), r.has_v, pieces_along(g, D));
    return detail::collective_step_of(
        name, resolved, strategy_name(resolved),
        lower::all_gather_sent_bytes(resolved, r.size, r.rank, DimView::of(g, D), from_map.lengths(), elem, r.has_v));
  }

  template <class T, class Dev>
  static Tensor<T, To, Dev> apply(const Tensor<T, Sharded<D, Ls>, Dev>& x, const layout_mapping<To>& to, Strategy s,
                                  PlanStep& ran) {
    const auto watched = detail::watch_scope<To>(name, x, to);
    ran = detail::prepare<transition>(x, to, s);
    auto out = Tensor<T, To, Dev>::empty(x.comm(), x.shape());  // every row is received
    lower::all_gather<Dev>(ran.lowering, x.comm(), x.data(), out.data(), DimView::of(x.shape(), D), x.lengths());
    return out;
  }
  ///@}
};

// ---- reduce_scatter: P -> S(d) ---------------------------------------------
/// The reduce_scatter entry, P -> `S(d)`: rank r receives its slice of the
/// sum (lower/reduce_scatter.hpp, by strategy).
template <int D, class Ls>
struct transition<Partial, Sharded<D, Ls>> {
  ///@{
  /// The entry's members, as transition.hpp defines them: `exists`, `name`,
  /// `communicates`; `plan()`, the step it makes for a global shape, mappings,
  /// strategy and ranks; `apply()`, which runs that step and returns it in `ran`.
  static constexpr bool exists = true;
  static constexpr const char* name = "reduce_scatter";
  static constexpr bool communicates = true;

  static PlanStep plan(const Shape& g, const layout_mapping<Partial>&, const layout_mapping<Sharded<D, Ls>>& to_map,
                       Strategy s, Ranks r, std::int64_t elem) {
    const Strategy resolved = resolve_strategy(s, CollectiveOp::reduce_scatter, to_map.lengths(),
                                               detail::row_bytes(g, D, elem), r.has_v, pieces_along(g, D));
    return detail::collective_step_of(
        name, resolved, strategy_name(resolved),
        lower::reduce_scatter_sent_bytes(resolved, r.size, DimView::of(g, D), to_map.lengths(), elem));
  }

  template <class T, class Dev>
  static Tensor<T, Sharded<D, Ls>, Dev> apply(const Tensor<T, Partial, Dev>& x,
                                              const layout_mapping<Sharded<D, Ls>>& to, Strategy s, PlanStep& ran) {
    const auto watched = detail::watch_scope<Sharded<D, Ls>>(name, x, to);
    ran = detail::prepare<transition>(x, to, s);
    auto out = Tensor<T, Sharded<D, Ls>, Dev>::empty(x.comm(), x.shape(), to);  // written whole by the reduction
    lower::reduce_scatter<Dev>(ran.lowering, x.comm(), x.data(), out.data(), DimView::of(x.shape(), D), to.lengths());
    return out;
  }
  ///@}
};

// ---- all_reduce: P -> R | I -------------------------------------------------
/// The all_reduce entry, P -> R or I: every rank receives the sum, by the
/// backend's all-reduce.
template <WholeLayout To>
struct transition<Partial, To> {
  ///@{
  /// The entry's members, as transition.hpp defines them: `exists`, `name`,
  /// `communicates`; `plan()`, the step it makes for a global shape, mappings,
  /// strategy and ranks; `apply()`, which runs that step and returns it in `ran`.
  static constexpr bool exists = true;
  static constexpr const char* name = "all_reduce";
  static constexpr bool communicates = true;

  /// One lowering, the backend's all-reduce (the strategy does not apply).
  static PlanStep plan(const Shape& g, const layout_mapping<Partial>&, const layout_mapping<To>&, Strategy, Ranks,
                       std::int64_t elem) {
    return detail::collective_step_of(name, Strategy::automatic, "all_reduce", g.numel() * elem);
  }

  template <class T, class Dev>
  static Tensor<T, To, Dev> apply(const Tensor<T, Partial, Dev>& x, const layout_mapping<To>& to, Strategy s,
                                  PlanStep& ran) {
    const auto watched = detail::watch_scope<To>(name, x, to);
    ran = detail::prepare<transition>(x, to, s);
    // Out of place, straight into the result: no copy of x first.
    auto out = Tensor<T, To, Dev>::empty(x.comm(), x.shape());
    x.comm().all_reduce(static_cast<const T*>(x.data()), out.data(), out.size());
    return out;
  }
  /// The sum into x's storage (MPI_IN_PLACE), which the result takes over: no
  /// output allocated and written cold. A row-parallel product's partial sums
  /// are still in cache; a fresh output is not, and the all-reduce of GPT-2's
  /// 256 x 768 ones took 1.5-2x as long into it (bench/RESULTS.md).
  template <class T, class Dev>
  static Tensor<T, To, Dev> apply_in_place(const Tensor<T, Partial, Dev>& x, const layout_mapping<To>& to, Strategy s,
                                           PlanStep& ran) {
    const auto watched = detail::watch_scope<To>(name, x, to);
    ran = detail::prepare<transition>(x, to, s);
    x.comm().all_reduce(x.data(), x.size());
    return x.template reinterpret_as<To>();
  }
  ///@}
};

// ---- slice: R | I -> S(d) (no communication) ---------------------------------
/// The slice entry, R or I -> `S(d)`: each rank copies its slice. No
/// communication, but the ranks agree that the lengths are valid.
template <WholeLayout From, int D, class Ls>
struct transition<From, Sharded<D, Ls>> {
  ///@{
  /// The entry's members, as transition.hpp defines them: `exists`, `name`,
  /// `communicates`; `plan()`, the step it makes for a global shape, mappings,
  /// strategy and ranks; `apply()`, which runs that step and returns it in `ran`.
  static constexpr bool exists = true;
  static constexpr const char* name = "slice";
  static constexpr bool communicates = false;

  static PlanStep plan(const Shape&, const layout_mapping<From>&, const layout_mapping<Sharded<D, Ls>>&, Strategy,
                       Ranks, std::int64_t) {
    return detail::step_of(name);
  }

  template <class T, class Dev>
  static Tensor<T, Sharded<D, Ls>, Dev> apply(const Tensor<T, From, Dev>& x, const layout_mapping<Sharded<D, Ls>>& to,
                                              Strategy s, PlanStep& ran) {
    // No communication, but the lengths must be valid on every rank: the
    // ranks agree on them like a collective's (a bad one throws everywhere).
    ran = detail::prepare<transition>(x, to, s);
    auto out = Tensor<T, Sharded<D, Ls>, Dev>::empty(x.comm(), x.shape(), to);  // the copy writes it whole
    const DimView v = DimView::of(x.shape(), D);
    Dev::copy(x.data(), v.rows(out.global_offset(), out.local_shape()[D]), out.data(),
              DimView{v.outer, out.local_shape()[D], v.inner}.all());
    return out;
  }
  ///@}
};

// ---- zero_pad: S(d) -> P (no communication) ----------------------------------
/// The zero_pad entry, `S(d)` -> P: the slice in place in zeros of the global
/// shape; no communication (the adjoint of slice).
template <int D, class Ls>
struct transition<Sharded<D, Ls>, Partial> {
  ///@{
  /// The entry's members, as transition.hpp defines them: `exists`, `name`,
  /// `communicates`; `plan()`, the step it makes for a global shape, mappings,
  /// strategy and ranks; `apply()`, which runs that step and returns it in `ran`.
  static constexpr bool exists = true;
  static constexpr const char* name = "zero_pad";
  static constexpr bool communicates = false;

  static PlanStep plan(const Shape&, const layout_mapping<Sharded<D, Ls>>&, const layout_mapping<Partial>&, Strategy,
                       Ranks, std::int64_t) {
    return detail::step_of(name);
  }

  template <class T, class Dev>
  static Tensor<T, Partial, Dev> apply(const Tensor<T, Sharded<D, Ls>, Dev>& x, const layout_mapping<Partial>& to,
                                       Strategy s, PlanStep& ran) {
    ran = plan(x.shape(), x.mapping(), to, s, {}, 0);
    auto out = Tensor<T, Partial, Dev>::zeroed(x.comm(), x.shape());
    const DimView v = DimView::of(x.shape(), D);
    Dev::copy(x.data(), DimView{v.outer, x.local_shape()[D], v.inner}.all(), out.data(),
              v.rows(x.global_offset(), x.local_shape()[D]));
    return out;
  }
  ///@}
};

// ---- all_to_all: S(c) -> S(s), c != s ----------------------------------------
/// The all_to_all entry, `S(c)` -> `S(s)` with c != s: the pieces change
/// owners (lower/all_to_all.hpp, by strategy).
template <int C, class Lc, int S, class Ls>
requires(C != S) struct transition<Sharded<C, Lc>, Sharded<S, Ls>> {
  ///@{
  /// The entry's members, as transition.hpp defines them: `exists`, `name`,
  /// `communicates`; `plan()`, the step it makes for a global shape, mappings,
  /// strategy and ranks; `apply()`, which runs that step and returns it in `ran`.
  static constexpr bool exists = true;
  static constexpr const char* name = "all_to_all";
  static constexpr bool communicates = true;

  static PlanStep plan(const Shape& g, const layout_mapping<Sharded<C, Lc>>& from_map,
                       const layout_mapping<Sharded<S, Ls>>& to_map, Strategy s, Ranks r, std::int64_t elem) {
    const Strategy resolved = resolve_strategy(s, CollectiveOp::all_to_all, to_map.lengths(),
                                               detail::row_bytes(g, S, elem), r.has_v, pieces_along(g, std::max(C, S)));
    return detail::collective_step_of(
        name, resolved, strategy_name(resolved),
        lower::all_to_all_sent_bytes(resolved, r.size, r.rank, local_shape(g, from_map, r.rank), C, S,
                                     from_map.lengths(), to_map.lengths(), elem, r.has_v));
  }

  template <class T, class Dev>
  static Tensor<T, Sharded<S, Ls>, Dev> apply(const Tensor<T, Sharded<C, Lc>, Dev>& x,
                                              const layout_mapping<Sharded<S, Ls>>& to, Strategy s, PlanStep& ran) {
    const auto watched = detail::watch_scope<Sharded<S, Ls>>(name, x, to);
    ran = detail::prepare<transition>(x, to, s);
    auto out = Tensor<T, Sharded<S, Ls>, Dev>::empty(x.comm(), x.shape(), to);  // every piece is received
    lower::all_to_all<Dev>(ran.lowering, x.comm(), x.data(), x.local_shape(), out.data(), out.local_shape(), C, S,
                           x.lengths(), to.lengths());
    return out;
  }
  ///@}
};

// ---- replicate: I -> R (nothing moves) -----------------------------------------
/// The replicate entry, I -> R: the same storage under the new layout;
/// its backward is an all-reduce.
template <>
struct transition<Invariant, Replicated> {
  ///@{
  /// The entry's members, as transition.hpp defines them: `exists`, `name`,
  /// `communicates`; `plan()`, the step it makes for a global shape, mappings,
  /// strategy and ranks; `apply()`, which runs that step and returns it in `ran`.
  static constexpr bool exists = true;
  static constexpr const char* name = "replicate";
  static constexpr bool communicates = false;

  static PlanStep plan(const Shape&, const layout_mapping<Invariant>&, const layout_mapping<Replicated>&, Strategy,
                       Ranks, std::int64_t) {
    return detail::step_of(name);
  }

  template <class T, class Dev>
  static Tensor<T, Replicated, Dev> apply(const Tensor<T, Invariant, Dev>& x, const layout_mapping<Replicated>& to,
                                          Strategy s, PlanStep& ran) {
    ran = plan(x.shape(), x.mapping(), to, s, {}, 0);
    return x.template reinterpret_as<Replicated>();
  }
  ///@}
};

// ---- reshard: S(d)[a] -> S(d)[b] ---------------------------------------------------
/// The reshard entry, `S(d)[a]` -> `S(d)[b]`: rows move to the ranks the new
/// lengths give them (lower/reshard.hpp, by strategy); nothing moves if a == b.
template <int D, class La, class Lb>
struct transition<Sharded<D, La>, Sharded<D, Lb>> {
  ///@{
  /// The entry's members, as transition.hpp defines them: `exists`, `name`,
  /// `communicates`; `plan()`, the step it makes for a global shape, mappings,
  /// strategy and ranks; `apply()`, which runs that step and returns it in `ran`.
  static constexpr bool exists = true;
  static constexpr const char* name = "reshard";
  static constexpr bool communicates = true;

  /// To the same lengths the step moves nothing (`moves` false): it is not run.
  static PlanStep plan(const Shape& g, const layout_mapping<Sharded<D, La>>& from_map,
                       const layout_mapping<Sharded<D, Lb>>& to_map, Strategy s, Ranks r, std::int64_t elem) {
    const Strategy resolved = resolve_strategy(s, CollectiveOp::reshard, to_map.lengths(),
                                               detail::row_bytes(g, D, elem), r.has_v, pieces_along(g, D));
    const bool moves = !std::ranges::equal(from_map.lengths(), to_map.lengths());
    PlanStep step = detail::collective_step_of(
        name, resolved, strategy_name(resolved),
        moves ? lower::reshard_sent_bytes(resolved, r.rank, g, D, from_map.lengths(), to_map.lengths(), elem, r.has_v)
              : 0);
    step.moves = moves;
    return step;
  }

  template <class T, class Dev>
  static Tensor<T, Sharded<D, Lb>, Dev> apply(const Tensor<T, Sharded<D, La>, Dev>& x,
                                              const layout_mapping<Sharded<D, Lb>>& to, Strategy s, PlanStep& ran) {
    if constexpr (std::same_as<La, Lb> && is_static_lengths_v<La>) {
      ran = detail::step_of(name);  // the same static lengths: nothing to do
      ran.moves = false;
      return x;
    } else {
      // Agree first: a rank whose lengths already match must not return while
      // a peer (with other lengths, a bug to report) waits in the exchange.
      const auto watched = detail::watch_scope<Sharded<D, Lb>>(name, x, to);
      ran = detail::prepare<transition>(x, to, s);
      if (!ran.moves) return x.template reinterpret_as<Sharded<D, Lb>>(to);
      auto out = Tensor<T, Sharded<D, Lb>, Dev>::empty(x.comm(), x.shape(), to);  // every new row arrives
      lower::reshard<Dev>(ran.lowering, x.comm(), x.data(), out.data(), x.shape(), D, x.lengths(), to.lengths());
      return out;
    }
  }
  ///@}
};

// ---- identity: L -> L for the unsharded layouts --------------------------------------
/// The identity entry, L -> L for I, R and P: nothing to do.
template <LayoutTag L>
requires(!is_sharded_v<L>) struct transition<L, L> {
  ///@{
  /// The entry's members, as transition.hpp defines them: `exists`, `name`,
  /// `communicates`; `plan()`, the step it makes for a global shape, mappings,
  /// strategy and ranks; `apply()`, which runs that step and returns it in `ran`.
  static constexpr bool exists = true;
  static constexpr const char* name = "identity";
  static constexpr bool communicates = false;

  static PlanStep plan(const Shape&, const layout_mapping<L>&, const layout_mapping<L>&, Strategy, Ranks,
                       std::int64_t) {
    PlanStep step = detail::step_of(name);
    step.moves = false;
    return step;
  }

  template <class T, class Dev>
  static Tensor<T, L, Dev> apply(const Tensor<T, L, Dev>& x, const layout_mapping<L>& to, Strategy s, PlanStep& ran) {
    ran = plan(x.shape(), x.mapping(), to, s, {}, 0);
    return x;
  }
  ///@}
};

namespace detail {

/// Whether a table entry has apply_in_place (transition.hpp).
template <class Entry, class T, class From, class To, class Dev>
concept applies_in_place = requires(const Tensor<T, From, Dev>& x, const layout_mapping<To>& to, PlanStep& ran) {
  Entry::apply_in_place(x, to, Strategy::automatic, ran);
};

/// The entry's step on x: into x's storage where `in_place` says that nobody
/// else holds it and the caller gives it up, and the entry can; else apply.
template <class Entry, Scalar T, LayoutTag From, LayoutTag To, class Dev>
Tensor<T, To, Dev> entry_step(const Tensor<T, From, Dev>& x, const layout_mapping<To>& to, Strategy s, PlanStep& ran,
                              bool in_place) {
  if constexpr (applies_in_place<Entry, T, From, To, Dev>)
    if (in_place) return Entry::apply_in_place(x, to, s, ran);
  return Entry::apply(x, to, s, ran);
}

/// apply_transition's body; `x_given_up`: the caller drops x afterwards.
template <LayoutTag To, Scalar T, LayoutTag From, class Dev>
Tensor<T, To, Dev> run_transition(const Tensor<T, From, Dev>& x, const layout_mapping<To>& to, Strategy s,
                                  bool x_given_up) {
  static_assert(has_transition_v<From, To>, SHARDEX_ERR_TRANSITION_NO_ENTRY);
  using entry = transition<From, To>;
  trace::Span span(entry::communicates ? "collective" : "local", entry::name);
  PlanStep ran;
  // (Asked before detach(), whose handle shares the storage.)
  const bool in_place = x_given_up && x.owns_storage_alone();
  Tensor<T, To, Dev> y = entry_step<entry>(x.detach(), to, s, ran, in_place);
  if (span.on()) span.set_args(trace_args(x, y, ran));
  if (x.node()) {
    using adjoint = adjoint_t<From, To>;
    static_assert(adjoint::exists, SHARDEX_ERR_ADJOINT_MISSING);
    y.record(transition<From, To>::name, {x.node()},
             [in = x.node(), m = dual_mapping<From>(x.mapping()), s](const Tensor<T, dual_t<To>, Dev>& g) {
               trace::Span span(adjoint::communicates ? "collective" : "local", adjoint::name);
               PlanStep ran;
               // g is the node's gradient, dropped right after this adjoint
               // (TensorNode::release): where nothing else holds it, the
               // adjoint may write into it. Not for a leaf's gradient, which
               // would copy a result it shares with g (TensorNode::accumulate).
               auto gx = entry_step<adjoint>(g, m, s, ran, g.owns_storage_alone() && !in->is_leaf());
               if (span.on()) span.set_args(trace_args(g, gx, ran));
               in->accumulate(std::move(gx));
             });
    if constexpr (adjoint::communicates)
      y.node()->backward_call = adjoint_signature<adjoint, T>(x.shape(), x.mapping(), y.mapping(), s);
  }
  return y;
}

}  // namespace detail

/// Runs the entry `From -> To` on x. `to` carries the target's run-time
/// lengths (for `Sharded<d>` with dynamic lengths); `s` picks the lowering.
/// If x is differentiable, the result records the backward rule, which is the
/// entry `adjoint_t<From, To>` of the same table, run with the same strategy.
template <LayoutTag To, Scalar T, LayoutTag From, class Dev>
Tensor<T, To, Dev> apply_transition(const Tensor<T, From, Dev>& x, const layout_mapping<To>& to = {},
                                    Strategy s = Strategy::automatic) {
  return detail::run_transition(x, to, s, false);
}

/// The same on an x given up (left empty, as a moved-from tensor is): where
/// nobody else holds its storage and the entry can (the all-reduce), the
/// result is computed into it and takes it over. An expression's evaluation
/// passes its fresh intermediate results so. Each rank decides for itself;
/// where ranks decide differently (a copy kept on some only), some pass
/// MPI_IN_PLACE and some do not, which Open MPI sums alike (tested at 2-4
/// ranks) though the MPI standard asks for MPI_IN_PLACE on all or none.
template <LayoutTag To, Scalar T, LayoutTag From, class Dev>
Tensor<T, To, Dev> apply_transition(Tensor<T, From, Dev>&& x, const layout_mapping<To>& to = {},
                                    Strategy s = Strategy::automatic) {
  const Tensor<T, From, Dev> given = std::move(x);
  // Only an entry that can write in place instantiates the body here; the
  // others go through the overload above, compiled once into the library.
  if constexpr (detail::applies_in_place<transition<From, To>, T, From, To, Dev>)
    return detail::run_transition(given, to, s, true);
  else
    return apply_transition(given, to, s);
}

}  // namespace shardex

// ---- compiled once -------------------------------------------------------------------
// The host entries for float and double with run-time lengths along dims 0-3
// are compiled once into the library (src/instances.cpp) instead of in every
// translation unit that uses them: `extern template` below says they exist.
// Static lengths, other dims and other devices are instantiated where they
// are used. (It cuts a DSL translation unit's compile time by a quarter:
// docs/performance.md, "Compile time".)

/// X(T, From, To) for every host entry with dynamic lengths along dims 0-3.
#define SHARDEX_HOST_TRANSITIONS_ALONG(X, T, D)                                                                \
  X(T, Sharded<D>, Replicated)                                                                                 \
  X(T, Sharded<D>, Invariant)                                                                                  \
  X(T, Partial, Sharded<D>) X(T, Replicated, Sharded<D>) X(T, Invariant, Sharded<D>) X(T, Sharded<D>, Partial) \
      X(T, Sharded<D>, Sharded<D>)
#define SHARDEX_HOST_ALL_TO_ALL_FROM(X, T, C, S1, S2, S3) \
  X(T, Sharded<C>, Sharded<S1>) X(T, Sharded<C>, Sharded<S2>) X(T, Sharded<C>, Sharded<S3>)
#define SHARDEX_HOST_TRANSITIONS(X, T)                                                                  \
  SHARDEX_HOST_TRANSITIONS_ALONG(X, T, 0)                                                               \
  SHARDEX_HOST_TRANSITIONS_ALONG(X, T, 1)                                                               \
  SHARDEX_HOST_TRANSITIONS_ALONG(X, T, 2) SHARDEX_HOST_TRANSITIONS_ALONG(X, T, 3)                       \
      SHARDEX_HOST_ALL_TO_ALL_FROM(X, T, 0, 1, 2, 3) SHARDEX_HOST_ALL_TO_ALL_FROM(X, T, 1, 0, 2, 3)     \
          SHARDEX_HOST_ALL_TO_ALL_FROM(X, T, 2, 0, 1, 3) SHARDEX_HOST_ALL_TO_ALL_FROM(X, T, 3, 0, 1, 2) \
              X(T, Partial, Replicated) X(T, Partial, Invariant) X(T, Invariant, Replicated)            \
                  X(T, Invariant, Invariant) X(T, Replicated, Replicated) X(T, Partial, Partial)

#define SHARDEX_APPLY_TRANSITION_SIGNATURE(T, From, To)                                                            \
  Tensor<T, To, Host> apply_transition<To, T, From, Host>(const Tensor<T, From, Host>&, const layout_mapping<To>&, \
                                                          Strategy);
#define SHARDEX_EXTERN_APPLY_TRANSITION(T, From, To) extern template SHARDEX_APPLY_TRANSITION_SIGNATURE(T, From, To)

namespace shardex {
SHARDEX_HOST_TRANSITIONS(SHARDEX_EXTERN_APPLY_TRANSITION, float)
SHARDEX_HOST_TRANSITIONS(SHARDEX_EXTERN_APPLY_TRANSITION, double)
}  // namespace shardex
