// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The `Host` device: tensors in host memory, local math through Eigen,
/// communication through MPI. A model of `Device` (device/device.hpp): the
/// primitives every lowering plan needs (allocate, zero, copy a block of a
/// strided array) and the local math of the expression nodes; the Cuda device
/// provides the same set with cuBLAS and kernels.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "shardex/backend/mpi/communicator.hpp"
#include "shardex/core/counters.hpp"
#include "shardex/device/device.hpp"
#include "shardex/device/host/eigen.hpp"
#include "shardex/device/host/memory_pool.hpp"
#include "shardex/device/host/threads.hpp"
#include "shardex/device/norm_ops.hpp"
#include "shardex/device/optimizer_ops.hpp"
#include "shardex/device/token_ops.hpp"

namespace shardex {

/// @brief The host device: tensors in host memory, math through Eigen and
/// plain loops, collectives through the MPI communicator.
struct Host {
  ///@{
  /// The communicator its tensors' collectives go through, and its name in messages.
  using communicator = mpi::Communicator;
  static constexpr const char* name = "host";
  ///@}
  /// Fused element-wise trees run as an inlined template loop.
  static constexpr bool fused_on_host = true;

  /// Uninitialized storage of n elements (at least one, so that an empty
  /// local part still has a distinct pointer), from the host memory pool
  /// (device/host/memory_pool.hpp): for buffers the caller overwrites whole.
  template <class T>
  static std::shared_ptr<T[]> allocate_uninitialized(std::int64_t n) {
    const std::size_t bytes = static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * sizeof(T);
    return std::shared_ptr<T[]>(static_cast<T*>(host::pool_acquire(bytes)),
                                [bytes](T* p) { host::pool_give_back(p, bytes); });
  }

  /// Zero-initialized storage of n elements (pooled as above).
  template <class T>
  static std::shared_ptr<T[]> allocate(std::int64_t n) {
    auto p = allocate_uninitialized<T>(n);
    std::memset(p.get(), 0, static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * sizeof(T));
    detail::counters_ref().bytes_zeroed += std::max<std::int64_t>(n, 0) * static_cast<std::int64_t>(sizeof(T));
    return p;
  }

  /// Sets n elements to v.
  template <class T>
  static void fill(T* p, std::int64_t n, T v) {
    std::fill(p, p + n, v);
  }

  /// Host <-> device copies: on the host, plain copies.
  template <class T>
  static void upload(T* dst, const T* src, std::int64_t n) {
    if (n <= 0) return;
    std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(T));
    detail::counters_ref().bytes_copied += n * static_cast<std::int64_t>(sizeof(T));
  }
  /// The same copy as upload.
  template <class T>
  static void download(T* dst, const T* src, std::int64_t n) {
    upload(dst, src, n);
  }

  /// y += alpha * x over n elements.
  template <class T>
  static void axpy(std::int64_t n, T alpha, const T* x, T* y) {
    for (std::int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
  }

  /// The sum of n elements (pairwise through Eigen's reduction).
  template <class T>
  static T sum(const T* x, std::int64_t n);

  /// Copies block `from` of src to block `to` of dst (the same rows and run;
  /// strides may differ). One memcpy when the block is contiguous in both.
  template <class T>
  static void copy(const T* src, const StridedBlock& from, T* dst, const StridedBlock& to) {
    const std::int64_t n = from.count();
    if (n == 0) return;
    detail::counters_ref().bytes_copied += n * static_cast<std::int64_t>(sizeof(T));
    if (from.rows == 1 || (from.stride == from.run && to.stride == to.run)) {
      std::memcpy(dst + to.offset, src + from.offset, static_cast<std::size_t>(n) * sizeof(T));
      return;
    }
    for (std::int64_t r = 0; r < from.rows; ++r)
      std::memcpy(dst + to.offset + r * to.stride, src + from.offset + r * from.stride,
                  static_cast<std::size_t>(from.run) * sizeof(T));
  }

  /// Batched row-major products through Eigen (see GemmShape).
  template <class T>
  static void gemm(const GemmShape& g, T alpha, const T* a, const T* b, T beta, T* c);

  /// out (cols x rows) = in (rows x cols) transposed.
  template <class T>
  static void transpose_2d(const T* in, T* out, std::int64_t rows, std::int64_t cols) {
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
  }

  /// out (outer, inner) = the sum over the middle dim of in (outer, extent, inner).
  template <class T>
  static void sum_middle(const T* in, T* out, std::int64_t outer, std::int64_t extent, std::int64_t inner) {
    std::fill(out, out + outer * inner, T(0));
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t j = 0; j < extent; ++j)
        for (std::int64_t i = 0; i < inner; ++i) out[o * inner + i] += in[(o * extent + j) * inner + i];
  }

