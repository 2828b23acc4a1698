// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief How an uneven collective is lowered. A strategy changes the calls
/// that run, never the result: every strategy of an operation computes the
/// same values, and its adjoint runs with the same strategy.
///
/// | strategy       | all_gather                       | reduce_scatter                    | all_to_all                     |
/// |----------------|----------------------------------|-----------------------------------|--------------------------------|
/// | `padded`       | all-gather of max-length blocks  | reduce-scatter of max-length blocks | all-to-all of max-size slots |
/// | `per_root`     | one broadcast per root, grouped  | one reduce per root, grouped      | (not applicable)               |
/// | `v_collective` | MPI_Allgatherv                   | MPI_Reduce_scatter                | MPI_Alltoallv                  |
/// | `send_recv`    | (not applicable)                 | (not applicable)                  | grouped send/receive           |
///
/// `reshard` (new lengths along the same dim) takes `v_collective` or `send_recv`.
///
/// `per_root` is the reference module's `*_by_group_call`. `automatic` asks the
/// cost model (`choose_strategy`), which knows whether the pieces are
/// contiguous or strided (`Pieces`).

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "shardex/core/error.hpp"
#include "shardex/core/shape.hpp"
#include "shardex/layout/lengths.hpp"

namespace shardex {

/// How a collective over uneven shards is lowered: `automatic` (choose_strategy
/// picks), `padded` (one equal-count collective of max-length blocks),
/// `per_root` (one broadcast or reduce per rank), `v_collective` (the backend's
/// v collective, MPI only), `send_recv` (a grouped send/receive ring, for the
/// exchanges: all_to_all, reshard). supports() says which apply to an operation.
enum class Strategy { automatic, padded, per_root, v_collective, send_recv };

/// The operations that have strategies.
enum class CollectiveOp { all_gather, reduce_scatter, all_to_all, reshard };

/// A strategy known at compile time: `strategy::padded` and its siblings.
/// Passing one instead of a `Strategy` value lets the compiler reject a
/// strategy the tensor's backend cannot run (v_collective on NCCL).
template <Strategy S>
struct strategy_constant {
  /// The strategy, as a value.
  static constexpr Strategy value = S;
  /// Converts to the run-time Strategy S.
  constexpr operator Strategy() const noexcept { return S; }  // NOLINT(google-explicit-constructor)
};

namespace strategy {
///@{
/// Strategy::automatic, padded, per_root, v_collective and send_recv as
/// compile-time constants.
inline constexpr strategy_constant<Strategy::automatic> automatic{};
inline constexpr strategy_constant<Strategy::padded> padded{};
inline constexpr strategy_constant<Strategy::per_root> per_root{};
inline constexpr strategy_constant<Strategy::v_collective> v_collective{};
inline constexpr strategy_constant<Strategy::send_recv> send_recv{};
///@}
}  // namespace strategy

template <class S>
struct is_strategy_constant : std::false_type {};
template <Strategy S>
struct is_strategy_constant<strategy_constant<S>> : std::true_type {};

/// What the transitions take as a strategy: a run-time `Strategy` or a `strategy::...` constant.
template <class S>
concept StrategyLike = std::same_as<S, Strategy> || is_strategy_constant<S>::value;

/// The strategy's name, as explain() and the errors print it ("padded", ...).
constexpr const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::automatic:
      return "automatic";
    case Strategy::padded:
      return "padded";
    case Strategy::per_root:
      return "per_root";
    case Strategy::v_collective:
      return "v_collective";
    case Strategy::send_recv:
      return "send_recv";
  }
  return "?";
}

/// The operation's name ("all_gather", ...).
constexpr const char* op_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_gather:
      return "all_gather";
    case CollectiveOp::reduce_scatter:
      return "reduce_scatter";
    case CollectiveOp::all_to_all:
      return "all_to_all";
    case CollectiveOp::reshard:
      return "reshard";
  }
  return "?";
}

