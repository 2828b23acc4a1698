// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `Elementwise<Op, Args...>`: fused element-wise expressions.
///
/// `gelu(a * b + c)` is one node tree; evaluating it runs one pass over the
/// local elements with no temporaries, and records one autodiff node whose
/// backward is one more pass (per element: the forward values, then the
/// adjoints through the tree). Operands that are not element-wise (a matmul,
/// a transition) are evaluated first and enter the pass as leaves.
/// `add_bias(x, b)` is the same node with `b` broadcast along x's last dim.

#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "shardex/core/compile_errors.hpp"
#include "shardex/device/elementwise_ops.hpp"
#include "shardex/device/fused_program.hpp"
#include "shardex/expr/expression.hpp"
#include "shardex/expr/rules.hpp"

namespace shardex {

/// Marks an operand broadcast along the last dim of the other operand (a bias).
template <TensorExpr E>
struct BroadcastLast {
  ///@{
  /// The TensorExpr interface: the operand's, whose layout is checked by rules::bias.
  using value_type = typename E::value_type;
  using layout_type = typename E::layout_type;
  using device_type = typename E::device_type;
  E arg;
  [[nodiscard]] Shape shape() const { return arg.shape(); }
  [[nodiscard]] decltype(auto) mapping() const { return arg.mapping(); }
  [[nodiscard]] decltype(auto) comm() const { return arg.comm(); }
  ///@}
};

namespace detail {
template <class E>
struct is_broadcast : std::false_type {};
template <class E>
struct is_broadcast<BroadcastLast<E>> : std::true_type {};

template <class Op, class... Ls>
struct elementwise_layout;
template <class Op, class A>
struct elementwise_layout<Op, A> {
  // Only a non-linear op consults rules::nonlinear (whose static_assert forbids P).
  using type = typename std::conditional_t<Op::linear, std::type_identity<A>, rules::nonlinear<A>>::type;
};
template <class A, class B>
struct elementwise_layout<ops::Add, A, B> {
  using type = typename rules::add<A, B>::type;
};
template <class A, class B>
struct elementwise_layout<ops::Sub, A, B> {
  using type = typename rules::add<A, B>::type;
};
template <class A, class B>
struct elementwise_layout<ops::Mul, A, B> {
  using type = typename rules::mul<A, B>::type;
};
template <class A, class B>
struct elementwise_layout<ops::Div, A, B> {
  using type = typename rules::div<A, B>::type;
};
template <class A>
struct elementwise_layout<ops::Shift, A> {
  using type = typename rules::shift<A>::type;
};

template <class Op, class... Args>
struct elementwise_layout_of {
  using type = typename elementwise_layout<Op, typename Args::layout_type...>::type;
};
// add_bias: the rule of rules::bias.
template <class A, class B>
struct elementwise_layout_of<ops::Add, A, BroadcastLast<B>> {
  using type = typename rules::bias<typename A::layout_type, typename B::layout_type>::type;
};
}  // namespace detail

/// @brief The node of a fused element-wise expression: `Op` (an operation of
/// device/elementwise_ops.hpp) applied to `Args...`, whose result layout is
/// given by the rule of the operation (expr/rules.hpp).
template <class Op, TensorExpr... Args>
class Elementwise {
  using First = std::tuple_element_t<0, std::tuple<Args...>>;

public:
  ///@{
  /// The TensorExpr interface: the operands' element type and device, the
  /// layout of the operation's rule, the first operand's shape and
  /// communicator, the first sharded operand's mapping.
  using value_type = typename First::value_type;
  static_assert(Scalar<value_type>, SHARDEX_ERR_TOKEN_IDS_FLOAT_ONLY);
  using device_type = typename First::device_type;
  using layout_type = typename detail::elementwise_layout_of<Op, Args...>::type;
  static_assert((std::same_as<typename Args::value_type, value_type> && ...), SHARDEX_ERR_ELEMENTWISE_MIXED_TYPES);

  /// The node of `op` on `args` (the operators and functions below build it).
  Elementwise(Op op, Args... args) : op_(op), args_(std::move(args)...) {}

