// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `PlanStep`: one step of a plan, as the entry of the transition table
/// that runs it plans it: the layouts with their lengths, the resolved
/// lowering, the bytes this rank hands the backend to send, whether it
/// communicates, and whether it moves anything at all. Each entry's `plan()`
/// (transition/table.hpp) makes it; the entry's `apply()` runs the step it
/// planned, and `explain` lists the same steps, so the two cannot disagree.

#include <cstdint>
#include <string>
#include <utility>

#include "shardex/layout/mapping.hpp"
#include "shardex/lower/strategy.hpp"

namespace shardex {

/// One step of a plan (see the file's note).
struct PlanStep {
  std::string op;  ///< "all_gather", "reduce_scatter", "all_reduce", "matmul", ...
  /// The source layout, with its lengths; `to`, the target.
  std::string from, to;    ///< layouts with their lengths, in the notation of layout_name() (filled by explain)
  std::string strategy;    ///< the resolved lowering's name; for a matmul its GEMM kernel; else empty for local steps
  std::int64_t bytes = 0;  ///< bytes this rank hands the backend to send (0 for local steps)
  /// Whether the step calls the backend (a collective).
  bool communicates = false;
  Strategy lowering = Strategy::automatic;  ///< the resolved lowering the step runs (communicating transitions)
  bool moves = true;                        ///< false: nothing to do for these lengths (a reshard to the same ones)

  /// A step that runs on each rank's local part alone.
  static PlanStep local(std::string op, std::string from, std::string to) {
    PlanStep s;
    s.op = std::move(op);
    s.from = std::move(from);
    s.to = std::move(to);
    return s;
  }
};

/// What planning a step needs to know of the communicator.
struct Ranks {
  ///@{
  /// The number of ranks, and this rank.
  int size = 1, rank = 0;
  ///@}
  bool has_v = false;  ///< the backend has v collectives (MPI)
};
/// The Ranks of communicator c.
template <class Comm>
Ranks ranks_of(const Comm& c) {
  return {c.size(), c.rank(), Comm::has_v_collectives};
}

namespace detail {
/// The step of the entry `name`; `collective_step_of` for a collective. The
/// layouts' labels (`from`, `to`) are left to `explain`, which prints them: a
/// transition that runs builds no string it does not need.
inline PlanStep step_of(const char* name) {
  PlanStep s;
  s.op = name;
  return s;
}
inline PlanStep collective_step_of(const char* name, Strategy lowering, const char* lowering_name, std::int64_t bytes) {
  PlanStep s = step_of(name);
  s.communicates = true;
  s.lowering = lowering;
  s.strategy = lowering_name;
  s.bytes = bytes;
  return s;
}
}  // namespace detail

}  // namespace shardex
