// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Lowering of a change of shard lengths along the same dim
/// (S(d)[old] -> S(d)[new]): each rank sends every other rank the overlap of
/// its old interval with that rank's new one, in one all-to-all-v or grouped
/// send/receive. Only the elements that change owner move; nothing is gathered,
/// and nothing is staged when the sharded dim is the outermost one.

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "shardex/lower/all_gather.hpp"

namespace shardex::lower {

/// The bytes the reshard below hands the backend to send on rank `me`: its
/// old rows (send_recv keeps the ones it holds in both and copies them).
inline std::int64_t reshard_sent_bytes(Strategy s, int me, const Shape& global, int dim,
                                       std::span<const std::int64_t> old_lens, std::span<const std::int64_t> new_lens,
                                       std::int64_t elem, bool has_v) {
  const auto old_offs = offsets_of(old_lens), new_offs = offsets_of(new_lens);
  const auto m = static_cast<std::size_t>(me);
  const std::int64_t row = global.outer(dim) * global.inner(dim) * elem;
  if (s == Strategy::v_collective && has_v) return old_lens[m] * row;
  const std::int64_t kept =
      std::max<std::int64_t>(0, std::min(old_offs[m + 1], new_offs[m + 1]) - std::max(old_offs[m], new_offs[m]));
  return (old_lens[m] - kept) * row;
}

/// Moves the rows of `x`, this rank's slice along `dim` under `old_lens`, to
/// `y`, its slice under `new_lens`, by the resolved strategy `s`.
template <class Dev, class Comm, class T>
void reshard(Strategy s, const Comm& comm, const T* x, T* y, const Shape& global, int dim,
             std::span<const std::int64_t> old_lens, std::span<const std::int64_t> new_lens) {
  const int n = comm.size(), me = comm.rank();
  const auto us = [](int i) { return static_cast<std::size_t>(i); };
  const auto old_offs = offsets_of(old_lens), new_offs = offsets_of(new_lens);
  const std::int64_t outer = global.outer(dim), inner = global.inner(dim);
  const std::int64_t mine_old = old_lens[us(me)], mine_new = new_lens[us(me)];
  // Overlap of old interval of rank p with new interval of rank q: [lo, hi).
  const auto overlap = [&](int p, int q) {
    const std::int64_t lo = std::max(old_offs[us(p)], new_offs[us(q)]),
                       hi = std::min(old_offs[us(p) + 1], new_offs[us(q) + 1]);
    return std::pair{lo, std::max(hi, lo)};
  };
  std::vector<std::int64_t> scount(us(n)), sdispl(us(n)), rcount(us(n)), rdispl(us(n));
  std::int64_t stotal = 0, rtotal = 0;
  for (int i = 0; i < n; ++i) {
    const auto [slo, shi] = overlap(me, i);
    scount[us(i)] = outer * (shi - slo) * inner;
    sdispl[us(i)] = stotal;
    stotal += scount[us(i)];
    const auto [rlo, rhi] = overlap(i, me);
    rcount[us(i)] = outer * (rhi - rlo) * inner;
    rdispl[us(i)] = rtotal;
    rtotal += rcount[us(i)];
  }
  // Pieces are contiguous in x and y when the sharded dim is outermost: then
  // they go straight from x into y (displacements into x and y themselves).
  const bool direct = outer == 1;
  if constexpr (Comm::has_v_collectives) {
    if (s == Strategy::v_collective && !direct) {
      // Strided rows: described to the backend (derived datatypes), which
      // moves them from x into y with no pack or unpack pass. (Packing the
      // rows sent, as all_to_all does, measured slower here from 1 MiB.)
      std::vector<StridedBlock> to(us(n)), from(us(n));
      for (int i = 0; i < n; ++i) {
        const auto [slo, shi] = overlap(me, i);
        to[us(i)] = StridedBlock::of(outer, mine_old, inner, slo - old_offs[us(me)], shi - slo);
        const auto [rlo, rhi] = overlap(i, me);
        from[us(i)] = StridedBlock::of(outer, mine_new, inner, rlo - new_offs[us(me)], rhi - rlo);
      }
      comm.exchange_blocks(x, std::span<const StridedBlock>(to), y, std::span<const StridedBlock>(from));
      return;
    }
  }
  std::shared_ptr<T[]> sbuf, rbuf;
  const T* sptr = x;
  T* rptr = y;
  if (direct) {
    for (int i = 0; i < n; ++i) {
      sdispl[us(i)] = (overlap(me, i).first - old_offs[us(me)]) * inner;
      rdispl[us(i)] = (overlap(i, me).first - new_offs[us(me)]) * inner;
    }
  } else {
    sbuf = Dev::template allocate_uninitialized<T>(stotal);
    rbuf = Dev::template allocate_uninitialized<T>(rtotal);
    for (int i = 0; i < n; ++i) {
      const auto [lo, hi] = overlap(me, i);
      Dev::copy(x, DimView{outer, mine_old, inner}.rows(lo - old_offs[us(me)], hi - lo), sbuf.get() + sdispl[us(i)],
                DimView{outer, hi - lo, inner}.all());
    }
    sptr = sbuf.get();
    rptr = rbuf.get();
  }
  if (s == Strategy::v_collective) {
    if constexpr (Comm::has_v_collectives) comm.all_to_all_v(sptr, scount, sdispl, rptr, rcount, rdispl);
  } else {
    detail::exchange_send_recv<Dev>(comm, sptr, scount, sdispl, rptr, rcount, rdispl);
  }
  if (!direct)
    for (int j = 0; j < n; ++j) {
      const auto [lo, hi] = overlap(j, me);
      Dev::copy(rbuf.get() + rdispl[us(j)], DimView{outer, hi - lo, inner}.all(), y,
                DimView{outer, mine_new, inner}.rows(lo - new_offs[us(me)], hi - lo));
    }
}

}  // namespace shardex::lower