  /// out (outer, extent, inner) = g (outer, inner) repeated along the middle dim.
  template <class T>
  static void broadcast_middle(const T* g, T* out, std::int64_t outer, std::int64_t extent, std::int64_t inner) {
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t j = 0; j < extent; ++j)
        std::copy(g + o * inner, g + (o + 1) * inner, out + (o * extent + j) * inner);
  }

  /// Each row of s (rows x cols) replaced by its softmax.
  template <class T>
  static void softmax_rows(T* s, std::int64_t rows, std::int64_t cols) {
    for (std::int64_t r = 0; r < rows; ++r) {
      auto row = host::ArrayMap<T>(s + r * cols, static_cast<Eigen::Index>(cols));
      if (cols == 0) continue;
      row = (row - row.maxCoeff()).exp();
      row /= row.sum();
    }
  }

  /// The adjoint of softmax_rows, scaled: dp <- scale * p * (dp - rowsum(dp * p)).
  template <class T>
  static void softmax_backward_rows(const T* p, T* dp, std::int64_t rows, std::int64_t cols, T scale) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto P = host::ConstArrayMap<T>(p + r * cols, static_cast<Eigen::Index>(cols));
      auto D = host::ArrayMap<T>(dp + r * cols, static_cast<Eigen::Index>(cols));
      const T dot = (D * P).sum();
      D = scale * P * (D - dot);
    }
  }

  /// One Adam step over n elements of a parameter, its gradient and moments
  /// (optim::adam_update_at; the Cuda device runs it as one fused kernel).
  template <class T>
  static void adam_update(T* p, T* m, T* v, const T* g, std::int64_t n, const optim::AdamStep& s) {
    for (std::int64_t i = 0; i < n; ++i) optim::adam_update_at(p, m, v, g, i, s);
  }

  ///@{
  /// Layer norm and RMS norm over the last dim of x (rows x cols), looping the
  /// row and column functions of device/norm_ops.hpp (the Cuda device runs the
  /// same functions in kernels): the forward with each row's mean and rstd
  /// kept for the backward, the input's gradient, the weight's and bias's
  /// (db may be null).
  template <class T>
  static void norm_forward(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, std::int64_t rows,
                           std::int64_t cols, T eps, bool rms) {
    for (std::int64_t r = 0; r < rows; ++r) {
      norms::row_stats(x + r * cols, cols, eps, rms, mean + r, rstd + r);
      norms::normalize_row(x + r * cols, w, b, cols, mean[r], rstd[r], y + r * cols);
    }
  }
  template <class T>
  static void norm_backward_input(const T* x, const T* w, const T* g, const T* mean, const T* rstd, T* dx,
                                  std::int64_t rows, std::int64_t cols, bool rms) {
    for (std::int64_t r = 0; r < rows; ++r)
      norms::normalize_row_backward(x + r * cols, w, g + r * cols, cols, mean[r], rstd[r], rms, dx + r * cols);
  }
  template <class T>
  static void norm_backward_weight(const T* x, const T* g, const T* mean, const T* rstd, T* dw, T* db,
                                   std::int64_t rows, std::int64_t cols) {
    for (std::int64_t c = 0; c < cols; ++c) norms::weight_grad_column(x, g, mean, rstd, rows, cols, c, dw, db);
  }
  ///@}

  ///@{
  /// The token layers' loops over the element and row functions of
  /// device/token_ops.hpp (the Cuda device runs the same functions in kernels):
  /// embedding's lookup into out (tokens x width) and its scatter-add into
  /// dtable; cross-entropy's row max, its packed (sum of exp, target logit)
  /// pair per row, and its logit gradient; attention's causal mask over
  /// `blocks` (seq x seq) score blocks. `first` is the global index of the
  /// rank's first table row or logit column.
  template <class T, class I>
  static void embedding(const T* table, const I* ids, T* out, std::int64_t tokens, std::int64_t width,
                        std::int64_t first, std::int64_t rows) {
    for (std::int64_t i = 0; i < tokens * width; ++i) out[i] = tokens::embedding_at(table, ids, i, width, first, rows);
  }
  template <class T, class I>
  static void embedding_backward(T* dtable, const I* ids, const T* g, std::int64_t tokens, std::int64_t width,
                                 std::int64_t first, std::int64_t rows) {
    for (std::int64_t i = 0; i < tokens * width; ++i)
      tokens::embedding_grad_at(dtable, ids, g, i, width, first, rows, [](T* p, T v) { *p += v; });
  }
  template <class T>
  static void causal_mask(T* scores, std::int64_t blocks, std::int64_t seq) {
    for (std::int64_t i = 0; i < blocks * seq * seq; ++i) tokens::causal_mask_at(scores, i, seq);
  }
  template <class T>
  static void row_max(const T* logits, T* max, std::int64_t rows, std::int64_t cols) {
    for (std::int64_t t = 0; t < rows; ++t) max[t] = tokens::row_max(logits + t * cols, cols);
  }
  template <class T, class I>
  static void sum_exp_and_target(const T* logits, const I* targets, const T* max, T* sum_exp, T* target_logit,
                                 std::int64_t rows, std::int64_t cols, std::int64_t first) {
    for (std::int64_t t = 0; t < rows; ++t)
      tokens::row_sum_exp_and_target(logits + t * cols, cols, first, max[t], targets[t], sum_exp + t, target_logit + t);
  }
  template <class T, class I>
  static void cross_entropy_backward(const T* logits, const I* targets, const T* max, const T* sum_exp, const T* scale,
                                     T* dlogits, std::int64_t rows, std::int64_t cols, std::int64_t first) {
    for (std::int64_t i = 0; i < rows * cols; ++i)
      dlogits[i] = tokens::cross_entropy_grad_at(logits, targets, max, sum_exp, scale, i, cols, first);
  }
  ///@}
};

