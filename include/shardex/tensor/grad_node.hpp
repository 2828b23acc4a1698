// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief A node of the reverse-mode graph: a `Node` per differentiable
/// tensor, pointing at the nodes of its inputs; `TensorNode` holds the
/// gradient (in the dual layout) and the rule that pushes it to the inputs.
/// Each rule is recorded by the operation that made the tensor (transition/
/// for the transitions, expr/ for local math), so nobody writes a backward by
/// hand at the call site. The node is part of the tensor (this floor); the
/// pass that walks the graph is `backward()` (autodiff/backward.hpp, above).

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "shardex/tensor/tensor_fwd.hpp"

namespace shardex::autodiff {

/// @brief The reverse-mode graph's node of one differentiable tensor, its
/// type erased so that nodes of any element type and layout can be inputs.
class Node {
public:
  virtual ~Node() = default;
  /// The operation that made this tensor ("leaf" for parameters).
  const char* op = "leaf";
  /// The nodes of the tensors this one was computed from (add_input).
  std::vector<std::shared_ptr<Node>> inputs;
  /// A leaf's hook (Tensor::on_grad_complete): the reverse pass calls it
  /// once it has given the leaf all of its gradient, right after the last
  /// adjoint that adds to it.
  std::function<void()> grad_complete;
  /// Nonzero when this node's backward makes a collective call: what the ranks
  /// must agree on about it (set by apply_transition), so that backward(loss) agrees on
  /// its whole pass at once.
  std::int64_t backward_call = 0;

  /// A leaf has no inputs: a parameter (requires_grad()).
  [[nodiscard]] bool is_leaf() const noexcept { return inputs.empty(); }
  /// Whether a gradient has reached this node.
  [[nodiscard]] virtual bool has_grad() const noexcept = 0;
  /// Sets the gradient to ones (the seed of backward(loss)).
  virtual void seed() = 0;
  /// Pushes this node's gradient to its inputs.
  virtual void propagate() = 0;
  /// Drops the gradient of an intermediate once it has been propagated.
  virtual void release() = 0;
};

/// @brief The node of a `Tensor<T, L, Device>`: its gradient, in the dual
/// layout, and the rule that pushes it to the inputs.
template <class T, LayoutTag L, class Device>
class TensorNode final : public Node {
public:
  /// The gradient's type: layout dual_t<L>.
  using grad_type = Tensor<T, dual_t<L>, Device>;
  /// The gradient so far; empty until backward reaches the node.
  std::optional<grad_type> grad;
  /// Given this node's gradient, adds the contributions to the inputs' nodes.
  std::function<void(const grad_type&)> backward;
  /// A leaf's gradient storage that an optimizer's pass read and left all
  /// zeros (Tensor::zero_grad_keeping_storage): the next backward's first
  /// contribution goes into it, a weight gradient's product with beta 1,
  /// so that the BLAS makes no zeroing pass of its own over it. A first
  /// contribution nobody else holds (a bias's or a norm's gradient) is
  /// adopted instead and this storage freed; zero_grad() frees it too.
  std::optional<grad_type> zeroed;
  /// The tensor's own shape and mapping (what a ones-seed or a zero gradient needs).
  std::function<grad_type(T)> make_full;
  /// The same, uninitialized: for an adjoint that writes its whole gradient.
  std::function<grad_type()> make_empty;

  /// Whether `grad` holds a gradient.
  [[nodiscard]] bool has_grad() const noexcept override { return grad.has_value(); }
  void seed() override { grad = make_full(T(1)); }
  void propagate() override {
    if (grad && backward) backward(*grad);
  }
  void release() override {
    if (!is_leaf()) grad.reset();
  }

  /// grad += g. A leaf owns its gradient (it accumulates across steps); an
  /// intermediate takes the first contribution as it is and sums out of place
  /// afterwards, so no storage shared with another tensor is ever written.
  /// A contribution nobody else holds (a fresh result the caller drops) is
  /// adopted, and a sum nobody else holds is added to in place: no copy. A
  /// leaf's zeroed storage takes a contribution somebody else holds.
  void accumulate(const grad_type& g) {
    if (!grad && zeroed && !g.owns_storage_alone()) {
      adopt_zeroed();  // 0 + g: g's values, in storage kept, no copy made
      Device::axpy(grad->size(), T(1), g.data(), grad->data());
    } else if (!grad) {
      zeroed.reset();
      grad = is_leaf() && !g.owns_storage_alone() ? g.clone() : g;
    } else if (is_leaf() || grad->owns_storage_alone()) {
      Device::axpy(grad->size(), T(1), g.data(), grad->data());
    } else {
      grad_type sum = grad->clone();
      Device::axpy(sum.size(), T(1), g.data(), sum.data());
      grad = sum;
    }
  }

  /// grad += a product that `write_into(p, beta)` writes at p as a GEMM
  /// does (p = beta p + the product): into a sum nobody else holds, where
  /// accumulate would add in place (beta 1: no fresh storage, no second pass
  /// adding it; the three input gradients of attention's q, k and v
  /// products into their shared input's), or into the zeroed storage an
  /// optimizer left (beta 1, the same values as beta 0 into fresh storage),
  /// else into fresh storage (beta 0) that is then accumulated.
  template <class WriteInto>
  void accumulate_product(WriteInto&& write_into) {
    if (grad && (is_leaf() || grad->owns_storage_alone())) {
      write_into(grad->data(), T(1));
      return;
    }
    if (!grad && zeroed) {
      write_into(zeroed->data(), T(1));  // (adopted once written: a throw leaves no partial gradient)
      adopt_zeroed();
      return;
    }
    grad_type g = make_empty();
    write_into(g.data(), T(0));
    accumulate(g);
  }

  /// grad += a contribution that `add_into(p)` adds into a gradient's
  /// storage at p (a scatter-add that touches few rows of a large table):
  /// into this node's gradient where accumulate would add in place (no dense
  /// zeros of the table's size, no second pass over it), else into zeros
  /// first, then accumulated.
  template <class AddInto>
  void accumulate_in_place(AddInto&& add_into) {
    if (grad && (is_leaf() || grad->owns_storage_alone())) {
      add_into(grad->data());
      return;
    }
    if (!grad && zeroed) {
      add_into(zeroed->data());
      adopt_zeroed();
      return;
    }
    grad_type g = make_full(T(0));
    add_into(g.data());
    accumulate(g);
  }

private:
  void adopt_zeroed() {
    grad = std::move(*zeroed);
    zeroed.reset();
  }
};

/// Adds `n` to the inputs of a node being recorded unless it is null (a
/// tensor outside the graph) or already there (a tensor used twice): the one
/// way every operation lists its inputs.
inline void add_input(std::vector<std::shared_ptr<Node>>& inputs, std::shared_ptr<Node> n) {
  if (n && std::find(inputs.begin(), inputs.end(), n) == inputs.end()) inputs.push_back(std::move(n));
}

}  // namespace shardex::autodiff