/// How the pieces a collective moves lie in memory: `contiguous` when the
/// sharded dim is the outermost one with more than one index (each rank's
/// piece is one run), `strided` otherwise (rows of a column block: MPI moves
/// them as derived datatypes, or they are packed). The cost of a lowering
/// differs between the two, so the cost model takes it.
enum class Pieces { contiguous, strided };

/// The pieces of a tensor of global shape `g` cut along `dim`: strided when a
/// dim before it has more than one index. (Decided on the global shape, so
/// that every rank decides alike: a rank's local shape can hold one row.)
inline Pieces pieces_along(const Shape& g, int dim) {
  return dim < g.rank() && g.outer(dim) > 1 ? Pieces::strided : Pieces::contiguous;
}

/// Whether `op` has a lowering `s`: automatic and v_collective apply to all;
/// padded to all but reshard; per_root to all_gather and reduce_scatter;
/// send_recv to all_to_all and reshard.
constexpr bool supports(CollectiveOp op, Strategy s) {
  const bool exchange = op == CollectiveOp::all_to_all || op == CollectiveOp::reshard;
  if (s == Strategy::automatic || s == Strategy::v_collective) return true;
  if (s == Strategy::padded) return op != CollectiveOp::reshard;
  if (s == Strategy::per_root) return !exchange;
  return exchange;  // send_recv
}

/// The cost model behind `Strategy::automatic` (alpha-beta: a fixed latency per
/// call plus bytes over bandwidth; only the ratio of the two matters) for a
/// backend without v collectives, and the thresholds bench/collectives
/// measured on MPI.
struct CostModel {
  double latency_s = 20e-6;  ///< one collective call
  /// The inverse bandwidth.
  double seconds_per_byte = 1e-9;
  // On MPI (the v collectives exist), the cases bench/collectives measured a
  // lowering other than the v collective to win in (bench/RESULTS.md):
  /// Above this many bytes in all, MPI_Reduce_scatter (which allocates its
  /// temporaries on every call, fresh pages at this size) loses to one
  /// reduce per root: 1.2x at 16 MiB, 4.8x at 64 MiB on 2 ranks.
  std::int64_t mpi_reduce_scatter_max_bytes = std::int64_t(8) << 20;
  /// Up to this many bytes an all_gather over 3 to `mpi_rooted_max_ranks`
  /// ranks is faster as one broadcast per root than as MPI_Allgatherv
  /// (1.2-1.6x on 4 ranks up to 1 MiB); with 2 ranks they tie.
  std::int64_t mpi_rooted_all_gather_max_bytes = std::int64_t(1) << 20;
  /// The most ranks for which per_root can win an all_gather on MPI (see
  /// mpi_rooted_all_gather_max_bytes).
  int mpi_rooted_max_ranks = 8;
  /// Up to this many bytes an all_to_all is faster as grouped send/receive
  /// than as MPI_Alltoallv/Alltoallw (1.02-1.10x; they tie at 256 KiB and the
  /// v collective wins from 1 MiB)...
  std::int64_t mpi_all_to_all_send_recv_max_bytes = std::int64_t(256) << 10;
  /// ... and a reshard up to this many.
  std::int64_t mpi_reshard_send_recv_max_bytes = std::int64_t(64) << 10;
  /// Strided pieces: up to this many bytes an all_gather is faster as one
  /// broadcast per root than as MPI_Alltoallw of vector datatypes, whose
  /// set-up costs more than it saves at this size (1.1-1.3x on 2 and 4 ranks)...
  std::int64_t mpi_rooted_strided_all_gather_max_bytes = std::int64_t(64) << 10;
  /// ... and up to this many on 2 ranks, padded (MPI_Allgather of the longest
  /// piece, one unpack) is faster still (1.05-1.5x at 4-16 KiB).
  std::int64_t mpi_padded_strided_all_gather_max_bytes = std::int64_t(16) << 10;
  /// Not a strategy but how v_collective sends an all_to_all's strided
  /// pieces: packed into one block below this many bytes per rank, as vector
  /// datatypes from it.
  std::int64_t mpi_pack_strided_sends_below = std::int64_t(256) << 10;
};