  [[nodiscard]] Shape shape() const { return std::get<0>(args_).shape(); }
  [[nodiscard]] decltype(auto) comm() const { return std::get<0>(args_).comm(); }
  [[nodiscard]] layout_mapping<layout_type> mapping() const {
    if constexpr (is_sharded_v<layout_type>) {
      // The first sharded operand carries the lengths.
      return std::apply([](const auto&... a) { return first_sharded_mapping(a...); }, args_);
    } else {
      return {};
    }
  }
  /// The operation (with its constant, for Scale and Shift), and the operands.
  [[nodiscard]] const Op& op() const noexcept { return op_; }
  [[nodiscard]] const std::tuple<Args...>& args() const noexcept { return args_; }
  ///@}

private:
  template <class A, class... Rest>
  static layout_mapping<layout_type> first_sharded_mapping(const A& a, const Rest&... rest) {
    if constexpr (is_sharded_v<typename A::layout_type> && !detail::is_broadcast<A>::value)
      return a.mapping();
    else
      return first_sharded_mapping(rest...);
  }
  static layout_mapping<layout_type> first_sharded_mapping() { return {}; }

  Op op_;
  std::tuple<Args...> args_;
};

// ---- building expressions ----------------------------------------------------
/// a + b, element by element (rules::add: same layout).
template <TensorExpr A, TensorExpr B>
auto operator+(const A& a, const B& b) {
  return Elementwise<ops::Add, A, B>(ops::Add{}, a, b);
}
/// a - b, element by element (rules::add).
template <TensorExpr A, TensorExpr B>
auto operator-(const A& a, const B& b) {
  return Elementwise<ops::Sub, A, B>(ops::Sub{}, a, b);
}
/// a * b, element by element (rules::mul: no P * P).
template <TensorExpr A, TensorExpr B>
auto operator*(const A& a, const B& b) {
  return Elementwise<ops::Mul, A, B>(ops::Mul{}, a, b);
}
/// -a (linear: any layout).
template <TensorExpr A>
auto operator-(const A& a) {
  return Elementwise<ops::Neg, A>(ops::Neg{}, a);
}
///@{
/// a * c, a / c, scale(a, c) (linear: any layout).
template <TensorExpr A>
auto operator*(const A& a, double c) {
  return Elementwise<ops::Scale, A>(ops::Scale{c}, a);
}
template <TensorExpr A>
auto operator*(double c, const A& a) {
  return Elementwise<ops::Scale, A>(ops::Scale{c}, a);
}
template <TensorExpr A>
auto operator/(const A& a, double c) {
  return Elementwise<ops::Scale, A>(ops::Scale{1.0 / c}, a);
}
template <TensorExpr A>
auto scale(const A& a, double c) {
  return Elementwise<ops::Scale, A>(ops::Scale{c}, a);
}
///@}
///@{
/// a + c, c + a, a - c, c - a (rules::shift: not on a Partial tensor, which
/// would add c once per rank).
template <TensorExpr A>
auto operator+(const A& a, double c) {
  return Elementwise<ops::Shift, A>(ops::Shift{c}, a);
}
template <TensorExpr A>
auto operator+(double c, const A& a) {
  return a + c;
}
template <TensorExpr A>
auto operator-(const A& a, double c) {
  return a + (-c);
}
template <TensorExpr A>
auto operator-(double c, const A& a) {
  return -a + c;
}
///@}
/// GeLU, tanh approximation (ops::Gelu). Like every non-linear function
/// below, refused on a Partial tensor (rules::nonlinear).
template <TensorExpr A>
auto gelu(const A& a) {
  return Elementwise<ops::Gelu, A>(ops::Gelu{}, a);
}
/// max(a, 0).
template <TensorExpr A>
auto relu(const A& a) {
  return Elementwise<ops::Relu, A>(ops::Relu{}, a);
}
/// tanh(a) (math::tanh).
template <TensorExpr A>
auto tanh(const A& a) {
  return Elementwise<ops::Tanh, A>(ops::Tanh{}, a);
}
/// e^a.
template <TensorExpr A>
auto exp(const A& a) {
  return Elementwise<ops::Exp, A>(ops::Exp{}, a);
}
/// a / b, element by element (rules::div: the divisor cannot be Partial).
template <TensorExpr A, TensorExpr B>
auto operator/(const A& a, const B& b) {
  return Elementwise<ops::Div, A, B>(ops::Div{}, a, b);
}
/// The square root.
template <TensorExpr A>
auto sqrt(const A& a) {
  return Elementwise<ops::Sqrt, A>(ops::Sqrt{}, a);
}
/// 1 / sqrt(a) (a layer norm's scale).
template <TensorExpr A>
auto rsqrt(const A& a) {
  return Elementwise<ops::Rsqrt, A>(ops::Rsqrt{}, a);
}
/// The natural logarithm.
template <TensorExpr A>
auto log(const A& a) {
  return Elementwise<ops::Log, A>(ops::Log{}, a);
}
/// 1 / (1 + e^-a), computed without overflow.
template <TensorExpr A>
auto sigmoid(const A& a) {
  return Elementwise<ops::Sigmoid, A>(ops::Sigmoid{}, a);
}
/// a * sigmoid(a) (SwiGLU's gate).
template <TensorExpr A>
auto silu(const A& a) {
  return Elementwise<ops::Silu, A>(ops::Silu{}, a);
}
/// x + b with the 1-d `b` broadcast along x's last dim (see rules::bias).
template <TensorExpr X, TensorExpr B>
auto add_bias(const X& x, const B& b) {
  return Elementwise<ops::Add, X, BroadcastLast<B>>(ops::Add{}, x, BroadcastLast<B>{b});
}

// ---- evaluation ------------------------------------------------------------------
namespace detail {

/// Whether an operation's gradient reads its operands' values (all but the
/// sums, differences, negation, scaling and shift do).
template <class Op>
inline constexpr bool grad_reads_operands =
    !(std::same_as<Op, ops::Add> || std::same_as<Op, ops::Sub> || std::same_as<Op, ops::Neg> ||
      std::same_as<Op, ops::Scale> || std::same_as<Op, ops::Shift>);

/// A leaf of the fused pass: an evaluated tensor, read at i (or, `Broadcast`
/// along the last dim, at j = i mod its size), and the gradient buffer the
/// backward pass fills. The host pass walks rows, so j comes without a division;
/// which index a leaf reads is in its type, so that the host loops vectorize
/// (a choice made per element made g++ give up on them: gelu(add_bias(x, b))
/// ran at 12 ns an element, bench/RESULTS.md).
template <class T, class L, class Dev, bool Broadcast = false>
struct FusedLeaf {
  Tensor<T, L, Dev> t;
  std::int64_t mod = 0;  // 0: read at i; else at j = i % mod (mod is the last local dim); nonzero iff Broadcast
  std::optional<Tensor<T, dual_t<L>, Dev>> grad;  // while the backward pass runs
  // The host pass writes the row's contributions at grad_row[j]: grad's row
  // (a broadcast leaf: grad itself), or, for a leaf that takes no gradient,
  // a row of scratch. No branch on whether there is a gradient in the loop:
  // g++ sinks the float math under it, which only AVX-512's masks vectorize.
  T* grad_row = nullptr;
  std::vector<T> scratch{};

