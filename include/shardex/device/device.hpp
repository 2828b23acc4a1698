// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The `Device` concept: where a tensor's local data lives and how the
/// local math runs on it. Every expression node (expr/) is written once
/// against it; `Host` (Eigen) and `Cuda` (cuBLAS and kernels) model it.
///
/// Minimal complete definition, beyond `DeviceMemory` (lower/backend.hpp):
/// - `communicator`, the backend its tensors' collectives go through;
/// - `axpy`, `sum` over flat arrays;
/// - `gemm(GemmShape, alpha, a, b, beta, c)`: batched row-major products;
/// - `transpose_2d`, `sum_middle`, `broadcast_middle`: the layout-free moves
///   of transpose and sum over one dim;
/// - `softmax_rows`, `softmax_backward_rows`: attention's non-linear part;
/// - `fused_on_host`: true when fused element-wise trees run as a template
///   loop over host memory; otherwise `fused_forward` / `fused_backward` run
///   them as a FusedProgram (device/fused_program.hpp).
/// Laws: every primitive accepts zero sizes and then touches nothing.

#include <concepts>
#include <cstdint>

#include "shardex/lower/backend.hpp"

namespace shardex {

/// `batch` products C_i = alpha op(A_i) op(B_i) + beta C_i, row-major: op(A)
/// is m x k, op(B) is k x n, C is m x n. `lda` is the row stride of A as
/// stored (so k, or m when `ta`), likewise ldb and ldc; `stride_*` is the
/// distance between consecutive batch entries.
struct GemmShape {
  ///@{
  /// The product's sizes, whether A and B are transposed, the row strides as
  /// stored, the distances between batch entries, and the number of products
  /// (see above).
  std::int64_t m = 0, n = 0, k = 0;
  bool ta = false, tb = false;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  std::int64_t batch = 1;
  ///@}

  /// One product of contiguous matrices.
  static GemmShape plain(std::int64_t m, std::int64_t k, std::int64_t n, bool ta = false, bool tb = false) {
    return {m, n, k, ta, tb, ta ? m : k, tb ? k : n, n, 0, 0, 0, 1};
  }
};

template <class D>
concept Device = DeviceMemory<D> && requires(float* p, const float* q, std::int64_t n, const GemmShape& g) {
  typename D::communicator;
  D::axpy(n, 1.0f, q, p);
  { D::sum(q, n) } -> std::convertible_to<float>;
  D::gemm(g, 1.0f, q, q, 0.0f, p);
  D::transpose_2d(q, p, n, n);
  D::sum_middle(q, p, n, n, n);
  D::broadcast_middle(q, p, n, n, n);
  D::softmax_rows(p, n, n);
  D::softmax_backward_rows(q, p, n, n, 1.0f);
  { D::fused_on_host } -> std::convertible_to<bool>;
};

}  // namespace shardex
