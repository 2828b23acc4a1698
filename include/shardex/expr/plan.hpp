// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `Plan`: what evaluating an expression will run, as `explain(expr)`
/// returns it: each step (collective or local, transition/plan_step.hpp), its
/// strategy, the bytes this rank hands the backend to send, and the
/// simplifications that were applied.

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "shardex/transition/plan_step.hpp"

namespace shardex {

/// What evaluating an expression runs (explain(expr) returns it).
struct Plan {
  /// The forward steps, in order.
  std::vector<PlanStep> steps;
  /// Each simplification applied: the chain it replaced => the route run instead.
  std::vector<std::string> simplifications;
  /// The transitions backward(loss) runs for this expression's transitions, in
  /// the order it runs them: each one the adjoint entry of a forward step
  /// (local steps have local backward passes and are not listed).
  std::vector<PlanStep> backward;

  /// The names of the communicating steps of the backward pass, in order.
  [[nodiscard]] std::string backward_collective_names() const {
    std::string out;
    for (const auto& s : backward)
      if (s.communicates) out += (out.empty() ? "" : " ") + s.op;
    return out;
  }

  /// Number of steps that communicate.
  [[nodiscard]] int collectives() const {
    int n = 0;
    for (const auto& s : steps) n += s.communicates;
    return n;
  }
  /// The names of the communicating steps, in order: "reduce_scatter all_gather".
  [[nodiscard]] std::string collective_names() const {
    std::string out;
    for (const auto& s : steps)
      if (s.communicates) out += (out.empty() ? "" : " ") + s.op;
    return out;
  }
  /// One line per step (a collective with its strategy and this rank's bytes,
  /// a local step marked local, a matmul with its GEMM kernel), then one per
  /// simplification:
  ///   all_reduce P(sum) -> R  [all_reduce, 120 B]
  ///   simplified: reduce_scatter P(sum) -> S(0)[1,2,3,0] then all_gather S(0)[1,2,3,0] -> R => all_reduce P(sum) -> R
  [[nodiscard]] std::string str() const {
    std::ostringstream os;
    for (const auto& s : steps) {
      os << s.op << " " << s.from << " -> " << s.to;
      if (s.communicates)
        os << "  [" << s.strategy << ", " << s.bytes << " B]";
      else if (s.strategy.empty())
        os << "  [local]";
      else
        os << "  [local, " << s.strategy << "]";  // a matmul's GEMM kernel
      os << "\n";
    }
    for (const auto& s : simplifications) os << "simplified: " << s << "\n";
    return os.str();
  }
};

}  // namespace shardex
