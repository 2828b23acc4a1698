// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Lowering plans of reduce_scatter over uneven shards (the transpose of
/// lower/all_gather.hpp), written once over `CollectiveBackend`/`DeviceMemory`.
///
/// The input is (outer, N, inner) on every rank; rank r receives the sum over
/// ranks of rows [offs[r], offs[r] + lens[r]), shape (outer, lens[r], inner).

#include <cstdint>
#include <span>

#include "shardex/lower/all_gather.hpp"

namespace shardex::lower {

/// The bytes the reduce_scatter below hands the backend to send (every
/// rank sends the whole tensor, or n padded blocks): what `explain` reports.
inline std::int64_t reduce_scatter_sent_bytes(Strategy s, int n, const DimView& full,
                                              std::span<const std::int64_t> lens, std::int64_t elem) {
  const std::int64_t row = full.outer * full.inner * elem;
  return s == Strategy::padded ? n * max_of(lens) * row : full.extent * row;
}

/// Reduce-scatters `in` (the whole (outer, N, inner) tensor on every rank)
/// into `out`, rank r's (outer, lens[r], inner) slice of the sum, by the
/// resolved strategy `s`.
template <class Dev, class Comm, class T>
void reduce_scatter(Strategy s, const Comm& comm, const T* in, T* out, const DimView& full,
                    std::span<const std::int64_t> lens) {
  const int n = comm.size(), me = comm.rank();
  const auto offs = offsets_of(lens);
  const std::int64_t outer = full.outer, inner = full.inner, N = full.extent;
  const std::int64_t mine = lens[static_cast<std::size_t>(me)];
  const bool direct = outer == 1;  // pieces are contiguous in `in`

  if (s == Strategy::padded) {
    const std::int64_t longest = max_of(lens), block = outer * longest * inner;
    if (block == 0) return;
    if (direct && longest * n == N) {  // an ordinary reduce-scatter, straight from `in`
      comm.reduce_scatter(in, out, block);
      return;
    }
    auto send = Dev::template allocate_uninitialized<T>(block * n);
    for (int i = 0; i < n; ++i)
      Dev::copy(in, full.rows(offs[static_cast<std::size_t>(i)], lens[static_cast<std::size_t>(i)]),
                send.get() + i * block, DimView{outer, longest, inner}.rows(0, lens[static_cast<std::size_t>(i)]));
    auto recv = Dev::template allocate_uninitialized<T>(block);
    comm.reduce_scatter(send.get(), recv.get(), block);
    Dev::copy(recv.get(), DimView{outer, longest, inner}.rows(0, mine), out, DimView{outer, mine, inner}.all());
    return;
  }

  const detail::RankMajor rank_major(lens, outer * inner);
  std::shared_ptr<T[]> stage;
  const T* src = in;  // rank-major pieces: `in` itself when direct
  if (!direct) {
    stage = Dev::template allocate_uninitialized<T>(rank_major.total);
    for (int i = 0; i < n; ++i)
      Dev::copy(in, full.rows(offs[static_cast<std::size_t>(i)], lens[static_cast<std::size_t>(i)]),
                stage.get() + rank_major.displs[static_cast<std::size_t>(i)],
                DimView{outer, lens[static_cast<std::size_t>(i)], inner}.all());
    src = stage.get();
  }
  if (s == Strategy::v_collective) {
    if constexpr (Comm::has_v_collectives) comm.reduce_scatter_v(src, out, rank_major.counts);
  } else {  // per_root: one reduce per root, grouped
    auto g = comm.group();
    for (int i = 0; i < n; ++i)
      if (rank_major.counts[static_cast<std::size_t>(i)] > 0)
        g.reduce(src + rank_major.displs[static_cast<std::size_t>(i)], out,
                 rank_major.counts[static_cast<std::size_t>(i)], i);
    g.end();
  }
}

}  // namespace shardex::lower
