// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Lowering plans of all_gather over uneven shards, written once over
/// `CollectiveBackend` and `DeviceMemory`.
///
/// Shapes: the output is (outer, N, inner) around the sharded dim, rank i's
/// piece is (outer, lens[i], inner) at row offset offs[i]. When outer == 1 (the
/// sharded dim is the outermost non-trivial one) every piece is contiguous in
/// the output, and each plan receives straight into it, with no staging copy.
/// Strided pieces go through one unpack pass, except with v_collective on a
/// backend with a block exchange (MPI's derived datatypes), which places them.

#include <cstdint>
#include <span>
#include <vector>

#include "shardex/core/shape.hpp"
#include "shardex/core/strided_block.hpp"
#include "shardex/layout/lengths.hpp"
#include "shardex/lower/backend.hpp"
#include "shardex/lower/strategy.hpp"

namespace shardex::lower {

namespace detail {
/// Counts and displacements, in elements, of the pieces in rank-major order.
struct RankMajor {
  std::vector<std::int64_t> counts, displs;
  std::int64_t total = 0;
  RankMajor(std::span<const std::int64_t> lens, std::int64_t elems_per_row) : counts(lens.size()), displs(lens.size()) {
    for (std::size_t i = 0; i < lens.size(); ++i) {
      counts[i] = lens[i] * elems_per_row;
      displs[i] = total;
      total += counts[i];
    }
  }
};

/// The send_recv lowering of an exchange (all_to_all, reshard): the own piece
/// copied locally, the others in one grouped send/receive ring. In round k
/// rank me sends to me + k while it receives from me - k, so every pair meets
/// in the same round. Counts and displacements are in elements.
template <class Dev, class Comm, class T>
void exchange_send_recv(const Comm& comm, const T* send, std::span<const std::int64_t> send_counts,
                        std::span<const std::int64_t> send_displs, T* recv, std::span<const std::int64_t> recv_counts,
                        std::span<const std::int64_t> recv_displs) {
  const int n = comm.size(), me = comm.rank();
  const auto us = [](int i) { return static_cast<std::size_t>(i); };
  copy_elements<Dev>(send + send_displs[us(me)], recv + recv_displs[us(me)], send_counts[us(me)]);
  auto g = comm.group();
  for (int k = 1; k < n; ++k) {
    const int to = (me + k) % n, from = (me - k + n) % n;
    if (recv_counts[us(from)] > 0) g.recv(recv + recv_displs[us(from)], recv_counts[us(from)], from);
    if (send_counts[us(to)] > 0) g.send(send + send_displs[us(to)], send_counts[us(to)], to);
  }
  g.end();
}
}  // namespace detail

/// The bytes the all_gather below hands the backend to send on rank `me`
/// with strategy `s` (resolved): what `explain` reports for the step. The
/// test plan_runs checks it against the backend calls of every case.
inline std::int64_t all_gather_sent_bytes(Strategy s, int n, int me, const DimView& full,
                                          std::span<const std::int64_t> lens, std::int64_t elem, bool has_v) {
  const std::int64_t row = full.outer * full.inner * elem, mine = lens[static_cast<std::size_t>(me)];
  if (s == Strategy::padded) return max_of(lens) * row;
  if (s == Strategy::v_collective && has_v && full.outer != 1) return n * mine * row;  // one block per rank
  return mine * row;  // v collective, or the broadcast this rank roots
}

/// out (outer, N, inner) <- concatenation along the middle dim of every rank's
/// `local` (outer, lens[rank], inner). `s` must be resolved (not automatic).
template <class Dev, class Comm, class T>
void all_gather(Strategy s, const Comm& comm, const T* local, T* out, const DimView& full,
                std::span<const std::int64_t> lens) {
  const int n = comm.size(), me = comm.rank();
  const auto offs = offsets_of(lens);
  const std::int64_t outer = full.outer, inner = full.inner, N = full.extent;
  const std::int64_t mine = lens[static_cast<std::size_t>(me)];
  const bool direct = outer == 1;  // pieces are contiguous in `out`

  if (s == Strategy::padded) {
    const std::int64_t longest = max_of(lens), block = outer * longest * inner;
    if (block == 0) return;
    const bool even = longest * n == N;
    if (direct && even) {  // an ordinary all-gather: straight into `out`
      comm.all_gather(local, out, block);
      return;
    }
    auto send = Dev::template allocate_uninitialized<T>(block);
    Dev::copy(local, DimView{outer, mine, inner}.all(), send.get(), DimView{outer, longest, inner}.rows(0, mine));
    auto recv = Dev::template allocate_uninitialized<T>(block * n);
    comm.all_gather(send.get(), recv.get(), block);
    for (int i = 0; i < n; ++i)
      Dev::copy(recv.get() + i * block, DimView{outer, longest, inner}.rows(0, lens[static_cast<std::size_t>(i)]), out,
                full.rows(offs[static_cast<std::size_t>(i)], lens[static_cast<std::size_t>(i)]));
    return;
  }

  if constexpr (Comm::has_v_collectives) {
    if (s == Strategy::v_collective && !direct) {
      // Strided pieces: described to the backend (derived datatypes), which
      // moves them from each rank's part straight into place, no unpack pass.
      std::vector<StridedBlock> to(static_cast<std::size_t>(n)), from(static_cast<std::size_t>(n));
      for (int i = 0; i < n; ++i) {
        to[static_cast<std::size_t>(i)] = StridedBlock::contiguous(0, outer * mine * inner);
        from[static_cast<std::size_t>(i)] =
            StridedBlock::of(outer, N, inner, offs[static_cast<std::size_t>(i)], lens[static_cast<std::size_t>(i)]);
      }
      comm.exchange_blocks(local, std::span<const StridedBlock>(to), out, std::span<const StridedBlock>(from));
      return;
    }
  }
  const detail::RankMajor rank_major(lens, outer * inner);
  std::shared_ptr<T[]> stage;
  T* dst = out;  // rank-major pieces: `out` itself when direct
  if (!direct) {
    stage = Dev::template allocate_uninitialized<T>(rank_major.total);
    dst = stage.get();
  }
  if (s == Strategy::v_collective) {
    if constexpr (Comm::has_v_collectives)
      comm.all_gather_v(local, rank_major.counts[static_cast<std::size_t>(me)], dst, rank_major.counts,
                        rank_major.displs);
  } else {  // per_root: one broadcast per root, grouped
    copy_elements<Dev>(local, dst + rank_major.displs[static_cast<std::size_t>(me)],
                       rank_major.counts[static_cast<std::size_t>(me)]);
    auto g = comm.group();
    for (int i = 0; i < n; ++i)
      if (rank_major.counts[static_cast<std::size_t>(i)] > 0)
        g.broadcast(dst + rank_major.displs[static_cast<std::size_t>(i)],
                    rank_major.counts[static_cast<std::size_t>(i)], i);
    g.end();
  }
  if (!direct)
    for (int i = 0; i < n; ++i)
      Dev::copy(dst + rank_major.displs[static_cast<std::size_t>(i)],
                DimView{outer, lens[static_cast<std::size_t>(i)], inner}.all(), out,
                full.rows(offs[static_cast<std::size_t>(i)], lens[static_cast<std::size_t>(i)]));
}

}  // namespace shardex::lower
