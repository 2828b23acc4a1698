// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `backward(loss)`: the reverse pass over the graph of `TensorNode`s
/// (tensor/grad_node.hpp) that the operations recorded, in an order that is
/// the same on every rank, with one cross-rank agreement for the whole pass.

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "shardex/core/agree.hpp"
#include "shardex/core/error.hpp"
#include "shardex/core/trace.hpp"
#include "shardex/tensor/grad_node.hpp"
#include "shardex/tensor/tensor.hpp"

namespace shardex {

namespace autodiff {

/// Every node reachable from `root`, inputs before the nodes that use them.
/// The order depends only on the graph, so it is the same on every rank and
/// the collectives of the backward pass line up.
inline std::vector<Node*> topological_order(Node* root) {
  std::vector<Node*> order;
  std::vector<std::pair<Node*, std::size_t>> stack{{root, 0}};
  std::unordered_set<Node*> seen{root};
  while (!stack.empty()) {
    auto& [n, next] = stack.back();
    if (next < n->inputs.size()) {
      Node* child = n->inputs[next++].get();
      if (seen.insert(child).second) {
        stack.emplace_back(child, 0);
      }
    } else {
      order.push_back(n);
      stack.pop_back();
    }
  }
  return order;
}

}  // namespace autodiff

namespace autodiff {

/// For each position of the reverse pass over `order`, the leaves with a
/// grad_complete hook whose gradient is complete after it: the last node of
/// the pass that has the leaf among its inputs.
/// Each position's leaves are in the order of that node's inputs, the same on
/// every rank (a hook may make a collective call).
inline std::vector<std::vector<Node*>> completed_leaves(const std::vector<Node*>& order) {
  std::vector<std::vector<Node*>> after;
  std::unordered_map<Node*, std::size_t> last;
  for (std::size_t j = 0; j < order.size(); ++j)
    for (const auto& in : order[order.size() - 1 - j]->inputs)
      if (in->is_leaf() && in->grad_complete) last[in.get()] = j;
  if (last.empty()) return after;
  after.resize(order.size());
  for (std::size_t j = 0; j < order.size(); ++j)
    for (const auto& in : order[order.size() - 1 - j]->inputs)
      if (const auto it = last.find(in.get()); it != last.end() && it->second == j) after[j].push_back(in.get());
  return after;
}

/// Each node's adjoint, outputs before their inputs; a leaf's grad_complete
/// hook right after the last adjoint that adds to its gradient.
inline void propagate_all(const std::vector<Node*>& order) {
  const auto complete_after = completed_leaves(order);
  std::size_t j = 0;
  for (auto it = order.rbegin(); it != order.rend(); ++it, ++j) {
    {
      trace::Span step("backward", (*it)->op);  // the node's adjoint (its transitions are spans of their own)
      (*it)->propagate();
    }
    (*it)->release();
    if (!complete_after.empty())
      for (Node* leaf : complete_after[j])
        if (leaf->has_grad() && leaf->grad_complete) leaf->grad_complete();  // (an earlier hook may remove it)
  }
}

/// The reverse pass from `root`, whose gradient `seed()` sets: one agreement
/// over `comm` (every rank that takes part in the graph's collectives) on
/// every collective the pass will make, in order; then each node's adjoint,
/// in an order that is the same on every rank. `what` describes the call.
///
/// `comm` null: no agreement for the whole pass; each collective agrees on
/// its own call (a pass over a mesh, whose collectives run on the axes'
/// sub-communicators with shapes that differ from one group to another).
template <class Comm, class Seed, class Describe>
void reverse_pass(Node& root, const Comm* comm, const Seed& seed, const Describe& what) {
  auto order = topological_order(&root);
  if (comm == nullptr) {
    trace::Span pass("backward", "backward(loss)");
    seed();
    propagate_all(order);
    return;
  }
  // The per-call agreements inside the pass are then skipped. Their inputs
  // are gradients the library made in the dual layouts of tensors already
  // checked forward, so a rank's own check cannot fail where a peer's passes.
  detail::Signature plan;
  plan.add("shardex::backward");
  std::int64_t calls = 0;
  for (auto it = order.rbegin(); it != order.rend(); ++it)
    if ((*it)->backward_call != 0) plan.add((*it)->backward_call), ++calls;
  plan.add(calls);
  detail::agree(*comm, "", plan, [&] { return what() + " (" + std::to_string(calls) + " collectives)"; });
  const detail::AgreedPlan agreed;
  trace::Span pass("backward", "backward(loss)");
  seed();
  propagate_all(order);
}

}  // namespace autodiff

/// Fills the gradient of every differentiable tensor `loss` depends on.
/// The objective is the sum over ranks of each rank's local loss (an
/// Invariant loss counts once), so the seed is 1 on every rank. Collective:
/// every rank calls it on the same graph.
template <Scalar T, LayoutTag L, class Device>
void backward(const Tensor<T, L, Device>& loss) {
  loss.require_valid("shardex::backward(loss)");
  if (loss.shape().numel() != 1)
    throw invalid_argument("shardex::backward(loss): the loss must hold one element, but it is " + loss.describe());
  if (!loss.node()) throw error("shardex::backward(loss): the loss does not depend on any tensor that requires_grad()");
  autodiff::reverse_pass(
      *loss.node(), &loss.comm(), [&] { loss.node()->seed(); },
      [&] {
        return "shardex::backward(loss) on rank " + std::to_string(loss.rank()) + " of " +
               std::to_string(loss.world_size()) + " (loss " + loss.describe() + ")";
      });
}

}  // namespace shardex