  [[nodiscard]] T value(std::int64_t i, std::int64_t j) const {
    if constexpr (Broadcast)
      return t.data()[j];
    else
      return t.data()[i];
  }
  /// The host's template loop visits every element once, so a leaf read at i
  /// gets its one contribution stored, on storage that is not zero-filled
  /// first; a broadcast leaf sums a contribution per row. A FusedProgram
  /// (the device pass) accumulates into zeros: `prepare(false)`.
  void backprop(std::int64_t /*i*/, std::int64_t j, T g) {
    if constexpr (Broadcast)
      grad_row[j] += g;
    else
      grad_row[j] = g;
  }
  /// Points grad_row at row r (its first element, r = i - j).
  void start_row(std::int64_t r) { grad_row = !grad ? scratch.data() : grad->data() + (Broadcast ? 0 : r); }
  /// `store_once`: the host's loop, over rows of `row` elements (see backprop);
  /// else a FusedProgram's, which takes no row.
  void prepare(bool store_once, std::int64_t row = 0) {
    if (t.node()) {
      if (store_once && mod == 0)
        grad = Tensor<T, dual_t<L>, Dev>::empty(t.comm(), t.shape(), dual_mapping<L>(t.mapping()));
      else
        grad = t.node()->make_full(T(0));
    } else if (store_once) {
      scratch.assign(static_cast<std::size_t>(row), T(0));
    }
  }
  void flush() {
    if (grad) t.node()->accumulate(*grad);
    grad.reset();
    grad_row = nullptr;
    scratch = {};
  }
  /// Appends this leaf to `p` (a device pass); returns its slot.
  int emit(FusedProgram<T>& p) const {
    const int l = p.n_leaves++;
    p.leaf[l] = t.data();
    p.leaf_grad[l] = grad ? grad->data() : nullptr;
    p.leaf_mod[l] = mod;
    p.instr[p.n_instrs] = FusedInstr{ops::leaf_code, 0, 0, l, 1.0};
    return p.n_instrs++;
  }
  static constexpr int leaves = 1, instrs = 1;
  static constexpr bool grad_reads_values = false;
  /// This leaf's tensor if the pass may write its result into it: read at i,
  /// of the result's layout, shape and lengths, and held by nobody else (an
  /// operand the evaluation made: a product's fresh output); else null.
  template <class LO>
  [[nodiscard]] const Tensor<T, LO, Dev>* storage_for(const Shape& global, const layout_mapping<LO>& m) const {
    if constexpr (std::same_as<L, LO> && !Broadcast)
      if (t.shape() == global && t.mapping() == m && t.owns_storage_alone()) return &t;
    return nullptr;
  }
  void collect(std::vector<std::shared_ptr<autodiff::Node>>& nodes) const { autodiff::add_input(nodes, t.node()); }
  /// `out` is the result of the pass. The global shapes and lengths are checked
  /// first: they are the same on every rank, so every rank throws the same
  /// error (local shapes alone can match on some ranks and not on others).
  template <class Out>
  void check(const Out& out, const char* op, const std::string& where) const {
    const Shape& global = out.shape();
    std::span<const std::int64_t> out_lens, lens;
    int out_dim = -1;
    if constexpr (is_sharded_v<typename Out::layout_type>) {
      out_lens = out.lengths();
      out_dim = Out::layout_type::dim;
    }
    if constexpr (is_sharded_v<L>) lens = t.lengths();
    const std::string head = std::string("shardex::") + op + where + ": ";
    const std::string with_lens = is_sharded_v<L> ? " with lengths " + to_string(lens) : "";
    if (mod) {
      const int last = global.rank() - 1;
      const std::int64_t extent = last >= 0 ? global[last] : 1;
      const bool split = last >= 0 && out_dim == last;  // x sharded along its last dim: the bias must be too
      if (t.shape().rank() != 1 || t.shape()[0] != extent)
        throw invalid_argument(head + "the bias " + t.describe() + " must be 1-d of extent " + std::to_string(extent) +
                               ", the last dim of x (global " + global.str() + ")");
      if (split && !(is_sharded_v<L> && std::ranges::equal(lens, out_lens)))
        throw invalid_argument(
            head + "x (global " + global.str() + ") is sharded along its last dim with lengths " + to_string(out_lens) +
            ", so the bias must be Sharded<0> with the same lengths, but it is " + t.describe() + with_lens);
      if (!split && is_sharded_v<L>)
        throw invalid_argument(head + "x (global " + global.str() +
                               ") is not sharded along its last dim, so the bias must be whole, but it is " +
                               t.describe() + with_lens);
    } else if (t.shape() != global || !std::ranges::equal(lens, out_lens)) {
      throw invalid_argument(head + "the operands must have the same global shape" +
                             (is_sharded_v<L> ? " and lengths" : "") + ": global " + global.str() +
                             (out_lens.empty() ? "" : " with lengths " + to_string(out_lens)) + " against " +
                             t.describe() + with_lens);
    }
    const Shape& local = out.local_shape();
    const std::int64_t want = mod ? (local.rank() ? local[local.rank() - 1] : 1) : local.numel();
    const bool ok = mod ? (t.local_shape().rank() == 1 && t.size() == want) : t.local_shape() == local;
    if (!ok)
      throw invalid_argument(std::string("shardex::") + op + where + ": operand " + t.describe() +
                             (mod ? " must be 1-d and match the last local dim of " : " must have the local shape ") +
                             local.str());
  }
};

template <class T, class Op, class... B>
struct FusedNode {
  Op op;
  std::tuple<B...> args;

