// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Lowering plans of the uneven all_to_all, written once over
/// `CollectiveBackend`/`DeviceMemory`.
///
/// The input `x` is sharded along dim C (this rank holds lens_c[me] there) and
/// whole along dim S; piece i along S (lens_s[i] rows) goes to rank i. The
/// pieces received are concatenated along C in rank order: the output `y` is
/// whole along C and holds lens_s[me] along S. Each piece travels in the
/// row-major order of its own shape, so sender and receiver agree on it.

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "shardex/lower/all_gather.hpp"

namespace shardex::lower {

/// The bytes the all_to_all below hands the backend to send on rank `me`
/// (`x_shape` is this rank's local shape): what `explain` reports.
inline std::int64_t all_to_all_sent_bytes(Strategy s, int n, int me, const Shape& x_shape, int dim_c, int dim_s,
                                          std::span<const std::int64_t> lens_c, std::span<const std::int64_t> lens_s,
                                          std::int64_t elem, bool has_v) {
  if (s == Strategy::padded) {
    std::int64_t rest = 1;
    for (int d = 0; d < x_shape.rank(); ++d)
      if (d != dim_c && d != dim_s) rest *= x_shape[d];
    return n * rest * max_of(lens_c) * max_of(lens_s) * elem;
  }
  const std::int64_t all = x_shape.numel() * elem;
  if (s == Strategy::v_collective && has_v) return all;
  const DimView send_view = DimView::of(x_shape, dim_s);  // send_recv: the own piece is copied, not sent
  return all - send_view.outer * lens_s[static_cast<std::size_t>(me)] * send_view.inner * elem;
}

/// From `x`, this rank's slice along `dim_c` (lengths lens_c), to `y`, its
/// slice along `dim_s` (lengths lens_s), by the resolved strategy `s`.
template <class Dev, class Comm, class T>
void all_to_all(Strategy s, const Comm& comm, const T* x, const Shape& x_shape, T* y, const Shape& y_shape, int dim_c,
                int dim_s, std::span<const std::int64_t> lens_c, std::span<const std::int64_t> lens_s) {
  const int n = comm.size();
  const auto us = [](int i) { return static_cast<std::size_t>(i); };
  const DimView send_view = DimView::of(x_shape, dim_s);  // pieces to send: (outer, lens_s[i], inner) blocks of x
  const DimView recv_view = DimView::of(y_shape, dim_c);  // pieces received: (outer, lens_c[j], inner) blocks of y
  const auto offs_s = offsets_of(lens_s);
  const auto offs_c = offsets_of(lens_c);
  const detail::RankMajor send(lens_s, send_view.outer * send_view.inner);
  const detail::RankMajor recv(lens_c, recv_view.outer * recv_view.inner);

  const auto pack = [&](T* dst, std::span<const std::int64_t> displs) {
    for (int i = 0; i < n; ++i)
      Dev::copy(x, send_view.rows(offs_s[us(i)], lens_s[us(i)]), dst + displs[us(i)],
                DimView{send_view.outer, lens_s[us(i)], send_view.inner}.all());
  };
  const auto unpack = [&](const T* src, std::span<const std::int64_t> displs) {
    for (int j = 0; j < n; ++j)
      Dev::copy(src + displs[us(j)], DimView{recv_view.outer, lens_c[us(j)], recv_view.inner}.all(), y,
                recv_view.rows(offs_c[us(j)], lens_c[us(j)]));
  };

  if (s == Strategy::padded) {
    // Every piece in a slot of the largest piece's size (the same on all
    // ranks: the dims other than C and S times the largest lengths).
    std::int64_t rest = 1;
    for (int d = 0; d < x_shape.rank(); ++d)
      if (d != dim_c && d != dim_s) rest *= x_shape[d];
    const std::int64_t width = rest * max_of(lens_c) * max_of(lens_s);
    if (width == 0) return;
    std::vector<std::int64_t> displs(us(n));
    for (int i = 0; i < n; ++i) displs[us(i)] = i * width;
    auto sbuf = Dev::template allocate_uninitialized<T>(width * n);
    auto rbuf = Dev::template allocate_uninitialized<T>(width * n);
    pack(sbuf.get(), displs);
    comm.all_to_all(sbuf.get(), rbuf.get(), width);
    unpack(rbuf.get(), displs);
    return;
  }

  if constexpr (Comm::has_v_collectives) {
    if (s == Strategy::v_collective) {
      // The pieces received are described to the backend (derived datatypes
      // where they are strided), which writes them into y with no unpack
      // pass. Strided pieces to send go as datatypes too from
      // CostModel::mpi_pack_strided_sends_below bytes per rank (1.1-1.5x
      // faster than packing from 1 MiB); below that they are packed first
      // (faster there). Whether a side is strided, and its size, can differ by
      // rank (a rank holding one row), so every rank takes this path and makes
      // the same call; packing or not is each rank's own (the elements travel
      // in the same order either way).
      std::shared_ptr<T[]> packed;
      const T* from_ptr = x;
      std::vector<StridedBlock> to(us(n)), from(us(n));
      const bool pack_sends = send_view.outer != 1 && send.total * static_cast<std::int64_t>(sizeof(T)) <
                                                          CostModel{}.mpi_pack_strided_sends_below;
      if (pack_sends) {
        packed = Dev::template allocate_uninitialized<T>(send.total);
        pack(packed.get(), send.displs);
        from_ptr = packed.get();
      }
      for (int i = 0; i < n; ++i) {
        to[us(i)] = pack_sends ? StridedBlock::contiguous(send.displs[us(i)], send.counts[us(i)])
                               : StridedBlock::of(send_view.outer, send_view.extent, send_view.inner, offs_s[us(i)],
                                                  lens_s[us(i)]);
        from[us(i)] =
            StridedBlock::of(recv_view.outer, recv_view.extent, recv_view.inner, offs_c[us(i)], lens_c[us(i)]);
      }
      comm.exchange_blocks(from_ptr, std::span<const StridedBlock>(to), y, std::span<const StridedBlock>(from));
      return;
    }
  }
  std::shared_ptr<T[]> sstage, rstage;
  const T* sptr = x;  // pieces contiguous in x when the S dim is outermost
  T* rptr = y;        // and in y when the C dim is outermost
  if (send_view.outer != 1) {
    sstage = Dev::template allocate_uninitialized<T>(send.total);
    pack(sstage.get(), send.displs);
    sptr = sstage.get();
  }
  if (recv_view.outer != 1) {
    rstage = Dev::template allocate_uninitialized<T>(recv.total);
    rptr = rstage.get();
  }
  // Displacements into x / y themselves when no staging is used.
  std::vector<std::int64_t> sdispls = send.displs, rdispls = recv.displs;
  if (send_view.outer == 1)
    for (int i = 0; i < n; ++i) sdispls[us(i)] = offs_s[us(i)] * send_view.inner;
  if (recv_view.outer == 1)
    for (int j = 0; j < n; ++j) rdispls[us(j)] = offs_c[us(j)] * recv_view.inner;

  // send_recv (v_collective returned above).
  detail::exchange_send_recv<Dev>(comm, sptr, send.counts, sdispls, rptr, recv.counts, rdispls);
  if (recv_view.outer != 1) unpack(rptr, recv.displs);
}

}  // namespace shardex::lower
