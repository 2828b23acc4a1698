// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The `Host` device: tensors in host memory, local math through Eigen,
/// communication through MPI. A model of `Device` (device/device.hpp): the
/// primitives every lowering plan needs (allocate, zero, copy a block of a
/// strided array) and the local math of the expression nodes; the Cuda device
/// provides the same set with cuBLAS and kernels.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>

#include "shardex/backend/mpi/communicator.hpp"
#include "shardex/core/counters.hpp"
#include "shardex/device/device.hpp"
#include "shardex/device/host/eigen.hpp"
#include "shardex/device/host/gemm_kernels.hpp"
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

  /// Batched row-major products (see GemmShape), through Eigen or the BLAS,
  /// whichever was measured faster for the shape's class
  /// (device/host/gemm_kernels.hpp). Compiled into the library, for float and double.
  template <class T>
  static void gemm(const GemmShape& g, T alpha, const T* a, const T* b, T beta, T* c);
  /// The name of the kernel gemm runs for `g` ("eigen", "openblas"), which explain prints.
  template <class T>
  static const char* gemm_kernel(const GemmShape& g);

  /// out (cols x rows) = in (rows x cols) transposed.
  template <class T>
  static void transpose_2d(const T* in, T* out, std::int64_t rows, std::int64_t cols) {
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
  }

  /// out (outer, inner) = the sum over the middle dim of in (outer, extent, inner).
  template <class T>
  static void sum_middle(const T* in, T* out, std::int64_t outer, std::int64_t extent, std::int64_t inner) {
    // Eigen's vectorized reductions and row additions (a scalar loop into
    // memory was most of a norm's training step in bench/layers.cpp).
    const auto n = static_cast<Eigen::Index>(inner);
    for (std::int64_t o = 0; o < outer; ++o) {
      if (inner == 1) {
        out[o] = host::ConstArrayMap<T>(in + o * extent, static_cast<Eigen::Index>(extent)).sum();
        continue;
      }
      auto row = host::ArrayMap<T>(out + o * inner, n);
      row.setZero();
      for (std::int64_t j = 0; j < extent; ++j) row += host::ConstArrayMap<T>(in + (o * extent + j) * inner, n);
    }
  }

  /// out (outer, extent, inner) = g (outer, inner) repeated along the middle dim.
  template <class T>
  static void broadcast_middle(const T* g, T* out, std::int64_t outer, std::int64_t extent, std::int64_t inner) {
    for (std::int64_t o = 0; o < outer; ++o) {
      if (inner == 1) {  // a sum over the last dim (or all): one value per row, not a copy per element
        host::ArrayMap<T>(out + o * extent, static_cast<Eigen::Index>(extent)).setConstant(g[o]);  // vectorized
        continue;
      }
      for (std::int64_t j = 0; j < extent; ++j)
        std::copy(g + o * inner, g + (o + 1) * inner, out + (o * extent + j) * inner);
    }
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
  /// Layer norm and RMS norm over the last dim of x (rows x cols): the forward
  /// with each row's mean and rstd kept for the backward, the input's
  /// gradient, the weight's and bias's (db may be null). The formulas are the
  /// row and column functions of device/norm_ops.hpp (the Cuda device runs
  /// those in kernels); here they are Eigen array expressions over whole rows,
  /// vectorized, and the weight's gradient adds row by row instead of walking
  /// columns (a scalar loop was 40x the memory-bandwidth floor).
  template <class T>
  static void norm_forward(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, std::int64_t rows,
                           std::int64_t cols, T eps, bool rms) {
    if (cols == 0) {
      std::fill(mean, mean + rows, T(0));
      std::fill(rstd, rstd + rows, T(1) / std::sqrt(eps));
      return;
    }
    const auto n = static_cast<Eigen::Index>(cols);
    const auto W = host::ConstArrayMap<T>(w, n);
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto X = host::ConstArrayMap<T>(x + r * cols, n);
      const T m = rms ? T(0) : X.mean();
      const T v = (X - m).square().mean();  // two passes: no cancellation of E[x^2] - m^2
      mean[r] = m;
      rstd[r] = T(1) / std::sqrt(v + eps);
      auto Y = host::ArrayMap<T>(y + r * cols, n);
      if (b)
        Y = (X - m) * rstd[r] * W + host::ConstArrayMap<T>(b, n);
      else
        Y = (X - m) * rstd[r] * W;
    }
  }
  template <class T>
  static void norm_backward_input(const T* x, const T* w, const T* g, const T* mean, const T* rstd, T* dx,
                                  std::int64_t rows, std::int64_t cols, bool rms) {
    if (cols == 0) return;
    const auto n = static_cast<Eigen::Index>(cols);
    const auto W = host::ConstArrayMap<T>(w, n);
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto X = host::ConstArrayMap<T>(x + r * cols, n);
      const auto G = host::ConstArrayMap<T>(g + r * cols, n);
      const T m = mean[r], s = rstd[r];
      const T a = rms ? T(0) : (G * W).sum() / static_cast<T>(cols);
      const T c = (G * W * (X - m)).sum() * s / static_cast<T>(cols);
      host::ArrayMap<T>(dx + r * cols, n) = s * (G * W - a - (X - m) * (s * c));
    }
  }
  /// The input's, the weight's and the bias's gradients in one pass over the
  /// rows (each row read once from memory; db may be null): what
  /// norm_backward_input and norm_backward_weight compute, as nn/norm.hpp runs
  /// it on a device that has it.
  template <class T>
  static void norm_backward_fused(const T* x, const T* w, const T* g, const T* mean, const T* rstd, T* dx, T* dw, T* db,
                                  std::int64_t rows, std::int64_t cols, bool rms) {
    const auto n = static_cast<Eigen::Index>(cols);
    auto DW = host::ArrayMap<T>(dw, n);
    DW.setZero();
    if (db) host::ArrayMap<T>(db, n).setZero();
    if (cols == 0) return;
    const auto W = host::ConstArrayMap<T>(w, n);
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto X = host::ConstArrayMap<T>(x + r * cols, n);
      const auto G = host::ConstArrayMap<T>(g + r * cols, n);
      const T m = mean[r], s = rstd[r];
      const T a = rms ? T(0) : (G * W).sum() / static_cast<T>(cols);
      const T c = (G * W * (X - m)).sum() * s / static_cast<T>(cols);
      host::ArrayMap<T>(dx + r * cols, n) = s * (G * W - a - (X - m) * (s * c));
      DW += G * (X - m) * s;
      if (db) host::ArrayMap<T>(db, n) += G;
    }
  }
  template <class T>
  static void norm_backward_weight(const T* x, const T* g, const T* mean, const T* rstd, T* dw, T* db,
                                   std::int64_t rows, std::int64_t cols) {
    const auto n = static_cast<Eigen::Index>(cols);
    auto DW = host::ArrayMap<T>(dw, n);
    DW.setZero();
    for (std::int64_t r = 0; r < rows; ++r)
      DW += host::ConstArrayMap<T>(g + r * cols, n) * (host::ConstArrayMap<T>(x + r * cols, n) - mean[r]) * rstd[r];
    if (!db) return;
    auto DB = host::ArrayMap<T>(db, n);
    DB.setZero();
    for (std::int64_t r = 0; r < rows; ++r) DB += host::ConstArrayMap<T>(g + r * cols, n);
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
    // What causal_mask_at does per element, a row at a time: no division per element.
    for (std::int64_t row = 0; row < blocks * seq; ++row)
      std::fill(scores + row * seq + row % seq + 1, scores + (row + 1) * seq, -std::numeric_limits<T>::infinity());
  }
  // Cross-entropy's row passes are Eigen array expressions, as softmax_rows
  // is: its exp is vectorized, a scalar exp per logit was most of the step;
  // the element functions of device/token_ops.hpp define what they compute.
  template <class T>
  static void row_max(const T* logits, T* max, std::int64_t rows, std::int64_t cols) {
    for (std::int64_t t = 0; t < rows; ++t)
      max[t] = cols == 0 ? -std::numeric_limits<T>::infinity()
                         : host::ConstArrayMap<T>(logits + t * cols, static_cast<Eigen::Index>(cols)).maxCoeff();
  }
  template <class T, class I>
  static void sum_exp_and_target(const T* logits, const I* targets, const T* max, T* sum_exp, T* target_logit,
                                 std::int64_t rows, std::int64_t cols, std::int64_t first) {
    for (std::int64_t t = 0; t < rows; ++t) {
      const T* row = logits + t * cols;
      sum_exp[t] = (host::ConstArrayMap<T>(row, static_cast<Eigen::Index>(cols)) - max[t]).exp().sum();
      const std::int64_t c = tokens::owned_row(targets[t], first, cols);
      target_logit[t] = c < 0 ? T(0) : row[c];
    }
  }
  template <class T, class I>
  static void cross_entropy_backward(const T* logits, const I* targets, const T* max, const T* sum_exp, const T* scale,
                                     T* dlogits, std::int64_t rows, std::int64_t cols, std::int64_t first) {
    for (std::int64_t t = 0; t < rows; ++t) {
      const auto n = static_cast<Eigen::Index>(cols);
      host::ArrayMap<T>(dlogits + t * cols, n) =
          (host::ConstArrayMap<T>(logits + t * cols, n) - max[t]).exp() * (scale[t] / sum_exp[t]);
      const std::int64_t c = tokens::owned_row(targets[t], first, cols);
      if (c >= 0) dlogits[t * cols + c] -= scale[t];
    }
  }
  ///@}
};

static_assert(Device<Host>);
static_assert(CollectiveBackend<mpi::Communicator>);

template <class T>
T Host::sum(const T* x, std::int64_t n) {
  return n == 0 ? T(0) : host::ConstArrayMap<T>(x, static_cast<Eigen::Index>(n)).sum();
}

// Compiled once into the library (src/instances.cpp, src/host_gemm.cpp): the product and
// reduction kernels are the heaviest code a translation unit would otherwise
// compile for itself.
extern template void Host::gemm<float>(const GemmShape&, float, const float*, const float*, float, float*);
extern template void Host::gemm<double>(const GemmShape&, double, const double*, const double*, double, double*);
extern template const char* Host::gemm_kernel<float>(const GemmShape&);
extern template const char* Host::gemm_kernel<double>(const GemmShape&);
extern template float Host::sum<float>(const float*, std::int64_t);
extern template double Host::sum<double>(const double*, std::int64_t);

}  // namespace shardex
