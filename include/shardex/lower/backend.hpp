// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The two concepts every lowering plan is written against, so that a
/// plan is written once and runs on MPI/host and NCCL/CUDA alike.
///
/// **Concept `CollectiveBackend`.** Minimal complete definition: `rank`,
/// `size`, equal-count `all_gather`, `reduce_scatter`, `all_reduce`,
/// `all_to_all`, `broadcast`, `group()` returning an object with `broadcast`,
/// `reduce`, `send`, `recv` and `end`, and `has_v_collectives`. A backend whose
/// `has_v_collectives` is true also provides `all_gather_v`,
/// `reduce_scatter_v`, `all_to_all_v` and `exchange_blocks` (pieces described
/// as StridedBlocks, moved with the backend's derived datatypes).
/// Laws: a count of 0 moves nothing; the rank's own piece needs no message.
/// Models: `mpi::Communicator`, `nccl::Communicator`.
///
/// **Concept `DeviceMemory`.** Minimal complete definition: `allocate<T>(n)`
/// (zeroed), `allocate_uninitialized<T>(n)` (for buffers written whole), `fill`,
/// `copy(src, from, dst, to)` (a block of one array to a block of the same
/// shape, rows and run, of another: StridedBlock views, e.g. DimView::rows),
/// `upload` / `download` (n elements from / to host memory).
/// Models: `Host`, `Cuda`.

#include <concepts>
#include <cstdint>
#include <memory>

#include "shardex/core/strided_block.hpp"

namespace shardex {

template <class C>
concept CollectiveBackend = requires(const C& c, float* p, const float* q, std::int64_t n, int root) {
  { c.rank() } -> std::convertible_to<int>;
  { c.size() } -> std::convertible_to<int>;
  c.all_gather(q, p, n);
  c.reduce_scatter(q, p, n);
  c.all_reduce(p, n);
  c.all_to_all(q, p, n);
  c.broadcast(p, n, root);
  { C::has_v_collectives } -> std::convertible_to<bool>;
  c.group();
};

template <class D>
concept DeviceMemory = requires(float* p, const float* q, std::int64_t n) {
  { D::template allocate<float>(n) } -> std::convertible_to<std::shared_ptr<float[]>>;
  { D::template allocate_uninitialized<float>(n) } -> std::convertible_to<std::shared_ptr<float[]>>;
  D::fill(p, n, 0.0f);
  D::copy(q, StridedBlock{}, p, StridedBlock{});
  D::upload(p, q, n);
  D::download(p, q, n);
};

/// n contiguous elements from src to dst: the one block copy, on whole arrays.
template <class Dev, class T>
void copy_elements(const T* src, T* dst, std::int64_t n) {
  Dev::copy(src, StridedBlock::contiguous(0, n), dst, StridedBlock::contiguous(0, n));
}

}  // namespace shardex