/// Picks the strategy for `op` moving `lens[i] * row_bytes` bytes from or to
/// rank i. A backend with v collectives (MPI) takes them (bench/collectives:
/// within a few percent of the raw call) except where the CostModel's MPI
/// thresholds say another lowering measured faster; padded (the equal-count
/// collective of max-length blocks) never won there, by up to 4.5x. Otherwise (NCCL) even lengths take `padded`, which is then an
/// ordinary equal-count collective, and uneven ones the cheaper of padding
/// waste and per-root latency under the alpha-beta model.
inline Strategy choose_strategy(CollectiveOp op, std::span<const std::int64_t> lens, std::int64_t row_bytes,
                                bool backend_has_v, Pieces pieces = Pieces::contiguous, CostModel model = {}) {
  const auto n = static_cast<std::int64_t>(lens.size());
  const std::int64_t mx = max_of(lens);
  std::int64_t sum = 0, nonzero = 0;
  for (auto l : lens) {
    sum += l;
    nonzero += l > 0;
  }
  if (backend_has_v) {
    const std::int64_t total = sum * row_bytes;
    switch (op) {
      case CollectiveOp::all_gather:
        if (pieces == Pieces::strided) {
          if (n == 2 && total <= model.mpi_padded_strided_all_gather_max_bytes) return Strategy::padded;
          return n <= model.mpi_rooted_max_ranks && total <= model.mpi_rooted_strided_all_gather_max_bytes
                     ? Strategy::per_root
                     : Strategy::v_collective;
        }
        return n > 2 && n <= model.mpi_rooted_max_ranks && total <= model.mpi_rooted_all_gather_max_bytes
                   ? Strategy::per_root
                   : Strategy::v_collective;
      case CollectiveOp::reduce_scatter:
        return total > model.mpi_reduce_scatter_max_bytes ? Strategy::per_root : Strategy::v_collective;
      case CollectiveOp::all_to_all:
        return total <= model.mpi_all_to_all_send_recv_max_bytes ? Strategy::send_recv : Strategy::v_collective;
      case CollectiveOp::reshard:
        return total <= model.mpi_reshard_send_recv_max_bytes ? Strategy::send_recv : Strategy::v_collective;
    }
  }
  if (op == CollectiveOp::reshard) return Strategy::send_recv;
  if (mx * n == sum) return Strategy::padded;
  const double padded = model.latency_s + static_cast<double>(n * mx * row_bytes) * model.seconds_per_byte;
  const double rooted =
      static_cast<double>(nonzero) * model.latency_s + static_cast<double>(sum * row_bytes) * model.seconds_per_byte;
  if (op == CollectiveOp::all_to_all) return padded <= rooted ? Strategy::padded : Strategy::send_recv;
  return padded <= rooted ? Strategy::padded : Strategy::per_root;
}

/// `s`, resolved and checked for `op`: throws invalid_argument naming both if
/// the operation has no such lowering.
inline Strategy resolve_strategy(Strategy s, CollectiveOp op, std::span<const std::int64_t> lens,
                                 std::int64_t row_bytes, bool backend_has_v, Pieces pieces = Pieces::contiguous) {
  if (!supports(op, s))
    throw invalid_argument(std::string("shardex::") + op_name(op) + ": strategy " + strategy_name(s) +
                           " does not apply to this operation");
  if (s == Strategy::v_collective && !backend_has_v)
    throw invalid_argument(std::string("shardex::") + op_name(op) +
                           ": strategy v_collective needs a backend with v collectives (MPI); this backend has none");
  return s == Strategy::automatic ? choose_strategy(op, lens, row_bytes, backend_has_v, pieces) : s;
}

}  // namespace shardex