template <class T>
void Host::gemm(const GemmShape& g, T alpha, const T* a, const T* b, T beta, T* c) {
  using M = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<>;
  const auto ix = [](std::int64_t v) { return static_cast<Eigen::Index>(v); };
  if (g.m == 0 || g.n == 0) return;
  // Eigen reads its thread count at each product (it takes effect with OpenMP).
  Eigen::setNbThreads(host::threads());
  for (std::int64_t i = 0; i < g.batch; ++i) {
    Eigen::Map<M, 0, Stride> C(c + i * g.stride_c, ix(g.m), ix(g.n), Stride(ix(g.ldc)));
    if (beta == T(0))
      C.setZero();
    else if (beta != T(1))
      C *= beta;
    if (g.k == 0) continue;
    Eigen::Map<const M, 0, Stride> A(a + i * g.stride_a, ix(g.ta ? g.k : g.m), ix(g.ta ? g.m : g.k), Stride(ix(g.lda)));
    Eigen::Map<const M, 0, Stride> B(b + i * g.stride_b, ix(g.tb ? g.n : g.k), ix(g.tb ? g.k : g.n), Stride(ix(g.ldb)));
    if (g.ta && g.tb)
      C.noalias() += alpha * A.transpose() * B.transpose();
    else if (g.ta)
      C.noalias() += alpha * A.transpose() * B;
    else if (g.tb)
      C.noalias() += alpha * A * B.transpose();
    else
      C.noalias() += alpha * A * B;
  }
}

static_assert(Device<Host>);
static_assert(CollectiveBackend<mpi::Communicator>);

template <class T>
T Host::sum(const T* x, std::int64_t n) {
  return n == 0 ? T(0) : host::ConstArrayMap<T>(x, static_cast<Eigen::Index>(n)).sum();
}

// Compiled once into the library (src/instances.cpp): Eigen's product and
// reduction kernels are the heaviest code a translation unit would otherwise
// compile for itself.
extern template void Host::gemm<float>(const GemmShape&, float, const float*, const float*, float, float*);
extern template void Host::gemm<double>(const GemmShape&, double, const double*, const double*, double, double*);
extern template float Host::sum<float>(const float*, std::int64_t);
extern template double Host::sum<double>(const double*, std::int64_t);

}  // namespace shardex