  [[nodiscard]] T value(std::int64_t i, std::int64_t j) const {
    return std::apply([&](const auto&... a) { return op.f(a.value(i, j)...); }, args);
  }
  void backprop(std::int64_t i, std::int64_t j, T g) {
    if constexpr (sizeof...(B) == 1) {
      auto& a = std::get<0>(args);
      T ga{};
      op.df(a.value(i, j), g, ga);
      a.backprop(i, j, ga);
    } else {
      auto& a = std::get<0>(args);
      auto& b = std::get<1>(args);
      T ga{}, gb{};
      op.df(a.value(i, j), b.value(i, j), g, ga, gb);
      a.backprop(i, j, ga);
      b.backprop(i, j, gb);
    }
  }
  /// Appends the operands, then this node, to `p`; returns its slot.
  int emit(FusedProgram<T>& p) const {
    const auto slots = std::apply([&](const auto&... a) { return std::array<int, sizeof...(B)>{a.emit(p)...}; }, args);
    static_assert(ops::code_of<Op> != ops::leaf_code, SHARDEX_ERR_OP_NOT_LISTED);
    FusedInstr in{ops::code_of<Op>, slots[0], slots[sizeof...(B) - 1], 0, 1.0};
    if constexpr (ops::has_constant<Op>) in.constant = ops::constant_of(op);
    p.instr[p.n_instrs] = in;
    return p.n_instrs++;
  }
  static constexpr int leaves = (B::leaves + ...), instrs = 1 + (B::instrs + ...);
  static constexpr bool grad_reads_values = grad_reads_operands<Op> || (B::grad_reads_values || ...);
  /// The first operand's storage_for that is not null (FusedLeaf::storage_for).
  template <class LO>
  [[nodiscard]] auto storage_for(const Shape& global, const layout_mapping<LO>& m) const {
    decltype(std::get<0>(args).storage_for(global, m)) found = nullptr;
    std::apply([&](const auto&... a) { ((found = found ? found : a.storage_for(global, m)), ...); }, args);
    return found;
  }
  void prepare(bool store_once, std::int64_t row = 0) {
    std::apply([&](auto&... a) { (a.prepare(store_once, row), ...); }, args);
  }
  void start_row(std::int64_t r) {
    std::apply([&](auto&... a) { (a.start_row(r), ...); }, args);
  }
  void flush() {
    std::apply([](auto&... a) { (a.flush(), ...); }, args);
  }
  void collect(std::vector<std::shared_ptr<autodiff::Node>>& nodes) const {
    std::apply([&](const auto&... a) { (a.collect(nodes), ...); }, args);
  }
  template <class Out>
  void check(const Out& out, const char* op_name, const std::string& where) const {
    std::apply([&](const auto&... a) { (a.check(out, op_name, where), ...); }, args);
  }
};

template <TensorExpr E>
auto bind(const E& e) {
  if constexpr (is_broadcast<E>::value) {
    auto t = eval(e.arg);
    const std::int64_t m = std::max<std::int64_t>(t.size(), 1);
    return FusedLeaf<typename E::value_type, typename E::layout_type, typename E::device_type, true>{t, m, {}};
  } else if constexpr (requires {
                         e.op();
                         e.args();
                       }) {
    return std::apply(
        [&](const auto&... a) {
          return FusedNode<typename E::value_type, std::remove_cvref_t<decltype(e.op())>, decltype(bind(a))...>{
              e.op(), {bind(a)...}};
        },
        e.args());
  } else {
    return FusedLeaf<typename E::value_type, typename E::layout_type, typename E::device_type>{eval(e), 0, {}};
  }
}

}  // namespace detail

/// Runs the tree in one pass over the local elements (operands that are not
/// element-wise evaluated first), and records one node whose backward is one
/// more pass.
template <class Op, TensorExpr... Args>
auto evaluate(const Elementwise<Op, Args...>& e) {
  using T = typename Elementwise<Op, Args...>::value_type;
  using L = typename Elementwise<Op, Args...>::layout_type;
  using Dev = typename Elementwise<Op, Args...>::device_type;
  auto tree = detail::bind(e);
  using Tree = decltype(tree);
  // A device pass interprets the tree as a FusedProgram, which has room for
  // so many instructions: a longer tree is a compile error, not a surprise.
  static_assert(Dev::fused_on_host ||
                    (Tree::instrs <= FusedProgram<T>::max_instrs && Tree::leaves <= FusedProgram<T>::max_leaves),
                SHARDEX_ERR_FUSED_TOO_LONG);
  std::vector<std::shared_ptr<autodiff::Node>> inputs;
  tree.collect(inputs);
  // The pass writes every element of its result: into an operand's storage
  // where nobody else holds it and no gradient will read it (the pass reads
  // each element before it writes it), else into fresh storage. Fresh storage
  // is cold in a training step, whose activations are kept; an operand the
  // evaluation has just made is warm (bench/RESULTS.md, "Results into their
  // operands").
  auto out = [&] {
    if (!Tree::grad_reads_values || inputs.empty())
      if (const auto* t = tree.storage_for(e.shape(), e.mapping())) return t->detach();
    return Tensor<T, L, Dev>::empty(e.comm(), e.shape(), e.mapping());
  }();
  // add_bias(x, b) is an Add whose last operand is broadcast: name it as the user wrote it.
  constexpr const char* name =
      detail::is_broadcast<std::tuple_element_t<sizeof...(Args) - 1, std::tuple<Args...>>>::value ? "add_bias"
                                                                                                  : Op::name;
  tree.check(out, name, " on rank " + std::to_string(out.rank()));
  // Rows of the last local dim: a broadcast operand is read at the column j.
  const Shape& local = out.local_shape();
  const std::int64_t row = local.rank() > 0 ? local[local.rank() - 1] : 1;
  if constexpr (Dev::fused_on_host) {
    T* y = out.data();
    for (std::int64_t r = 0, n = out.size(); r < n; r += row) {
      SHARDEX_SIMD
      for (std::int64_t j = 0; j < row; ++j) y[r + j] = tree.value(r + j, j);
    }
  } else {
    FusedProgram<T> program;
    tree.emit(program);
    Dev::fused_forward(program, out.data(), out.size());
  }
  if (!inputs.empty())
    out.record(name, std::move(inputs), [tree, row](const Tensor<T, dual_t<L>, Dev>& g) mutable {
      tree.prepare(Dev::fused_on_host, row);
      if constexpr (Dev::fused_on_host) {
        const T* gy = g.data();
        // Within a row every gradient element is written by one j only (each
        // operand has its own row, FusedLeaf::grad_row), so the row's
        // iterations are independent.
        for (std::int64_t r = 0, n = g.size(); r < n; r += row) {
          tree.start_row(r);
          SHARDEX_SIMD
          for (std::int64_t j = 0; j < row; ++j) tree.backprop(r + j, j, gy[r + j]);
        }
      } else {
        FusedProgram<T> program;
        tree.emit(program);
        Dev::fused_backward(program, g.data(), g.size());
      }
      tree.flush();
    });
  return out;
}

}  // namespace shardex
